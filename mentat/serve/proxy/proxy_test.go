package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seen is what a fake engine observed of one request.
type seen struct {
	uri    string
	header http.Header
	body   string
}

// recordingEngine answers every request with a small JSON body and
// remembers what it got.
func recordingEngine(t testing.TB) (*engine, func() []seen) {
	var mu sync.Mutex
	var got []seen
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{uri: r.RequestURI, header: r.Header.Clone(), body: string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Engine", "sim")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"chat.completion","path":%q}`, r.URL.Path)
	})
	return e, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), got...)
	}
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func decodeError(t testing.TB, resp *http.Response) apiError {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q, want application/json", ct)
	}
	var e apiError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body is not the OpenAI shape: %v", err)
	}
	if e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("error body lacks message/type/code: %+v", e)
	}
	return e
}

func TestForwardNonStreaming(t *testing.T) {
	eng, got := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m1": eng.base()}, nil)

	body := `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`
	cases := []struct{ path, wantURI string }{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/completions?api-version=2024-01&x=a%26b", "/v1/completions?api-version=2024-01&x=a%26b"},
		{"/v1/embeddings", "/v1/embeddings"},
		{"/tokenize", "/tokenize"},
		{"/detokenize?q=1", "/detokenize?q=1"},
		{"/v1/files/a%2Fb", "/v1/files/a%2Fb"},
	}
	for i, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, rt.URL+c.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := rt.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out := readAllString(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Engine") != "sim" || !strings.Contains(out, `"object":"chat.completion"`) {
			t.Fatalf("%s: status %d, header %v, body %s", c.path, resp.StatusCode, resp.Header, out)
		}
		s := got()[i]
		if s.uri != c.wantURI || s.body != body || s.header.Get("Authorization") != "Bearer sk-test" || s.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: engine saw %q body %q header %v", c.path, s.uri, s.body, s.header)
		}
		if resp.Header.Get("X-Accel-Buffering") != "" {
			t.Fatalf("%s: non-stream answer marked as a stream: %v", c.path, resp.Header)
		}
	}
	if n := eng.requests.Load(); n != int64(len(cases)) {
		t.Fatalf("engine got %d requests, want %d (each sent exactly once)", n, len(cases))
	}
}

func TestRefusals(t *testing.T) {
	eng, _ := recordingEngine(t)
	rt := newRouter(t, Config{MaxBody: 4096})
	rt.publish(t, map[string]string{"alpha": eng.base(), "beta": eng.base()},
		map[string]string{"sleepy": "endpoint probe failed: http://10.0.0.9:8000/v1: connection refused"})
	big := `{"model":"alpha","prompt":"` + strings.Repeat("x", 5000) + `"}`
	cases := []struct {
		name, method, ctype, body string
		encoding                  string
		chunked                   bool
		status                    int
		code, has                 string
	}{
		{name: "no model", ctype: jsonCT, body: `{"prompt":"x"}`, status: 400, code: "invalid_body", has: "no model field"},
		{name: "empty body", ctype: jsonCT, body: ``, status: 400, code: "invalid_body", has: "empty"},
		{name: "not json", ctype: jsonCT, body: `hello`, status: 400, code: "invalid_body", has: "not a JSON object"},
		{name: "model not string", ctype: jsonCT, body: `{"model":7}`, status: 400, code: "invalid_body", has: "JSON string"},
		{name: "two models", ctype: jsonCT, body: `{"model":"alpha","model":"beta"}`, status: 400, code: "invalid_body", has: "two different"},
		{name: "multipart without model", ctype: "multipart/form-data; boundary=xx", body: "--xx\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--xx--\r\n", status: 400, code: "invalid_body", has: "no text field named model"},
		{name: "unknown model", ctype: jsonCT, body: `{"model":"gamma"}`, status: 404, code: "model_not_found", has: `"gamma" is not served by this cluster; available models: alpha, beta`},
		{name: "group not admitted", ctype: jsonCT, body: `{"model":"sleepy"}`, status: 503, code: "model_unavailable", has: `group "sleepy", which is not routable now: endpoint probe failed: http://10.0.0.9:8000/v1: connection refused`},
		{name: "too large declared", ctype: jsonCT, body: big, status: 413, code: "request_too_large", has: "(Content-Length) is larger than the 4096-byte limit"},
		{name: "too large chunked", ctype: jsonCT, body: big, chunked: true, status: 413, code: "request_too_large", has: "larger than the 4096-byte limit"},
		{name: "GET", method: http.MethodGet, status: 405, code: "method_not_allowed", has: "POST"},
		{name: "gzip body", ctype: jsonCT, encoding: "gzip", body: "\x1f\x8b", status: 415, code: "unsupported_content_encoding", has: "uncompressed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rd io.Reader = strings.NewReader(c.body)
			if c.chunked {
				rd = io.MultiReader(rd) // hides the length: sent chunked
			}
			if c.method == "" {
				c.method = http.MethodPost
			}
			req, _ := http.NewRequest(c.method, rt.URL+"/v1/chat/completions", rd)
			req.Header.Set("Content-Type", c.ctype)
			if c.encoding != "" {
				req.Header.Set("Content-Encoding", c.encoding)
			}
			resp, err := rt.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			e := decodeError(t, resp)
			if e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.has) {
				t.Fatalf("error %+v, want code %q and message containing %q", e.Error, c.code, c.has)
			}
		})
	}
	if n := eng.requests.Load(); n != 0 {
		t.Fatalf("refused requests reached the engine %d times", n)
	}
}

