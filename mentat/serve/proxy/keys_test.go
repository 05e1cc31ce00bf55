package proxy

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
)

// keyedRouter is a router with keys on: a store from the entries given
// (id → extra TOML lines), each request authenticated as the app's
// middleware does before the proxy sees it. It returns the secrets by id.
func keyedRouter(t testing.TB, cfg Config, entries map[string]string) (*router, *keys.Store, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	secrets := map[string]string{}
	var file strings.Builder
	for id, extra := range entries {
		s, h, err := keys.NewSecret(keys.Router)
		if err != nil {
			t.Fatal(err)
		}
		secrets[id] = s
		fmt.Fprintf(&file, "[[key]]\nid = %q\nhash = %q\n%s\n", id, h, extra)
	}
	path := filepath.Join(dir, "keys.toml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := keys.Open(path, keys.Options{Product: keys.Router, Log: logx.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keys = true
	rt := newRouterWith(t, cfg, func(s *http.Server) {
		next := s.Handler
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, rej := store.Authenticate(r.Header, "127.0.0.1")
			if rej != nil {
				WriteRejection(w, rej, "")
				return
			}
			next.ServeHTTP(w, r.WithContext(keys.NewContext(r.Context(), k)))
		})
	})
	return rt, store, secrets
}

func (rt *router) keyedPost(t *testing.T, secret, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", rt.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", jsonCT)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := rt.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func usageOf(t *testing.T, s *keys.Store, id string) keys.Usage {
	t.Helper()
	for _, u := range s.Usage() {
		if u.ID == id {
			return u
		}
	}
	t.Fatalf("no usage for key %s", id)
	return keys.Usage{}
}

// usageEngine answers chat like vLLM: JSON with usage, or a stream whose
// last frame carries usage only when the body asks for it.
func usageEngine(t *testing.T) (*engine, func() []http.Header) {
	var mu sync.Mutex
	var headers []http.Header
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
		if !strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c","choices":[{"message":{"content":"a b c"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", " b"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		if strings.Contains(string(b), "include_usage") {
			io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	return e, func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), headers...)
	}
}

// With keys on, the proxy applies the key's scope before anything else
// (403, nothing sent upstream, whether the model routes or not), charges
// the answer's usage to the key, never forwards the client's key, and
// sends the group's upstream key instead.
func TestProxyKeys(t *testing.T) {
	eng, seen := usageEngine(t)
	upFile := filepath.Join(t.TempDir(), "up.toml")
	os.WriteFile(upFile, []byte("[groups]\n\"g-m\" = \"engine-key\"\n"), 0o600)
	up, err := upstream.Open(upFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, store, sk := keyedRouter(t, Config{Upstream: up}, map[string]string{"a": `models = ["m"]`, "all": ""})
	rt.publish(t, map[string]string{"m": eng.base(), "m2": eng.base()}, nil)

	resp := rt.keyedPost(t, sk["a"], `{"model":"m","messages":[]}`)
	readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("in scope: %d", resp.StatusCode)
	}
	h := seen()
	if len(h) != 1 || h[0].Get("Authorization") != "Bearer engine-key" {
		t.Fatalf("the engine got Authorization %q, want the upstream key", h[0].Get("Authorization"))
	}
	u := usageOf(t, store, "a")
	if u.PromptTokens != 7 || u.CompletionTokens != 3 || u.CachedTokens != 4 || u.CountedTokens != 0 || u.Requests["200"] != 1 {
		t.Fatalf("usage of a: %+v", u)
	}

	// Out of scope: a model that routes (m2) and one that does not.
	for _, m := range []string{"m2", "nothing-here"} {
		resp := rt.keyedPost(t, sk["a"], `{"model":"`+m+`"}`)
		e := decodeError(t, resp)
		if resp.StatusCode != 403 || e.Error.Code != "model_not_allowed" || !strings.Contains(e.Error.Message, "key a may not use model") {
			t.Fatalf("%s out of scope: %d %+v", m, resp.StatusCode, e)
		}
	}
	if n := len(seen()); n != 1 {
		t.Fatalf("a refused request reached the engine (%d requests)", n)
	}
	// A key of all models asking for an absent one: the 404 as before.
	resp = rt.keyedPost(t, sk["all"], `{"model":"nothing-here"}`)
	if e := decodeError(t, resp); resp.StatusCode != 404 || e.Error.Code != "model_not_found" {
		t.Fatalf("absent model: %d %+v", resp.StatusCode, e)
	}
	if u := usageOf(t, store, "all"); u.Requests["404"] != 1 {
		t.Fatalf("the 404 was not counted: %+v", u.Requests)
	}

	// Streams: with include_usage the engine's usage; without, the
	// router's own count (2 frames with content), marked counted.
	for _, b := range []string{`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`} {
		resp := rt.keyedPost(t, sk["all"], b)
		if got := readAllString(t, resp.Body); resp.StatusCode != 200 || !strings.HasSuffix(got, "data: [DONE]\n\n") {
			t.Fatalf("stream: %d %q", resp.StatusCode, got)
		}
		resp.Body.Close()
	}
	est := PromptEstimate(len(`[{"role":"user","content":"hello"}]`))
	u = usageOf(t, store, "all")
	if u.PromptTokens != uint64(9+est) || u.CompletionTokens != 2+2 || u.CountedTokens != uint64(est+2) {
		t.Fatalf("stream usage of all: %+v (estimate %d)", u, est)
	}
	for _, h := range seen() {
		if a := h.Get("Authorization"); a != "Bearer engine-key" {
			t.Fatalf("the engine got Authorization %q", a)
		}
	}
}

