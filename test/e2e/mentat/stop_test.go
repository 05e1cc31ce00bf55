package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

const stopModel = "stop-7b"

// stopRouter is one daemon, one enginesim emitting a token every itl, and
// a router with env over them, routing stopModel.
func stopRouter(t *testing.T, itl string, env ...string) (*router, *engine) {
	t.Helper()
	d := startDaemon(t, "daemon")
	e := &engine{group: "stop", model: stopModel, itl: itl}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, append([]string{"MENTAT_DAEMONS=" + d.addr}, env...)...)
	r.waitModels(t, stopModel)
	return r, e
}

// chatBody is a chat completion of exactly tokens tokens.
func stopBody(stream bool, tokens int) string {
	return `{"model":"` + stopModel + `","stream":` + strconv.FormatBool(stream) + `,"ignore_eos":true,"max_tokens":` + strconv.Itoa(tokens) +
		`,"messages":[{"role":"user","content":"stop test"}]}`
}

// result is how one request through the router ended.
type result struct {
	code   int
	closed bool     // the answer said Connection: close
	frames []string // a stream's data: lines
	body   string   // an answer that is not a stream
	err    error    // the request or the read of its body failed
}

// startStream posts a streamed chat completion and returns once its first
// frame has arrived; the rest is read in the background, to out.
func startStream(t *testing.T, url string, tokens int, out chan<- result) {
	t.Helper()
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(stopBody(true, tokens)))
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	var first string
	for first == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream before its first frame: %v", err)
		}
		first, _ = strings.CutPrefix(strings.TrimRight(line, "\n"), "data: ")
	}
	go func() {
		defer resp.Body.Close()
		res := result{code: resp.StatusCode, closed: resp.Close, frames: []string{first}}
		for {
			line, err := br.ReadString('\n')
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
				res.frames = append(res.frames, d)
			}
			if err != nil {
				if err != io.EOF {
					res.err = err
				}
				break
			}
		}
		out <- res
	}()
}

// post sends a chat completion that is not a stream, to out.
func post(url string, tokens int, out chan<- result) {
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(stopBody(false, tokens)))
	if err != nil {
		out <- result{err: err}
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	out <- result{code: resp.StatusCode, closed: resp.Close, body: string(b), err: err}
}

// getStatus is the status of GET url and whether the answer said
// Connection: close.
func getStatus(t *testing.T, url string) (int, bool) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Close
}

func (r *router) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	code, ok := r.ExitCode(within)
	if !ok {
		t.Fatalf("the router did not exit within %v of SIGTERM", within)
	}
	if code != 0 {
		t.Fatalf("the router exited with status %d", code)
	}
}

// A SIGTERM drains the router: /readyz turns 503 at once while /livez
// stays 200, and a new request during the drain is served, with
// Connection: close. Then the router stops accepting and lets what is in
// flight finish: a stream to its [DONE], a request that is not a stream to
// its answer. It exits 0, having cut nothing.
func TestStopDrainsAndFinishesStreams(t *testing.T) {
	// A stream of 60 tokens 40 ms apart (about 2.4 s) outlives the 1 s
	// drain and ends well within the 20 s limit.
	r, e := stopRouter(t, "40ms", "SERVE_DRAIN_S=1", "SERVE_SHUTDOWN_S=20")
	if code, _ := getStatus(t, r.url+"/readyz"); code != 200 {
		t.Fatalf("/readyz before the stop: %d", code)
	}
	streamed, posted, during := make(chan result, 1), make(chan result, 1), make(chan result, 1)
	startStream(t, r.url, 60, streamed)
	go post(r.url, 40, posted)
	eventually(t, "both requests running in the engine", func() bool { return engineMetric(t, e, "vllm:num_requests_running") == 2 })

	if err := r.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	eventually(t, "/readyz 503", func() bool { code, _ := getStatus(t, r.url+"/readyz"); return code == http.StatusServiceUnavailable })
	if d := time.Since(signalled); d > 500*time.Millisecond {
		t.Errorf("/readyz turned 503 %v after SIGTERM", d)
	}
	if code, closed := getStatus(t, r.url+"/livez"); code != 200 || !closed {
		t.Errorf("/livez while draining: %d, Connection: close %v", code, closed)
	}
	go post(r.url, 2, during)
	if res := <-during; res.err != nil || res.code != 200 || !res.closed || !strings.Contains(res.body, `"chat.completion"`) {
		t.Errorf("a request during the drain: %+v", res)
	}
	if time.Since(signalled) > time.Second {
		t.Fatal("the checks of the drain took longer than the drain")
	}

	s := <-streamed
	if s.err != nil || len(s.frames) < 61 || s.frames[len(s.frames)-1] != "[DONE]" {
		t.Errorf("the stream in flight: %d frames, last %q, err %v", len(s.frames), s.frames[len(s.frames)-1], s.err)
	}
	if time.Since(signalled) < time.Second {
		t.Errorf("the stream ended %v after SIGTERM, within the drain; the test means it to outlive the drain", time.Since(signalled))
	}
	var answer struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	p := <-posted
	if p.err != nil || p.code != 200 || json.Unmarshal([]byte(p.body), &answer) != nil || answer.Usage.CompletionTokens != 40 {
		t.Errorf("the request in flight that is not a stream: %d %v %.300s", p.code, p.err, p.body)
	}
	r.waitExit(t, 10*time.Second)
	out := r.Output()
	for _, ev := range []string{"event=serve_draining", "event=serve_shutting_down", "event=serve_stopped"} {
		if strings.Count(out, ev+" ") != 1 {
			t.Errorf("%s logged %d times", ev, strings.Count(out, ev+" "))
		}
	}
	if !strings.Contains(out, "requests_cut=0 requests_forced=0") || strings.Contains(out, "event=serve_cutting") {
		t.Error("the stop logged cut requests")
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(r.url, "http://"), time.Second); err == nil {
		t.Error("the port still accepts after the exit")
	}
}

