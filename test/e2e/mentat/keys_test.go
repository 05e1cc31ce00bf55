package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/openaijs"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// newKey makes a fresh router secret and its key-file entry.
func newKey(t *testing.T, id, extra string) (secret, entry string) {
	t.Helper()
	secret, hash, err := keys.NewSecret(keys.Router)
	if err != nil {
		t.Fatal(err)
	}
	return secret, fmt.Sprintf("[[key]]\nid = %q\nhash = %q\n%s\n", id, hash, extra)
}

// writeFile writes a key file: atomically (a new file renamed over the
// old, as an editor or `keys new` does) or in place (truncated and
// rewritten, so that a reader may see it empty or half written).
func writeFile(t *testing.T, path, content string, atomic bool) {
	t.Helper()
	if !atomic {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// keyed does one request with a bearer key and returns status and body.
func keyed(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitKeyedModels waits until /v1/models lists exactly want to key.
func (r *router) waitKeyedModels(t *testing.T, key string, want ...string) {
	t.Helper()
	slices.Sort(want)
	eventually(t, fmt.Sprintf("router to list %v to the key", want), func() bool {
		code, body := keyed(t, "GET", r.url+"/v1/models", key, "")
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return false
		}
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		slices.Sort(ids)
		return slices.Equal(ids, want)
	})
}

// metrics reads the router's /metrics.
func (r *router) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sum adds the values of family name's series whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var total float64
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		}
	}
	return total
}

// recorder is a front the test puts between the router and an engine:
// it relays everything and records the Authorization header of each
// request the router sent.
type recorder struct {
	mu   sync.Mutex
	seen []string // "METHOD path Authorization"
}

func (rec *recorder) start(t *testing.T, port, enginePort int) {
	t.Helper()
	target, _ := url.Parse("http://127.0.0.1:" + itoa(enginePort))
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:"+itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		rec.mu.Unlock()
		// The body is read into memory first, as the router itself does
		// (httpx.ReadBody). Relayed as the server's body, it would be the
		// Transport's to finish writing while net/http's HTTP/1 server
		// drains and closes it as soon as the engine's answer head goes
		// out (golang/go#15527, #40747): enginesim sends a stream's head
		// at once, and if the Transport's last read of the body (checking
		// it is no longer than its Content-Length) comes after that, it
		// fails ("invalid Read on closed Body") and the Transport closes
		// the engine connection under the stream it is relaying.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.seen)
}

