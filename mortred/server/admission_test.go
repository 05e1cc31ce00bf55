package server

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

func TestPublicRoutesNeverAuthOrRateLimited(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"rate_limit_qps": "0.01"}})
	for i := 0; i < 20; i++ {
		for _, p := range []string{"/healthz", "/ready", "/openapi.json"} {
			rep := f.do(req{method: http.MethodGet, path: p})
			if rep.code != http.StatusOK {
				t.Fatalf("%s → %d", p, rep.code)
			}
		}
	}
	rep := f.do(req{method: http.MethodPost, path: "/healthz"})
	if rep.code != http.StatusMethodNotAllowed || !strings.Contains(rep.hdr.Get("Allow"), "GET") {
		t.Fatalf("POST /healthz → %d Allow %q", rep.code, rep.hdr.Get("Allow"))
	}
	// The budget is untouched by all of the above.
	checkEnvelope(t, f.infer(images(darkPNG)), envelope.StatusOK, 1)
}

func TestReadyFalseUntilLoaded(t *testing.T) {
	f := start(t, opts{noLoad: true})
	rep := f.do(req{method: http.MethodGet, path: "/ready"})
	if rep.code != http.StatusServiceUnavailable || !strings.Contains(string(rep.body), `"ready":false`) {
		t.Fatalf("/ready before load → %d %s", rep.code, rep.body)
	}
	if rep := f.do(req{method: http.MethodGet, path: "/healthz"}); rep.code != http.StatusOK {
		t.Fatalf("/healthz → %d", rep.code)
	}
	if err := f.srv.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	rep = f.do(req{method: http.MethodGet, path: "/ready"})
	if rep.code != http.StatusOK || !strings.Contains(string(rep.body), `"ready":true`) || !strings.Contains(string(rep.body), `"model":"TESTMODEL"`) {
		t.Fatalf("/ready after load → %d %s", rep.code, rep.body)
	}
}

func TestLoadFailureReported(t *testing.T) {
	f := start(t, opts{noLoad: true, model: "type = \"testmodel\"\nbatch_overhead_ms = -1\n"})
	if err := f.srv.Load(t.Context()); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("Load: %v", err)
	}
	if f.srv.Ready() {
		t.Fatal("ready after a failed load")
	}
}

func TestAuth(t *testing.T) {
	f := start(t, opts{})
	for _, h := range []map[string]string{
		nil,
		{"Authorization": "Bearer"},
		{"Authorization": "Bearer wrong"},
		{"Authorization": "Basic " + token},
		{"Authorization": "Bearer " + token + "x"},
	} {
		for _, p := range []string{inferURI, "/metrics"} {
			m := http.MethodPost
			if p == "/metrics" {
				m = http.MethodGet
			}
			rep := f.do(req{method: m, path: p, hdr: h, body: images(darkPNG)})
			if rep.code != http.StatusUnauthorized || rep.hdr.Get("WWW-Authenticate") != `Bearer realm="Mortred"` {
				t.Fatalf("%s with %v → %d", p, h, rep.code)
			}
		}
	}
	rep := f.do(req{body: images(darkPNG), hdr: map[string]string{"Authorization": "bearer " + token}})
	checkEnvelope(t, rep, envelope.StatusOK, 1)
	if rep := f.do(req{method: http.MethodGet, path: "/metrics", token: token}); rep.code != http.StatusOK {
		t.Fatalf("/metrics with token → %d", rep.code)
	}
}

func TestEmptyTokenClosesInferenceAndMetrics(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"auth_token": `""`}})
	for _, tok := range []string{"", "anything", " "} {
		checkEnvelope(t, f.do(req{token: tok, body: images(darkPNG)}), envelope.StatusUnauthorized, 0)
		if rep := f.do(req{method: http.MethodGet, path: "/metrics", token: tok}); rep.code != http.StatusUnauthorized {
			t.Fatalf("/metrics → %d", rep.code)
		}
	}
	if rep := f.do(req{method: http.MethodGet, path: "/healthz"}); rep.code != http.StatusOK {
		t.Fatalf("/healthz → %d", rep.code)
	}
}

