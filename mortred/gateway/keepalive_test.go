package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestKeepAliveAndModelConnectionReuse: requests with a declared body,
// and without one, keep the client's connection open (the whole body was
// read, so nothing is abandoned) and share one model server connection.
func TestKeepAliveAndModelConnectionReuse(t *testing.T) {
	var modelConns atomic.Int64
	m := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, `{"method":"`+r.Method+`","len":`+strconv.Itoa(len(b))+`}`)
	}))
	m.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			modelConns.Add(1)
		}
	}
	m.Start()
	defer m.Close()
	gw, _, _ := newGateway(t, Upstream{ID: "A", URI: "/a", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	reused := 0
	for i, body := range []string{`{"images":["x"]}`, strings.Repeat("y", 100<<10), "", `{}`} {
		method, path := http.MethodPost, "/v1/models/A/infer"
		if body == "" {
			method, path = http.MethodGet, "/v1/models/A/jobs/j1"
		}
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if ci.Reused {
				reused++
			}
		}}
		req, _ := http.NewRequest(method, gw.URL+path, bytes.NewReader([]byte(body)))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d: %d close=%v %s", i, resp.StatusCode, resp.Close, got)
		}
		if want := `{"method":"` + method + `","len":` + strconv.Itoa(len(body)) + `}`; string(got) != want {
			t.Fatalf("request %d: model saw %s, want %s", i, got, want)
		}
	}
	if reused != 3 {
		t.Fatalf("client connection reused %d times in 4 requests, want 3", reused)
	}
	if n := modelConns.Load(); n != 1 {
		t.Fatalf("4 sequential requests used %d model connections, want 1", n)
	}
}