// The official OpenAI Node clients (both pinned majors) against the real
// router with a key file of keys of different scopes and limits, and
// engines that want keys of their own (enginesim --api-key, vLLM's):
// models listed by scope, AuthenticationError for a bad key,
// PermissionDeniedError outside the scope, a 429 the client retries by
// itself after the advertised wait, streamed usage charged to the right
// key; the engines get only the router's upstream keys.
func TestKeysWithOpenAIClients(t *testing.T) {
	dir := t.TempDir()
	scoped, e1 := newKey(t, "team-a", `models = ["alpha-*"]`)
	wide, e2 := newKey(t, "team-b", "")
	tiny, e3 := newKey(t, "tiny", "rpm = 30")
	bad, _ := newKey(t, "nobody", "")
	keyFile := filepath.Join(dir, "keys.toml")
	writeFile(t, keyFile, e1+e2+e3, true)
	upAlpha, upBeta := "up-alpha-"+itoa(os.Getpid()), "up-beta-"+itoa(os.Getpid())
	upFile := filepath.Join(dir, "upstream.toml")
	writeFile(t, upFile, fmt.Sprintf("[groups]\nalpha = %q\nbeta = %q\n", upAlpha, upBeta), true)

	d := startDaemon(t, "daemon")
	// alpha is announced on the recorder's port, which relays to the
	// engine: what the router sends is seen there.
	alpha := &engine{group: "alpha", model: "alpha-1", apiPort: testproc.FreePort(t), args: []string{"--api-key", upAlpha}}
	alpha.port = testproc.FreePort(t)
	rec := &recorder{}
	rec.start(t, alpha.apiPort, alpha.port)
	beta := &engine{group: "beta", model: "beta-1", args: []string{"--api-key", upBeta}}
	startAgent(t, d.addr, alpha)
	startAgent(t, d.addr, beta)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr, "SERVE_KEYS_FILE="+keyFile, "SERVE_UPSTREAM_KEYS_FILE="+upFile,
		"SERVE_CORS_ORIGINS=https://app.example")
	// Admitted at all only because the probes carry the upstream keys.
	r.waitKeyedModels(t, wide, "alpha-1", "beta-1")

	// A listed origin's preflight is answered before any key is asked
	// for; another origin's is refused, with no CORS header.
	for _, c := range []struct {
		origin string
		code   int
		allow  string
	}{{"https://app.example", 204, "https://app.example"}, {"https://evil.example", 403, ""}} {
		req, _ := http.NewRequest("OPTIONS", r.url+"/v1/chat/completions", nil)
		req.Header.Set("Origin", c.origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Access-Control-Allow-Origin") != c.allow ||
			(c.allow != "" && resp.Header.Get("Access-Control-Allow-Credentials") != "true") {
			t.Errorf("preflight from %s: %d %v, want %d allowing %q", c.origin, resp.StatusCode, resp.Header, c.code, c.allow)
		}
	}

	// What stays open, and what does not.
	for _, p := range []string{"/healthz", "/status.json", "/stats.json", "/stats/keys/series.json", "/metrics", "/"} {
		if code, _ := keyed(t, "GET", r.url+p, "", ""); code != 200 {
			t.Errorf("GET %s without a key: %d, want 200 (open)", p, code)
		}
	}
	for _, c := range [][2]string{{"GET", "/v1/models"}, {"POST", "/v1/chat/completions"}, {"POST", "/tokenize"}, {"POST", "/mcp"}, {"GET", "/nope"}} {
		code, body := keyed(t, c[0], r.url+c[1], "", `{"model":"alpha-1"}`)
		if code != 401 || !strings.Contains(body, `"code":"invalid_api_key"`) {
			t.Errorf("%s %s without a key: %d %s, want 401 invalid_api_key", c[0], c[1], code, body)
		}
	}
	if status := r.statusBody(t); strings.Contains(status, upAlpha) || strings.Contains(status, upBeta) {
		t.Fatal("/status.json shows an upstream key")
	}

	messages := `[{"role":"user","content":"count me"}]` // as the clients serialise keys.mjs's messages
	var wantPrompt, wantCompletion, wantCounted, minEstimate int64
	for _, c := range openaijs.Clients {
		got, err := openaijs.RunKeys(c, openaijs.KeysArgs{BaseURL: r.url + "/v1", Model: "alpha-1", Other: "beta-1",
			Scoped: scoped, Wide: wide, Tiny: tiny, Bad: bad})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Listed.Scoped, []string{"alpha-1"}) || !slices.Equal(got.Listed.Wide, []string{"alpha-1", "beta-1"}) {
			t.Errorf("%s: listed %+v", c, got.Listed)
		}
		for _, f := range []struct {
			what string
			got  openaijs.Failure
			want openaijs.Failure
		}{
			{"retrieve outside the scope", got.RetrieveOther, openaijs.Failure{Class: "NotFoundError", Status: 404, Type: "invalid_request_error", Code: "model_not_found"}},
			{"bad key", got.BadKey, openaijs.Failure{Class: "AuthenticationError", Status: 401, Type: "invalid_request_error", Code: "invalid_api_key"}},
			{"chat outside the scope", got.OutOfScope, openaijs.Failure{Class: "PermissionDeniedError", Status: 403, Type: "invalid_request_error", Code: "model_not_allowed"}},
		} {
			if f.got != f.want {
				t.Errorf("%s %s: %+v, want %+v", c, f.what, f.got, f.want)
			}
		}
		if l := got.Limited; l == nil || *l != (openaijs.Failure{Class: "RateLimitError", Status: 429, Type: "requests", Code: "rate_limit_exceeded"}) {
			t.Errorf("%s: rpm refusal %+v", c, l)
		}
		st := got.Retry.Statuses
		if len(st) < 2 || st[0] != 429 || st[len(st)-1] != 200 || got.Retry.Answered != 1 {
			t.Errorf("%s: the retried call's requests %v, answered %d; want 429s then 200", c, st, got.Retry.Answered)
		}
		for i, w := range got.Retry.Waits {
			// The client waits exactly retry-after-ms; Node's timers
			// round to the millisecond.
			if w.AdvertisedMS <= 0 || w.AdvertisedMS >= 60000 || w.WaitedMS < w.AdvertisedMS-1 || w.RetryAfter == "" {
				t.Errorf("%s: retry %d waited %.1f ms after a 429 advertising retry-after-ms %.0f (Retry-After %q)", c, i, w.WaitedMS, w.AdvertisedMS, w.RetryAfter)
			}
		}
		u := got.Streams.Usage
		if u == nil || u.PromptTokens < 1 || u.CompletionTokens != 4 || got.Streams.CountedFrames != 5 {
			t.Fatalf("%s: streams %+v %+v", c, u, got.Streams)
		}
		// The prompt of a stream without usage is estimated from the
		// bytes of the request's messages as the client serialised them,
		// which this test cannot see: it checks the estimate is there (at
		// least the size of messages as keys.mjs writes them) and the
		// rest exactly.
		wantPrompt += u.PromptTokens
		wantCompletion += u.CompletionTokens + got.Streams.CountedFrames
		wantCounted += got.Streams.CountedFrames
		minEstimate += (int64(len(messages)) + 3) / 4
	}

	// The scoped key ran the streams: charged from the usage frame and
	// from the router's count; the wide key ran none.
	fams := r.metrics(t)
	tok := func(id, kind string) int64 {
		return int64(sum(fams, "mentat_serve_key_tokens_total", map[string]string{"key": id, "kind": kind}))
	}
	if p, c, n := tok("team-a", "prompt"), tok("team-a", "completion"), tok("team-a", "counted"); c != wantCompletion ||
		n-wantCounted < minEstimate || p-wantPrompt != n-wantCounted {
		t.Errorf("team-a charged prompt %d completion %d counted %d, want usage prompt %d + an estimate of at least %d, completion %d, counted frames %d + the estimate",
			p, c, n, wantPrompt, minEstimate, wantCompletion, wantCounted)
	}
	if p, c := tok("team-b", "prompt"), tok("team-b", "completion"); p != 0 || c != 0 {
		t.Errorf("team-b charged %d %d, ran nothing", p, c)
	}
	if n := sum(fams, "mentat_serve_key_requests_total", map[string]string{"key": "tiny", "code": "429"}); n < 2 {
		t.Errorf("tiny: %v requests answered 429", n)
	}
	text := r.metricsBody(t)
	for _, s := range []string{scoped, wide, tiny, upAlpha, upBeta} {
		if strings.Contains(text, s) {
			t.Fatal("/metrics shows a secret")
		}
	}

	// /stats.json (the status page's source) carries the same usage per
	// key, in key-file order, and no secret or hash.
	_, statsBody := keyed(t, "GET", r.url+"/stats.json", "", "")
	var doc struct {
		Keys []struct {
			ID               string            `json:"id"`
			Unit             string            `json:"unit"`
			Requests         map[string]uint64 `json:"requests"`
			CompletionTokens int64             `json:"completion_tokens"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(statsBody), &doc); err != nil {
		t.Fatalf("/stats.json: %v", err)
	}
	if len(doc.Keys) != 3 || doc.Keys[0].ID != "team-a" || doc.Keys[1].ID != "team-b" || doc.Keys[2].ID != "tiny" ||
		doc.Keys[0].Unit != "tokens" || doc.Keys[0].CompletionTokens != wantCompletion || doc.Keys[2].Requests["429"] < 2 {
		t.Errorf("/stats.json keys: %s", statsBody)
	}
	for _, s := range []string{scoped, wide, tiny, bad, upAlpha, upBeta, `"hash"`} {
		if strings.Contains(statsBody, s) {
			t.Fatal("/stats.json shows a secret or a hash")
		}
	}
	if code, body := keyed(t, "GET", r.url+"/stats/keys/series.json", "", ""); code != 200 || !strings.Contains(body, `"times":`) {
		t.Errorf("GET /stats/keys/series.json: %d %s", code, body)
	}

	// alpha's engine got exactly the upstream key, on probes and on
	// proxied requests, never a client's.
	seen := rec.requests()
	var posts, probes int
	for _, s := range seen {
		if strings.HasPrefix(s, "GET /metrics ") {
			// vLLM serves /metrics without its API key; the load scrape
			// sends none.
			continue
		}
		if !strings.HasSuffix(s, " Bearer "+upAlpha) {
			t.Errorf("alpha's engine got %q", s)
		}
		for _, secret := range []string{scoped, wide, tiny, bad} {
			if strings.Contains(s, secret) {
				t.Fatalf("a client key reached the engine: %q", s)
			}
		}
		switch {
		case strings.HasPrefix(s, "POST /v1/chat/completions "):
			posts++
		case strings.HasPrefix(s, "GET /v1/models "):
			probes++
		}
	}
	if posts == 0 || probes == 0 {
		t.Errorf("alpha's engine saw %d chats and %d probes: %v", posts, probes, seen)
	}
}

func (r *router) statusBody(t *testing.T) string {
	t.Helper()
	_, body := keyed(t, "GET", r.url+"/status.json", "", "")
	return body
}

func (r *router) metricsBody(t *testing.T) string {
	t.Helper()
	_, body := keyed(t, "GET", r.url+"/metrics", "", "")
	return body
}

// A key file rewritten 24 times, atomically and in place, with and
// without SIGHUP, while four clients send requests, costs no request;
// a file broken at reload keeps the keys in force.
func TestKeysFileRewrittenUnderLoad(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.toml")
	var secrets []string
	var base string
	for i := range 4 {
		s, e := newKey(t, "load-"+itoa(i), `models = ["m-*"]`)
		secrets = append(secrets, s)
		base += e
	}
	writeFile(t, keyFile, base, true)
	d := startDaemon(t, "daemon")
	e := &engine{group: "g", model: "m-1", itl: "1ms"}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr, "SERVE_KEYS_FILE="+keyFile)
	r.waitKeyedModels(t, secrets[0], "m-1")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	counts := make([]int, 4)
	body := `{"model":"m-1","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 4 {
		wg.Go(func() {
			for n := 0; n < 400; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+secrets[i])
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				counts[i]++
				if resp.StatusCode != 200 {
					failures = append(failures, fmt.Sprintf("client %d: %d %s", i, resp.StatusCode, b))
				}
				mu.Unlock()
			}
		})
	}
	// 24 rewrites: each adds a different extra key; half atomic, half in
	// place; every other one followed by SIGHUP, the rest left to the
	// store's polling.
	var last string
	for n := range 24 {
		var extra string
		last, extra = newKey(t, "extra-"+itoa(n), "rpm = "+itoa(100+n))
		writeFile(t, keyFile, base+extra, n%2 == 0)
		if n%4 < 2 {
			if err := r.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(60 * time.Millisecond)
	}
	// The last file is in force once a reload took it.
	eventually(t, "the last rewrite's key to work", func() bool {
		code, _ := keyed(t, "GET", r.url+"/v1/models", last, "")
		return code == 200
	})
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed while the file was rewritten; first: %s", len(failures), failures[0])
	}
	for i, n := range counts {
		if n == 0 {
			t.Fatalf("client %d sent nothing: %v", i, counts)
		}
	}

	// A broken file at reload: the keys in force stay, and it is counted.
	writeFile(t, keyFile, base+"[[key]\nid = \"broken\n", false)
	if err := r.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed reload to be counted", func() bool {
		return sum(r.metrics(t), "mentat_serve_keys_reload_failures_total", nil) >= 1
	})
	for _, s := range append(slices.Clone(secrets), last) {
		if code, body := keyed(t, "POST", r.url+"/v1/chat/completions", s, body); code != 200 {
			t.Fatalf("after a broken reload: %d %s", code, body)
		}
	}
	if out := r.Output(); strings.Contains(out, secrets[0]) || !strings.Contains(out, "keys_reload_failed") {
		t.Fatalf("the log shows a secret, or no keys_reload_failed:\n%s", out)
	}
}

// A key file that cannot be parsed at start stops the router (exit 1),
// naming file and line.
func TestKeysFileBrokenAtStart(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.toml")
	writeFile(t, keyFile, "[[key]]\nid = \"a\"\nhash = \"nothex\"\n", true)
	p := start(t, "router", routerEnv(testproc.FreePort(t), "MENTAT_DAEMONS=", "SERVE_KEYS_FILE="+keyFile), testproc.Bin(t, "mentatd-serve"))
	code, ok := p.ExitCode(deadline)
	if !ok || code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, ok)
	}
	if out := p.Output(); !strings.Contains(out, "start_failed") || !strings.Contains(out, keyFile+":1") {
		t.Fatalf("the log does not name the file and line:\n%s", out)
	}
}
