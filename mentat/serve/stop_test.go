package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// stoppable is a router the test stops itself.
type stoppable struct {
	*running
	stop func()
	done chan error
}

// startStoppable runs a router with cfg and the handlers mount adds, with
// no daemon to read.
func startStoppable(t *testing.T, cfg Config, mount func(s *Server)) *stoppable {
	t.Helper()
	logs := &testproc.Buffer{}
	s, err := New(cfg, logx.New(logs, -8))
	if err != nil {
		t.Fatal(err)
	}
	if mount != nil {
		mount(s)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &stoppable{running: &running{srv: s, base: "http://" + s.Addr().String(), logs: logs}, stop: cancel, done: make(chan error, 1)}
	go func() { st.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-st.done:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return")
		}
	})
	return st
}

// wait waits for Run to return and fails the test on an error.
func (st *stoppable) wait(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case err := <-st.done:
		st.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Run did not return within %v of the stop\n%s", within, st.logs.String())
	}
	return time.Since(start)
}

// stream opens GET path and returns its body once the head is in.
func stream(t *testing.T, url string) *bufio.Reader {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body)
}

// slow answers "begun", and "ended" once release is closed.
func slow(release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "begun\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "ended\n")
	})
}

// A stop drains first: /readyz is 503 at once, and the router serves on
// with Connection: close on every answer, new connections included. Then
// it stops accepting, lets the requests in flight finish, and returns.
func TestStopDrainsThenWaits(t *testing.T) {
	cfg := testConfig()
	cfg.Drain, cfg.ShutdownTimeout = 800*time.Millisecond, 10*time.Second
	release := make(chan struct{})
	st := startStoppable(t, cfg, func(s *Server) { s.Handle("GET /slow", slow(release)) })
	if code, _, _ := health(t, "GET", st.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz before the stop: %d", code)
	}
	slow := stream(t, st.base+"/slow")
	if l, _ := slow.ReadString('\n'); l != "begun\n" {
		t.Fatalf("slow: %q", l)
	}
	// A client that keeps a keep-alive connection idle through the drain
	// has it closed by the shutdown, and the log line counts it.
	idle, err := net.Dial("tcp", st.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /livez HTTP/1.1\r\nHost: r\r\n\r\n")
	if resp, _ := testproc.ReadResponse(t, bufio.NewReader(idle)); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("/livez before the stop: %d, close %v", resp.StatusCode, resp.Close)
	}
	st.stop()
	stopped := time.Now()
	eventually(t, "/readyz 503", func() bool { code, _, _ := health(t, "GET", st.base+"/readyz"); return code == 503 })
	if time.Since(stopped) > cfg.Drain/2 {
		t.Errorf("/readyz took %v to turn 503", time.Since(stopped))
	}
	code, body, h := health(t, "GET", st.base+"/readyz")
	if code != 503 || body != `{"ready":false,"reason":"draining"}`+"\n" || h.Get("Connection") != "close" {
		t.Errorf("/readyz draining: %d %q %v", code, body, h)
	}
	if code, _, h := health(t, "GET", st.base+"/livez"); code != 200 || h.Get("Connection") != "close" {
		t.Errorf("/livez draining: %d %v", code, h)
	}
	var doc map[string]any
	st.get(t, "/status.json", &doc) // still served
	// Past the drain nothing new is accepted; the stream in flight runs on.
	eventually(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", st.srv.Addr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if d := time.Since(stopped); d < cfg.Drain {
		t.Errorf("stopped accepting %v after the stop, before SERVE_DRAIN_S", d)
	}
	select {
	case <-st.done:
		t.Fatal("Run returned with a request in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if l, err := slow.ReadString('\n'); l != "ended\n" || err != nil {
		t.Fatalf("the request in flight: %q %v", l, err)
	}
	st.wait(t, 5*time.Second)
	logs := st.logs.String()
	for _, ev := range []string{"serve_draining", "serve_shutting_down", "serve_stopped"} {
		if st.logs.CountEvent(ev) != 1 {
			t.Errorf("%s logged %d times:\n%s", ev, st.logs.CountEvent(ev), logs)
		}
	}
	if !strings.Contains(logs, "requests=1 idle=1") {
		t.Errorf("serve_shutting_down does not count the request in flight and the idle connection:\n%s", logs)
	}
	if st.logs.CountEvent("serve_cutting") != 0 || !strings.Contains(logs, "requests_cut=0 requests_forced=0") {
		t.Errorf("a stop that cut nothing:\n%s", logs)
	}
}

// Past SERVE_SHUTDOWN_S the router cuts what still runs: the requests'
// contexts end, with HardStop done, and a handler that answers then is
// heard; one that does not is closed cutGrace later.
func TestStopCutsAtTheLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Drain, cfg.ShutdownTimeout = 10*time.Millisecond, 300*time.Millisecond
	stuck := make(chan struct{})
	defer close(stuck)
	st := startStoppable(t, cfg, func(s *Server) {
		s.Handle("GET /stream", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			if errors.Is(context.Cause(r.Context()), errCut) && s.HardStop().Err() != nil {
				io.WriteString(w, "data: cut\n\n")
			}
		}))
		s.Handle("GET /stuck", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "begun\n")
			w.(http.Flusher).Flush()
			<-stuck // ignores its context
		}))
	})
	s1, s2 := stream(t, st.base+"/stream"), stream(t, st.base+"/stuck")
	s1.ReadString('\n')
	s2.ReadString('\n')
	if st.srv.HardStop().Err() != nil || st.srv.ShuttingDown().Err() != nil {
		t.Fatal("stop contexts done before any stop")
	}
	st.stop()
	rest, err := io.ReadAll(s1)
	if err != nil || string(rest) != "\ndata: cut\n\n" {
		t.Errorf("the stream cut at the limit: %q %v", rest, err)
	}
	if _, err := io.ReadAll(s2); err == nil {
		t.Error("the stuck request's connection was not closed")
	}
	if d := st.wait(t, 5*time.Second); d > 3*time.Second {
		t.Errorf("Run took %v", d)
	}
	if st.srv.ShuttingDown().Err() == nil {
		t.Error("ShuttingDown not done after the stop")
	}
	logs := st.logs.String()
	if st.logs.CountEvent("serve_cutting") != 1 || !regexp.MustCompile(`event=serve_stopped elapsed=\S+ requests_cut=2 requests_forced=1`).MatchString(logs) {
		t.Errorf("logs:\n%s", logs)
	}
}

