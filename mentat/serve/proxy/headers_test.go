package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestUpstreamHeader(t *testing.T) {
	in := http.Header{}
	in.Set("Content-Type", "application/json")
	in.Set("Accept", "text/event-stream")
	in.Set("Authorization", "Bearer sk-1")
	for _, k := range []string{"Connection", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "Transfer-Encoding",
		"Cookie", "X-Custom", "Expect", "Idempotency-Key", "Accept-Encoding", "Host", "Trailer"} {
		in.Set(k, "v")
	}
	out := upstreamHeader(in)
	want := map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream",
		"Authorization": "Bearer sk-1", "User-Agent": "mentatd-serve"}
	if len(out) != len(want) {
		t.Fatalf("forwarded %v, want exactly %v", out, want)
	}
	for k, v := range want {
		if out.Get(k) != v {
			t.Fatalf("%s = %q, want %q", k, out.Get(k), v)
		}
	}
	if h := upstreamHeader(http.Header{}); h.Get("Authorization") != "" || len(h) != 1 {
		t.Fatalf("absent headers invented: %v", h)
	}
}

// TestHeaderFilteringEndToEnd sends hop-by-hop and private headers both
// ways through real sockets.
func TestHeaderFilteringEndToEnd(t *testing.T) {
	var got http.Header
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "secret")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Engine", "sim")
		io.WriteString(w, `{}`)
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	body := `{"model":"m"}`
	req, _ := http.NewRequest(http.MethodPost, rt.URL+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", jsonCT)
	req.Header.Set("Authorization", "Bearer sk-x")
	req.Header.Set("Connection", "X-Private, Accept")
	req.Header.Set("X-Private", "1")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cookie", "session=1")
	req.Header.Set("Proxy-Authorization", "Basic abc")
	resp, err := rt.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, k := range []string{"X-Private", "Accept", "Cookie", "Proxy-Authorization", "Accept-Encoding"} {
		if v := got.Get(k); v != "" {
			t.Errorf("engine got %s: %q", k, v)
		}
	}
	if got.Get("Authorization") != "Bearer sk-x" || got.Get("Content-Length") != "" && got.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Errorf("engine headers %v", got)
	}
	for _, k := range []string{"X-Hop", "Proxy-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("client got %s: %q", k, v)
		}
	}
	if resp.Header.Get("X-Engine") != "sim" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("client headers %v", resp.Header)
	}
}