// With keys on and no upstream key, the engine gets no Authorization at
// all; a key over its rpm is refused with 429 and the retry headers
// before anything is sent.
func TestProxyKeysLimits(t *testing.T) {
	eng, seen := usageEngine(t)
	rt, store, sk := keyedRouter(t, Config{}, map[string]string{"lim": "rpm = 1"})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.keyedPost(t, sk["lim"], `{"model":"m"}`)
	readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Requests") != "1" {
		t.Fatalf("first: %d %v", resp.StatusCode, resp.Header)
	}
	if a, ok := seen()[0]["Authorization"]; ok {
		t.Fatalf("the client's key reached the engine: %q", a)
	}
	resp = rt.keyedPost(t, sk["lim"], `{"model":"m"}`)
	e := decodeError(t, resp)
	if resp.StatusCode != 429 || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" ||
		resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
		t.Fatalf("second: %d %+v %v", resp.StatusCode, e, resp.Header)
	}
	if len(seen()) != 1 {
		t.Fatal("a refused request reached the engine")
	}
	if u := usageOf(t, store, "lim"); u.Requests["200"] != 1 || u.Requests["429"] != 1 || u.Rejections["rpm"] != 1 || u.InFlight != 0 {
		t.Fatalf("usage: %+v", u)
	}
}

// An engine cannot speak for a key's budget: rate-limit headers it sends
// are dropped and the key's, set at admission, reach the client. The
// answer is dated by the router, not the engine (as Nginx's proxy does).
func TestProxyKeysEngineHeaders(t *testing.T) {
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("X-Ratelimit-Remaining-Tokens", "42")
		h.Set("X-Ratelimit-Limit-Requests", "7")
		h.Set("X-Ratelimit-Reset-Images", "1s")
		h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	rt, _, sk := keyedRouter(t, Config{}, map[string]string{"k": "rpm = 100\ntpm = 1000"})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.keyedPost(t, sk["k"], `{"model":"m"}`)
	readAllString(t, resp.Body)
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("X-Ratelimit-Limit-Requests") != "100" || h.Get("X-Ratelimit-Limit-Tokens") != "1000" ||
		h.Get("X-Ratelimit-Remaining-Tokens") != "1000" || h.Get("X-Ratelimit-Remaining-Requests") != "99" || len(h.Values("X-Ratelimit-Limit-Requests")) != 1 {
		t.Fatalf("the client got %d with %v", resp.StatusCode, h)
	}
	if _, ok := h["X-Ratelimit-Reset-Images"]; ok {
		t.Fatalf("the engine's X-Ratelimit-Reset-Images reached the client: %v", h)
	}
	if d := h.Get("Date"); d == "" || strings.Contains(d, "2006") {
		t.Fatalf("Date %q: want the router's", d)
	}
}