// A stream still running at SERVE_SHUTDOWN_S is ended by the router with
// an error event and no [DONE]; a request that is not a stream, still
// waiting for its answer, gets 503. The engine's requests are cancelled,
// and the router exits 0.
func TestStopCutsStreamsAtTheLimit(t *testing.T) {
	// 200 tokens 50 ms apart: 10 s, well past 0.3 s of drain and 1 s of
	// shutdown.
	r, e := stopRouter(t, "50ms", "SERVE_DRAIN_S=0.3", "SERVE_SHUTDOWN_S=1")
	streamed, posted := make(chan result, 1), make(chan result, 1)
	startStream(t, r.url, 200, streamed)
	go post(r.url, 200, posted)
	eventually(t, "both requests running in the engine", func() bool { return engineMetric(t, e, "vllm:num_requests_running") == 2 })
	if err := r.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	s := <-streamed
	if s.err != nil {
		t.Errorf("the cut stream did not end cleanly: %v", s.err)
	}
	last := s.frames[len(s.frames)-1]
	if !strings.Contains(last, `"code":"server_shutting_down"`) || !strings.HasPrefix(last, `{"error":{`) {
		t.Errorf("the cut stream's last frame: %q", last)
	}
	for _, f := range s.frames {
		if f == "[DONE]" {
			t.Error("the cut stream has a [DONE]")
		}
	}
	if d := time.Since(signalled); d < 1300*time.Millisecond || d > 5*time.Second {
		t.Errorf("the stream was cut %v after SIGTERM; want after the 0.3 s drain and the 1 s limit", d)
	}
	p := <-posted
	if p.err != nil || p.code != http.StatusServiceUnavailable || !strings.Contains(p.body, `"code":"server_shutting_down"`) || !p.closed {
		t.Errorf("the request that is not a stream: %+v", p)
	}
	r.waitExit(t, 5*time.Second)
	out := r.Output()
	if !strings.Contains(out, "event=serve_cutting requests=2") ||
		!strings.Contains(out, "requests_cut=2 requests_forced=0 streams_ended=1 answered_503=1 connections_cut=0") {
		t.Errorf("the stop's log lines do not count what was cut")
	}
	// The engine's own /metrics, read as the router's are.
	engineMetrics := (&router{url: "http://127.0.0.1:" + itoa(e.port)}).metrics
	eventually(t, "the engine to abort both requests", func() bool {
		return sum(engineMetrics(t), "vllm:request_success_total", map[string]string{"finished_reason": "abort"}) == 2
	})
	if n := sum(engineMetrics(t), "vllm:request_success_total", nil); n != 2 {
		t.Errorf("the engine finished %v requests, want the 2 aborted", n)
	}
}

// A second SIGTERM during the stop ends the router at once.
func TestStopSecondSignal(t *testing.T) {
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS=", "SERVE_DRAIN_S=30")
	eventually(t, "/readyz 200", func() bool { code, _ := getStatus(t, r.url+"/readyz"); return code == 200 })
	r.Signal(syscall.SIGTERM)
	r.WaitOutput(t, 10*time.Second, `event=serve_draining`)
	r.Signal(syscall.SIGTERM)
	st, ok := r.State(5 * time.Second)
	if !ok {
		t.Fatal("the router did not stop at the second SIGTERM")
	}
	if ws, _ := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("the router ended with %v, want killed by SIGTERM", st)
	}
}

// nginxBin is Nginx OSS, or "" when the machine has none.
func nginxBin() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}

