package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// echoModel answers with what it saw of the request, as JSON, and passes
// statuses through: /busy is a 429 with Retry-After, /stream an event
// stream of unknown length.
func echoModel(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Mortred-Model", "forged")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"uri": r.RequestURI, "len": len(body), "body": string(body), "ct": r.Header.Get("Content-Type"),
			"auth": r.Header.Get("Authorization"), "xff": r.Header.Get("X-Forwarded-For"), "rid": r.Header.Get("X-Request-ID"),
			"ua": r.Header.Get("User-Agent"), "accept": r.Header.Get("Accept"), "cookie": r.Header.Get("Cookie"),
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFastMatchesPlain sends the same requests through the fast path and
// through net/http alone: the client gets the same status, body and
// fields, the model server the same request.
func TestFastMatchesPlain(t *testing.T) {
	m := echoModel(t)
	addr := strings.TrimPrefix(m.URL, "http://")
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	ups := []Upstream{{ID: "A", URI: "/a", Addr: addr, Token: modelTok}, {ID: "B", URI: "/busy", Addr: addr},
		{ID: "S", URI: "/stream", Addr: addr}, {ID: "D", URI: "/down", Addr: deadAddr}}
	fast, _, _ := startGateway(t, true, ups...)
	plain, _, _ := startGateway(t, false, ups...)
	big := strings.Repeat("x", 2<<20)
	cases := []struct{ path, token, body, xff, rid string }{
		{"/v1/models/A/infer", tok, `{"images":["x"]}`, "", "r-1"},
		{"/v1/models/A/infer?trace=1&x=%20", tok, `{}`, "203.0.113.9", ""},
		{"/a", tok, `{"legacy":true}`, "", ""},
		{"/v1/models/B/infer", tok, `{}`, "", ""},
		{"/v1/models/S/infer", tok, `{}`, "", ""},
		{"/v1/models/D/infer", tok, `{}`, "", ""},
		{"/v1/models/A/infer", "wrong", `{}`, "", ""},
		{"/v1/models/Z/infer", tok, `{}`, "", ""},
		{"/nowhere", tok, `{}`, "", ""},
		{"/v1/models/A/infer", tok, big, "", ""},
	}
	for _, c := range cases {
		var answers [2]string
		for i, gw := range []*testServer{fast, plain} {
			req, _ := http.NewRequest(http.MethodPost, gw.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json")
			req.Header.Set("Cookie", "session=1")
			if c.xff != "" {
				req.Header.Set("X-Forwarded-For", c.xff)
			}
			if c.rid != "" {
				req.Header.Set("X-Request-ID", c.rid)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			h := resp.Header
			answers[i] = fmt.Sprintf("%d %s ct=%q ra=%q model=%q www=%q cc=%q te=%v", resp.StatusCode, b, h.Get("Content-Type"),
				h.Get("Retry-After"), h.Values("X-Mortred-Model"), h.Get("WWW-Authenticate"), h.Get("Cache-Control"), resp.TransferEncoding)
			if h.Get("Date") == "" {
				t.Errorf("%s: no Date field", c.path)
			}
		}
		if answers[0] != answers[1] {
			t.Errorf("%s:\nfast  %.600s\nplain %.600s", c.path, answers[0], answers[1])
		}
	}
}

// TestFastSlowBodyGoesToNetHTTP: a body that has not all arrived with the
// head is not for the fast path; net/http streams it to the model server
// (see TestAnswerBeforeBodyEndsTheExchange for what that buys).
func TestFastSlowBodyGoesToNetHTTP(t *testing.T) {
	m := echoModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "A", URI: "/a", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	c, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "POST /v1/models/A/infer HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\nContent-Length: 10\r\n\r\n01234", tok)
	time.Sleep(50 * time.Millisecond) // the rest comes later, as from a slow client
	io.WriteString(c, "56789")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"body":"0123456789"`) {
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
}