// getOn writes a GET for path on c and reads the answer whole.
func getOn(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: r\r\n\r\n"); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("GET %s body: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

// listenerClosed waits until a new connection to st is refused.
func listenerClosed(t *testing.T, st *stoppable) {
	t.Helper()
	eventually(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", st.srv.Addr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// A keep-alive answer whose head went out before the drain ends without
// Connection: close, so its client (a balancer's pool) may send the next
// request on that connection even after the listener closed. The
// shutdown keeps such a connection open until it has been idle for
// SERVE_DRAIN_S, and serves what arrives on it meanwhile; net/http's own
// Shutdown would close it the moment the answer ended.
func TestStopKeepsYoungIdleConnections(t *testing.T) {
	cfg := testConfig()
	cfg.Drain, cfg.ShutdownTimeout = 400*time.Millisecond, 10*time.Second
	release := make(chan struct{})
	st := startStoppable(t, cfg, func(s *Server) { s.Handle("GET /slow", slow(release)) })
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var cs [2]client
	for i := range cs {
		c, err := net.Dial("tcp", st.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = client{c, bufio.NewReader(c)}
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: r\r\n\r\n")
	}
	resps := make([]*http.Response, len(cs))
	for i := range cs {
		resp, err := http.ReadResponse(cs[i].br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resps[i] = resp
	}
	st.stop()
	listenerClosed(t, st)
	close(release)
	var ended time.Time
	for i, resp := range resps {
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != "begun\nended\n" || resp.Close {
			t.Fatalf("slow %d: %q %v, close %v", i, body, err, resp.Close)
		}
		ended = time.Now()
	}
	// The first client sends its next request on the connection after a
	// moment, as a balancer's pool would: it is served, and ends the
	// connection.
	time.Sleep(cfg.Drain / 4)
	if resp := getOn(t, cs[0].c, cs[0].br, "/livez"); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("a request on a young idle connection: %d, close %v", resp.StatusCode, resp.Close)
	}
	// The second sends nothing: its connection closes once idle for the
	// drain, not before.
	cs[1].c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := cs[1].br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the idle connection: %d bytes, %v", n, err)
	}
	if d := time.Since(ended); d < cfg.Drain {
		t.Errorf("an idle connection closed %v after its answer, before SERVE_DRAIN_S", d)
	}
	st.wait(t, 5*time.Second)
	if logs := st.logs.String(); !strings.Contains(logs, "requests_cut=0 requests_forced=0") || st.logs.CountEvent("serve_listener_reset") != 0 {
		t.Errorf("logs:\n%s", logs)
	}
}

// Closing a listener resets the connections queued in the kernel that
// Accept has not taken, whose requests a balancer has already sent. The
// shutdown closes the listener only once that queue is empty: here the
// one connection the cap allows holds a request while a second waits in
// the queue with its request written, and the second is served.
func TestStopServesTheAcceptQueue(t *testing.T) {
	cfg := testConfig()
	cfg.Drain, cfg.ShutdownTimeout = 10*time.Millisecond, 10*time.Second
	cfg.Edge.MaxConns = 1
	release := make(chan struct{})
	st := startStoppable(t, cfg, func(s *Server) {
		s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "begun\n")
			w.(http.Flusher).Flush()
			<-release
		}))
	})
	first := stream(t, st.base+"/slow")
	first.ReadString('\n')
	queued, err := net.Dial("tcp", st.srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	io.WriteString(queued, "GET /livez HTTP/1.1\r\nHost: r\r\n\r\n")
	n, ok := acceptQueue(st.srv.ln)
	if !ok {
		t.Skip("the accept queue cannot be read on this system")
	}
	if n != 1 {
		t.Fatalf("accept queue %d, want 1", n)
	}
	st.stop()
	// The stop waits for the queue, well past the drain.
	time.Sleep(20 * cfg.Drain)
	close(release)
	queued.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(queued), nil); err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Errorf("the queued connection's request: %v %v", resp, err)
	}
	st.wait(t, 5*time.Second)
	if logs := st.logs.String(); st.logs.CountEvent("serve_listener_reset") != 0 || !strings.Contains(logs, "requests_cut=0") {
		t.Errorf("logs:\n%s", logs)
	}
}