// TestAdmissionOrder checks each adjacent pair of the chain: a request that
// fails two checks gets the earlier one's answer.
func TestAdmissionOrder(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	steps := []struct {
		name string
		keys map[string]string
		req  req
		want envelope.Status
	}{
		{"not found before auth", nil, req{path: "/welcome"}, envelope.StatusNotFound},
		{"auth before method", nil, req{method: http.MethodGet, token: "bad"}, envelope.StatusUnauthorized},
		{"method before readiness and media type", nil, req{method: http.MethodPut, token: token, ctype: "text/plain"}, envelope.StatusMethodNotAllowed},
		{"media type before size", map[string]string{"request_size_limit": "1"}, req{token: token, ctype: "text/plain", body: big}, envelope.StatusUnsupportedMedia},
		{"missing media type", nil, req{token: token, ctype: "-", body: images(darkPNG)}, envelope.StatusUnsupportedMedia},
		{"charset parameter accepted", nil, req{token: token, ctype: "application/json; charset=utf-8", body: images(darkPNG)}, envelope.StatusOK},
		{"size before decode", map[string]string{"request_size_limit": "1"}, req{token: token, body: big}, envelope.StatusTooLarge},
		{"decode before envelope", nil, req{token: token, body: `{"img_data": `}, envelope.StatusJSONDecode},
		{"envelope before empty image", nil, req{token: token, body: `{"images":[""],"x":1}`}, envelope.StatusInvalidRequest},
		{"bad params are the envelope's 422", nil, req{token: token, body: withParams(`{"threshold":1}`, "")}, envelope.StatusInvalidRequest},
		{"empty image before too many", map[string]string{"max_request_items": "1"}, req{token: token, body: images("", "")}, envelope.StatusEmptyImage},
		{"too many", map[string]string{"max_request_items": "1"}, req{token: token, body: images(darkPNG, darkPNG)}, envelope.StatusTooManyItems},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			f := start(t, opts{keys: s.keys})
			rep := f.do(s.req)
			items := 0
			if s.want == envelope.StatusOK {
				items = 1
			}
			checkEnvelope(t, rep, s.want, items)
		})
	}
}

func TestBadParamsPointer(t *testing.T) {
	rep := start(t, opts{}).infer(withParams(`{"delay_ms":"soon","threshold":1}`, darkPNG))
	checkEnvelope(t, rep, envelope.StatusInvalidRequest, 0)
	got := map[string]bool{}
	for _, e := range rep.env.Errors {
		got[e.Pointer] = true
	}
	if !got["/params/delay_ms"] || !got["/params/threshold"] {
		t.Fatalf("%s", rep.body)
	}
}

func TestChunkedBodyOverLimit(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"request_size_limit": "1"}})
	r, _ := http.NewRequest(http.MethodPost, f.ts.URL+inferURI, strings.NewReader(images(b64(make([]byte, 1<<20)))))
	r.ContentLength = -1 // no Content-Length: the reader's limit applies
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("→ %d", resp.StatusCode)
	}
}

// TestRateLimitAfterAuth: unauthenticated traffic neither passes nor spends
// the budget; the rate limit comes before the method check.
func TestRateLimitAfterAuth(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"rate_limit_qps": "0.01"}})
	for i := 0; i < 5; i++ {
		checkEnvelope(t, f.do(req{token: "bad", body: images(darkPNG)}), envelope.StatusUnauthorized, 0)
	}
	checkEnvelope(t, f.infer(images(darkPNG)), envelope.StatusOK, 1)
	// Budget spent: a bad token still answers 401, never 429.
	checkEnvelope(t, f.do(req{token: "bad", body: images(darkPNG)}), envelope.StatusUnauthorized, 0)
	rep := f.do(req{method: http.MethodGet, token: token})
	checkEnvelope(t, rep, envelope.StatusRateLimited, 0)
	ra, err := strconv.Atoi(rep.hdr.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", rep.hdr.Get("Retry-After"))
	}
	// Another client (per the gateway's X-Forwarded-For) has its own budget.
	checkEnvelope(t, f.do(req{token: token, body: images(darkPNG), hdr: map[string]string{"X-Forwarded-For": "203.0.113.9"}}), envelope.StatusOK, 1)
}

func TestLimiterEvictsIdleClients(t *testing.T) {
	l := newLimiter(2)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := 0; i < 100; i++ {
		if ok, _ := l.allow("10.0.0." + strconv.Itoa(i)); !ok {
			t.Fatal("first request refused")
		}
	}
	ok1, _ := l.allow("10.0.0.1")
	ok2, retry := l.allow("10.0.0.1")
	if !ok1 || ok2 || retry != 1 {
		t.Fatalf("burst of 2: %v %v retry %d", ok1, ok2, retry)
	}
	if l.size() != 100 {
		t.Fatalf("size %d", l.size())
	}
	now = now.Add(sweepEvery + time.Second)
	if ok, _ := l.allow("10.0.0.1"); !ok {
		t.Fatal("refilled bucket refused")
	}
	if l.size() != 1 {
		t.Fatalf("idle buckets kept: %d", l.size())
	}
}

func TestClientIP(t *testing.T) {
	for _, c := range []struct{ remote, xff, want string }{
		{"127.0.0.1:5", "", "127.0.0.1"},
		{"127.0.0.1:5", "198.51.100.1, 203.0.113.2", "203.0.113.2"},
		{"192.0.2.7:5", "203.0.113.2", "192.0.2.7"}, // only a loopback peer may speak for a client
		{"[::1]:5", "garbage", "::1"},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := clientIP(r); got != c.want {
			t.Errorf("%+v → %s", c, got)
		}
	}
}
