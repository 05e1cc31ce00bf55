package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
