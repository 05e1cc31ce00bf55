package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// delayed answers after wait: an event stream of two frames, or status
// with an OpenAI error body; head true sends the event-stream head at
// once and waits before the first frame instead (a long prefill).
func delayed(wait time.Duration, status int, head bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if head {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"engine says no","type":"BadRequestError","code":%d}}`, status)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	}
}

// A stream that waits longer than SSE_KEEPALIVE_S gets comments while it
// waits, before the head of the engine's answer or after it; one that
// does not wait that long gets none; a failure after a comment is an
// error event with no [DONE]; a request that is not a stream gets none.
func TestKeepAlive(t *testing.T) {
	for _, c := range []struct {
		name     string
		h        http.HandlerFunc
		stream   bool
		code     int
		comments bool
		want     string // what the body ends with
	}{
		{"waits for the head", delayed(300*time.Millisecond, 200, false), true, 200, true, "data: [DONE]\n\n"},
		{"waits for the first byte", delayed(300*time.Millisecond, 200, true), true, 200, true, "data: [DONE]\n\n"},
		{"answers quickly", delayed(0, 200, false), true, 200, false, "data: [DONE]\n\n"},
		{"fails after a comment", delayed(300*time.Millisecond, 400, false), true, 200, true,
			"data: {\"error\":{\"message\":\"the engine answered 400 after the stream had begun: engine says no\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n"},
		{"fails quickly", delayed(0, 400, false), true, 400, false, `"code":400}}`},
		{"not a stream", delayed(300*time.Millisecond, 200, false), false, 200, false, "data: [DONE]\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := newEngine(t, c.h)
			rt := newRouter(t, Config{KeepAlive: 80 * time.Millisecond})
			rt.publish(t, map[string]string{"m": eng.base()}, nil)
			resp := rt.post(t, "/v1/chat/completions", jsonCT, fmt.Sprintf(`{"model":"m","stream":%v}`, c.stream))
			body := readAllString(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d: %q", resp.StatusCode, c.code, body)
			}
			if got := strings.Count(body, ": keep-alive\n\n"); (got > 0) != c.comments || (c.comments && got < 2) {
				t.Errorf("%d comments in %q", got, body)
			}
			if !strings.HasSuffix(body, c.want) {
				t.Errorf("body %q does not end with %q", body, c.want)
			}
			if c.code == 200 && c.stream && resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Errorf("content type %q", resp.Header.Get("Content-Type"))
			}
			if strings.Contains(c.name, "fails after") && strings.Contains(body, "[DONE]") {
				t.Error("a failed stream ended with [DONE]")
			}
		})
	}
}

// With MODEL_WAIT_S a request for a model that routed recently and does
// not now waits for it to come back; a model never routed, or one that
// does not come back in time, is answered at once or at the limit; with
// keep-alives a waiting stream gets comments.
func TestModelWait(t *testing.T) {
	eng := newEngine(t, delayed(0, 200, false))
	rt := newRouter(t, Config{ModelWait: 2 * time.Second, KeepAlive: 100 * time.Millisecond})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	if resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("while routed: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	rt.publish(t, nil, map[string]string{"g-m": "endpoint probe failed: connection refused"})
	start := time.Now()
	if resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"never"}`); resp.StatusCode != 404 || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("a model never routed: %d after %v, want 404 at once", resp.StatusCode, time.Since(start))
	} else {
		resp.Body.Close()
	}
	go func() {
		time.Sleep(350 * time.Millisecond)
		rt.publish(t, map[string]string{"m": eng.base()}, nil)
	}()
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	body := readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, ": keep-alive\n\n") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("waiting for the model to come back: %d %q", resp.StatusCode, body)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("answered after %v, before the model came back", waited)
	}
	rt.publish(t, nil, map[string]string{"g-m": "endpoint probe failed: connection refused"})
	start = time.Now()
	resp = rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	resp.Body.Close()
	if resp.StatusCode != 404 || time.Since(start) < 1900*time.Millisecond {
		t.Errorf("a model that does not come back: %d after %v, want the refusal at the limit", resp.StatusCode, time.Since(start))
	}
}