// TestTooLargeRefusedBeforeReading shows both 413 paths on a raw
// connection: a declared 200 MiB body is refused before any of it is sent
// (so no 128 MiB allocation either), and an undeclared one as soon as the
// limit is crossed, without reading what the client still pushes.
func TestTooLargeRefusedBeforeReading(t *testing.T) {
	rt := newRouter(t, Config{}) // default 128 MiB
	rt.publish(t, nil, nil)

	conn, err := net.Dial("tcp", rt.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 200<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a declared 200 MiB body without sending it: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if e := decodeError(t, resp); !strings.Contains(e.Error.Message, "134217728-byte limit (128 MiB)") {
		t.Fatalf("message %q does not name the limit", e.Error.Message)
	}

	// Undeclared length: a small limit, and a client that would send
	// forever. The router answers once it has read past the limit.
	small := newRouter(t, Config{MaxBody: 64 << 10})
	pr, pw := io.Pipe()
	var sent int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		chunk := []byte(`{"model":"x","p":"` + strings.Repeat("y", 8<<10))
		for sent < 64<<20 {
			n, err := pw.Write(chunk)
			sent += int64(n)
			if err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, small.URL+"/v1/chat/completions", pr)
	req.Header.Set("Content-Type", jsonCT)
	resp, err = small.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: status %d, want 413", resp.StatusCode)
	}
	decodeError(t, resp)
	pr.CloseWithError(io.ErrClosedPipe)
	<-done
	if sent >= 64<<20 {
		t.Fatalf("client pushed all %d bytes: the router kept reading past the limit", sent)
	}
}