// startNginx runs Nginx OSS in front of the routers on ports, configured
// as docs/mentatd-serve.md advises for a drain of more than 1 s, and
// returns its URL.
func startNginx(t *testing.T, ports ...int) string {
	t.Helper()
	bin := nginxBin()
	if bin == "" {
		t.Skip("no nginx on this machine")
	}
	dir := t.TempDir()
	port := testproc.FreePort(t)
	var servers strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&servers, "        server 127.0.0.1:%d max_fails=1 fail_timeout=1s;\n", p)
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream routers {
%[2]s        keepalive 16;
        keepalive_timeout 1s;
    }
    server {
        listen 127.0.0.1:%[3]d;
        location / {
            proxy_pass http://routers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_next_upstream error timeout;
            proxy_read_timeout 60s;
        }
    }
}
`, dir, servers.String(), port)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ngx := testproc.Start(t, testproc.Options{Name: "nginx", Env: baseEnv()}, bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx error.log:\n%s", testproc.Tail(string(b), 16<<10))
		}
	})
	url := "http://127.0.0.1:" + itoa(port)
	eventually(t, "nginx to answer", func() bool {
		if ngx.Exited() {
			t.Fatalf("nginx exited: %s", ngx.Output())
		}
		resp, err := client.Get(url + "/livez")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	return url
}

// load sends streamed and plain chat completions through url from
// workers goroutines until stop is closed (at most max requests each),
// and counts what failed: a status other than 200, a connection error, a
// stream without its [DONE], an answer that is not a completion.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	done       sync.WaitGroup
}

func startLoad(url string, workers, max int, stop <-chan struct{}) *load {
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	c := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	l := &load{}
	for w := range workers {
		l.done.Go(func() {
			for i := range max {
				select {
				case <-stop:
					return
				default:
				}
				stream := (i+w)%2 == 0
				if err := l.one(c, url, stream); err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
					l.mu.Unlock()
				} else {
					l.ok.Add(1)
				}
			}
		})
	}
	go func() { l.done.Wait(); tr.CloseIdleConnections() }()
	return l
}

func (l *load) one(c *http.Client, url string, stream bool) error {
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(stopBody(stream, 6)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("stream=%v: reading the answer: %v (%q)", stream, err, b)
	case resp.StatusCode != 200:
		return fmt.Errorf("stream=%v: %d %s", stream, resp.StatusCode, b)
	case stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n"):
		return fmt.Errorf("a stream without its [DONE]: %q", b)
	case !stream && !strings.Contains(string(b), `"chat.completion"`):
		return fmt.Errorf("not a completion: %q", b)
	}
	return nil
}

// served is how many requests the router has answered (its metrics).
func (r *router) served(t *testing.T) float64 {
	return sum(r.metrics(t), "mentat_serve_requests_total", nil)
}

// Two routers behind Nginx OSS, restarted one at a time under steady
// load of streams and plain requests: no request fails and no stream is
// cut. Nginx has no active health checks; what carries it is the drain
// (Connection: close, and idle upstream connections closed by Nginx's
// keepalive_timeout before the drain ends), connections refused once the
// router stops accepting (proxy_next_upstream error, which resends a POST
// that was never sent), and a new router holding requests until its first
// round is over.
func TestRollingRestartBehindNginx(t *testing.T) {
	if nginxBin() == "" {
		t.Skip("no nginx on this machine")
	}
	d := startDaemon(t, "daemon")
	e := &engine{group: "stop", model: stopModel}
	startAgent(t, d.addr, e)
	env := []string{"MENTAT_DAEMONS=" + d.addr, "SERVE_DRAIN_S=2", "SERVE_SHUTDOWN_S=10"}
	ports := []int{testproc.FreePort(t), testproc.FreePort(t)}
	routers := make([]*router, 2)
	for i, p := range ports {
		routers[i] = startRouter(t, "router-"+itoa(i), p, env...)
		routers[i].waitModels(t, stopModel)
	}
	url := startNginx(t, ports...)

	stop := make(chan struct{})
	l := startLoad(url, 4, 5000, stop)
	defer func() {
		close(stop)
		l.done.Wait()
	}()
	eventually(t, "both routers to carry load", func() bool {
		return routers[0].served(t) > 20 && routers[1].served(t) > 20
	})
	for i, p := range ports {
		old := routers[i]
		// The test's own keep-alive connections to the router would count
		// among the idle ones its shutdown closes.
		client.CloseIdleConnections()
		old.Signal(syscall.SIGTERM)
		old.waitExit(t, 15*time.Second)
		out := old.Output()
		if !strings.Contains(out, "requests_cut=0 requests_forced=0") {
			t.Errorf("router-%d cut requests at its stop", i)
		}
		// Nginx closed every idle connection itself during the drain
		// (keepalive_timeout, and Connection: close on each answer): the
		// shutdown closed none under a request.
		if m := regexp.MustCompile(`event=serve_shutting_down .*idle_closed=(\d+)`).FindStringSubmatch(out); m == nil || m[1] != "0" {
			t.Errorf("router-%d's shutdown closed idle connections of nginx: %v", i, m)
		}
		routers[i] = startRouter(t, "router-"+itoa(i)+"-new", p, env...)
		eventually(t, "the new router-"+itoa(i)+" to be ready and carry load", func() bool {
			code, _ := getStatus(t, routers[i].url+"/readyz")
			return code == 200 && routers[i].served(t) > 20
		})
	}
	close(stop)
	l.done.Wait()
	stop = make(chan struct{}) // for the deferred close
	t.Logf("%d requests answered, %d failed", l.ok.Load(), l.failed.Load())
	if l.failed.Load() > 0 {
		t.Errorf("%d requests failed during the rolling restart:\n%s", l.failed.Load(), strings.Join(l.failures, "\n"))
	}
	if l.ok.Load() < 100 {
		t.Errorf("only %d requests answered: the load did not run", l.ok.Load())
	}
}