func TestMultipartRouting(t *testing.T) {
	whisper, gotW := recordingEngine(t)
	evil, _ := recordingEngine(t)
	rt := newRouter(t, Config{})
	// evil-model is routable too: mistaking file bytes for the field
	// would send the upload there.
	rt.publish(t, map[string]string{"whisper-1": whisper.base(), "evil-model": evil.base()}, nil)
	ct, body := multipartBody(t,
		part{name: "file", filename: "speech.wav", ctype: "audio/wav", data: trapAudio},
		part{name: "model", data: []byte("whisper-1")},
		part{name: "response_format", data: []byte("json")},
	)
	resp := rt.post(t, "/v1/audio/transcriptions", ct, string(body))
	readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if evil.requests.Load() != 0 || whisper.requests.Load() != 1 {
		t.Fatalf("whisper got %d, evil got %d; want 1 and 0", whisper.requests.Load(), evil.requests.Load())
	}
	s := gotW()[0]
	if s.body != string(body) || s.header.Get("Content-Type") != ct || s.uri != "/v1/audio/transcriptions" {
		t.Fatalf("engine saw %q with Content-Type %q; body intact: %v", s.uri, s.header.Get("Content-Type"), s.body == string(body))
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/v1"
	l.Close() // nothing listens there now: connection refused
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": dead}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	e := decodeError(t, resp)
	if e.Error.Code != "upstream_unreachable" || !strings.Contains(e.Error.Message, `group "g-m"`) || !strings.Contains(e.Error.Message, l.Addr().String()) {
		t.Fatalf("error %+v should name the group, the upstream and the failure", e.Error)
	}
}

// TestSentExactlyOnce: an engine that takes a request and drops the
// connection without answering gets a 502 out of the router, never a
// second copy of the request — even on a reused keep-alive connection and
// with an Idempotency-Key header, which would make the Go transport
// replay it if it were forwarded.
func TestSentExactlyOnce(t *testing.T) {
	var mu sync.Mutex
	drops := 0
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/drop" {
			mu.Lock()
			drops++
			mu.Unlock()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, `{"ok":true}`)
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	for i := 0; i < 3; i++ {
		// Warm a pooled connection so the drop lands on a reused one.
		resp := rt.post(t, "/v1/ok", jsonCT, `{"model":"m"}`)
		readAllString(t, resp.Body)
		resp.Body.Close()
		req, _ := http.NewRequest(http.MethodPost, rt.URL+"/v1/drop", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Content-Type", jsonCT)
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
		resp, err := rt.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
		if e := decodeError(t, resp); e.Error.Code != "upstream_error" || !strings.Contains(e.Error.Message, "not retried") {
			t.Fatalf("error %+v", e.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if drops != 3 {
		t.Fatalf("engine saw %d dropped requests for 3 sent: a request was replayed", drops)
	}
}

// TestStaleKeepAlive: the engine closes idle connections after ~1 s (as
// uvicorn does after 5 s); a fresh request after that must not land on
// the dead pooled connection and fail with a spurious 502: it goes out on
// a fresh one.
//
// The test waits until the router's transport has seen the close (its
// side of the connection is closed), which is what keeps the request off
// it. A close that crosses a request on the wire is not retried (sent
// once); IdleConnTimeout below the engines' keep-alive keeps that from
// happening outside this test.
func TestStaleKeepAlive(t *testing.T) {
	eng, _ := recordingEngine(t)
	tr := NewTransport()
	var routerClosed atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &closeCounter{Conn: c, n: &routerClosed}, nil
	}
	rt := newRouter(t, Config{Transport: tr})
	t.Cleanup(tr.CloseIdleConnections)
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	for i := 0; i < 3; i++ {
		closedBefore := routerClosed.Load()
		resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
		readAllString(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: status %d", i, resp.StatusCode)
		}
		// Wait until the engine has closed the idle upstream connection
		// and the router has noticed.
		eventually(t, "the router to see the engine close its idle connection", func() bool { return routerClosed.Load() > closedBefore })
	}
	if n := eng.requests.Load(); n != 3 {
		t.Fatalf("engine got %d requests, want 3", n)
	}
}

// closeCounter counts the Close calls of a connection.
type closeCounter struct {
	net.Conn
	once sync.Once
	n    *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.once.Do(func() { c.n.Add(1) })
	return c.Conn.Close()
}

func TestTimeout(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // as vLLM does; it also arms hang-up detection
		if r.URL.Path == "/v1/stall-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"n\":0}\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(30 * time.Second):
		}
	})
	rt := newRouter(t, Config{Timeout: 300 * time.Millisecond})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)

	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", resp.StatusCode)
	}
	if e := decodeError(t, resp); e.Error.Code != "upstream_timeout" || !strings.Contains(e.Error.Message, "SERVING_TIMEOUT_S") {
		t.Fatalf("error %+v", e.Error)
	}
	select {
	case <-cancelled:
	case <-time.After(15 * time.Second):
		t.Fatal("the engine's request was not cancelled at the timeout")
	}

	// A stream that outlives the timeout is cut, and the client can tell:
	// it gets a read error, not a clean end of stream.
	resp = rt.post(t, "/v1/stall-stream", jsonCT, `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("stream cut by the timeout ended cleanly after %q; want a read error", b)
	}
	if !strings.HasPrefix(string(b), "data: {\"n\":0}") {
		t.Fatalf("first frame missing before the cut: %q", b)
	}
	select {
	case <-cancelled:
	case <-time.After(15 * time.Second):
		t.Fatal("the engine's stream was not cancelled at the timeout")
	}
}

// TestServerDeadlinesDoNotCutStreams: even if whoever mounts the proxy
// sets short ReadTimeout/WriteTimeout on its server, a stream that keeps
// producing runs to its end (SERVING_TIMEOUT_S is the only deadline).
func TestServerDeadlinesDoNotCutStreams(t *testing.T) {
	eng := newEngine(t, sseHandler(12, 100*time.Millisecond, nil))
	rt := newRouterWith(t, Config{}, func(s *http.Server) {
		s.ReadTimeout = 300 * time.Millisecond
		s.WriteTimeout = 300 * time.Millisecond
	})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	for i := 0; i < 2; i++ { // twice: the second reuses the client connection
		resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("round %d: stream cut: %v, got %q", i, err, b)
		}
	}
}

// BenchmarkProxySmall is one small chat request through the proxy, keys
// off and on (the key authenticated, admitted, its headers set, the
// answer's usage charged), answered like vLLM's with a usage object.
func BenchmarkProxySmall(b *testing.B) {
	eng := newEngine(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"cmpl-1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	})
	b.Run("keys=off", func(b *testing.B) { benchProxySmall(b, newRouter(b, Config{}), "", eng) })
	b.Run("keys=on", func(b *testing.B) {
		rt, _, secrets := keyedRouter(b, Config{}, map[string]string{"bench": "rpm = 1000000000\ntpm = 1000000000000\nmax_concurrent = 1000000"})
		benchProxySmall(b, rt, secrets["bench"], eng)
	})
}

func benchProxySmall(b *testing.B, rt *router, secret string, eng *engine) {
	rt.publish(b, map[string]string{"m": eng.base()}, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", rt.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", jsonCT)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := rt.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// TestExpectContinue: curl sends Expect: 100-continue for bodies over
// 1 MiB. The router answers 100 itself, reads the body, and the engine
// never sees the Expect header.
func TestExpectContinue(t *testing.T) {
	eng, got := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	body := `{"model":"m","prompt":"` + strings.Repeat("p", 2<<20) + `"}`
	conn, err := net.Dial("tcp", rt.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("no 100 Continue: %q, %v", line, err)
	}
	br.ReadString('\n') // blank line after the interim response
	io.WriteString(conn, body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	readAllString(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := got()[0]
	if s.header.Get("Expect") != "" || s.body != body {
		t.Fatalf("engine saw Expect %q, body intact %v", s.header.Get("Expect"), s.body == body)
	}
}
