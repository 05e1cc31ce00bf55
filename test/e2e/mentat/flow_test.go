package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/openaijs"
)

// flowRouter is one enginesim that generates one request at a time
// (--max-num-seqs 1, 10 tokens at itl apart) behind a router with flow
// control on and env.
func flowRouter(t *testing.T, itl string, env ...string) (*replicaSet, *router) {
	t.Helper()
	rs := &replicaSet{d: startDaemon(t, "daemon")}
	e := &engine{group: "rep-a", model: replicaModel, itl: itl, args: []string{"--max-num-seqs", "1"}}
	startAgent(t, rs.d.addr, e)
	rs.engines = append(rs.engines, e)
	r := rs.router(t, "router", 0, append([]string{"FLOW_CONTROL=on"}, env...)...)
	r.engine = e
	return rs, r
}

// outcome is one request's answer and when it ended.
type outcome struct {
	id         string
	code       int
	retryAfter string
	body       string
	at         time.Time
	err        error
}

// send posts one chat completion of tokens tokens with header values and
// reports its outcome on out.
func send(ctx context.Context, url, id string, header map[string]string, tokens int, out chan<- outcome) {
	body := `{"model":"` + replicaModel + `","ignore_eos":true,"max_tokens":` + strconv.Itoa(tokens) + `,"messages":[{"role":"user","content":"request ` + id + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		out <- outcome{id: id, err: err, at: time.Now()}
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out <- outcome{id: id, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b), at: time.Now()}
}

// waitQueued waits until the router's flow control holds n requests of
// band.
func (r *router) waitQueued(t *testing.T, band string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d %s requests queued", n, band), func() bool {
		return sum(r.metrics(t), "mentat_serve_flow_queued", map[string]string{"model": replicaModel, "band": band}) == float64(n)
	})
}

// Critical requests overtake a queue of sheddable ones: with the engine
// busy and six sheddable requests waiting, two critical requests sent
// last are answered first.
func TestFlowCriticalOvertakesSheddable(t *testing.T) {
	_, r := flowRouter(t, "20ms", "FLOW_MAX_INFLIGHT=1")
	out := make(chan outcome, 16)
	ctx := context.Background()
	// Busy for about 4 s, while the others queue; they take 40 ms each.
	go send(ctx, r.url, "busy", map[string]string{"X-Priority": "sheddable"}, 200, out)
	eventually(t, "the first request to be in flight", func() bool {
		return sum(r.metrics(t), "mentat_serve_flow_dispatched_total", map[string]string{"band": "sheddable"}) == 1
	})
	for i := range 6 {
		go send(ctx, r.url, "s"+strconv.Itoa(i), map[string]string{"X-Priority": "sheddable"}, 2, out)
		r.waitQueued(t, "sheddable", i+1)
	}
	for i := range 2 {
		go send(ctx, r.url, "c"+strconv.Itoa(i), map[string]string{"X-Priority": "critical"}, 2, out)
		r.waitQueued(t, "critical", i+1)
	}
	var order []string
	for range 9 {
		o := <-out
		if o.err != nil || o.code != http.StatusOK {
			t.Fatalf("%s: %v %d %s", o.id, o.err, o.code, o.body)
		}
		order = append(order, o.id)
	}
	if order[0] != "busy" || order[1][0] != 'c' || order[2][0] != 'c' {
		t.Errorf("answered in the order %v; want the busy one, then both critical ones, then the sheddable ones", order)
	}
	if got := fmt.Sprint(order[3:]); got != "[s0 s1 s2 s3 s4 s5]" {
		t.Errorf("sheddable ones answered %s, want arrival order", got)
	}
}

// Two tenants (X-Tenant) that both ask for more than the engine serves
// get equal turns, not turns by who asked first, and the queue is in the
// router, not in the engine.
func TestFlowEqualTenantsShareEqually(t *testing.T) {
	rs, r := flowRouter(t, "15ms", "FLOW_MAX_INFLIGHT=1")
	out := make(chan outcome, 32)
	ctx := context.Background()
	// Busy for about 4 s, while the others queue; they take 30 ms each.
	// A third tenant's: its 250 tokens are charged to neither a nor b.
	go send(ctx, r.url, "first", map[string]string{"X-Tenant": "x"}, 250, out)
	eventually(t, "the first request in flight", func() bool {
		return sum(r.metrics(t), "mentat_serve_flow_dispatched_total", nil) == 1
	})
	// Tenant a asks eight times, then b eight times.
	for i := range 8 {
		go send(ctx, r.url, "a"+strconv.Itoa(i), map[string]string{"X-Tenant": "a"}, 2, out)
	}
	r.waitQueued(t, "standard", 8)
	for i := range 8 {
		go send(ctx, r.url, "b"+strconv.Itoa(i), map[string]string{"X-Tenant": "b"}, 2, out)
	}
	r.waitQueued(t, "standard", 16)
	var order []string
	maxWaiting := 0.0
	for range 17 {
		o := <-out
		if o.err != nil || o.code != http.StatusOK {
			t.Fatalf("%s: %v %d %s", o.id, o.err, o.code, o.body)
		}
		order = append(order, o.id)
		maxWaiting = max(maxWaiting, engineMetric(t, rs.engines[0], "vllm:num_requests_waiting"))
	}
	// Of the first eight answered after "first", b had half, though all
	// of a's were queued before any of b's.
	b := 0
	for _, id := range order[1:9] {
		if id[0] == 'b' {
			b++
		}
	}
	if b != 4 {
		t.Errorf("answered %v: b got %d of the first 8 turns, want 4", order, b)
	}
	if maxWaiting != 0 {
		t.Errorf("the engine reported %v waiting: the queue should be in the router", maxWaiting)
	}
}

// A queued request whose client hangs up is never sent; a request past
// its band's time limit gets 429 with Retry-After, never a 5xx.
func TestFlowClientGoneAndTimeLimit(t *testing.T) {
	rs, r := flowRouter(t, "100ms", "FLOW_MAX_INFLIGHT=1", "FLOW_WAIT_S_STANDARD=0.3")
	out := make(chan outcome, 4)
	go send(context.Background(), r.url, "busy", map[string]string{"X-Priority": "critical"}, 10, out)
	eventually(t, "the first request in flight", func() bool {
		return sum(r.metrics(t), "mentat_serve_flow_dispatched_total", nil) == 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	go send(ctx, r.url, "gone", map[string]string{"X-Priority": "critical"}, 10, out)
	r.waitQueued(t, "critical", 1)
	cancel()
	if o := <-out; o.id != "gone" || o.err == nil {
		t.Fatalf("the request whose client left: %+v", o)
	}
	r.waitQueued(t, "critical", 0)
	go send(context.Background(), r.url, "late", nil, 10, out)
	o := <-out
	if o.id != "late" || o.code != http.StatusTooManyRequests || o.retryAfter == "" || !strings.Contains(o.body, `"code":"queue_timeout"`) {
		t.Fatalf("past the standard band's 0.3 s: %+v", o)
	}
	if busy := <-out; busy.code != http.StatusOK {
		t.Fatalf("the first request: %+v", busy)
	}
	if n := sum(r.metrics(t), "mentat_serve_flow_refused_total", map[string]string{"reason": "client_gone"}); n != 1 {
		t.Errorf("client_gone refusals %v, want 1", n)
	}
	// The engine saw the first request only: neither the left nor the
	// late one was sent.
	if served := engineMetric(t, rs.engines[0], "vllm:request_success_total"); served != 1 {
		t.Errorf("the engine finished %v requests, want 1", served)
	}
}

// The official OpenAI clients honour flow control's 429: a sheddable
// call refused past its band's wait limit is retried by the client after
// the advertised time, and then served.
func TestFlowRetryAfterWithOpenAIClients(t *testing.T) {
	_, r := flowRouter(t, "100ms", "FLOW_MAX_INFLIGHT=1", "FLOW_WAIT_S_SHEDDABLE=0.2")
	for _, c := range openaijs.Clients {
		out := make(chan outcome, 1)
		// Busy for about a second: 10 tokens, 100 ms apart.
		go send(context.Background(), r.url, "busy", map[string]string{"X-Priority": "critical"}, 10, out)
		eventually(t, "the busy request in flight", func() bool {
			return sum(r.metrics(t), "mentat_serve_flow_queued", nil) == 0 &&
				engineMetric(t, r.engine, "vllm:num_requests_running") == 1
		})
		got, err := openaijs.RunFlow(c, r.url+"/v1", replicaModel)
		if err != nil {
			t.Fatal(err)
		}
		st := got.Statuses
		if len(st) < 2 || st[0] != 429 || st[len(st)-1] != 200 || got.Answered != 1 {
			t.Errorf("%s: the call's requests %v, answered %d; want 429 then 200", c, st, got.Answered)
		}
		for i, w := range got.Waits {
			if w.AdvertisedMS <= 0 || w.RetryAfter == "" || w.WaitedMS < w.AdvertisedMS-1 {
				t.Errorf("%s: retry %d waited %.1f ms after a 429 advertising retry-after-ms %.0f (Retry-After %q)", c, i, w.WaitedMS, w.AdvertisedMS, w.RetryAfter)
			}
		}
		if o := <-out; o.code != http.StatusOK {
			t.Fatalf("the busy request: %+v", o)
		}
	}
}

// readStream posts a streamed chat completion and returns its body as it
// arrived, with the time of each line.
func readStream(t *testing.T, url string, header map[string]string) (int, []frame) {
	t.Helper()
	body := `{"model":"` + replicaModel + `","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"stream me"}]}`
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	var lines []frame
	b := make([]byte, 0, 4096)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		for {
			i := strings.Index(string(b), "\n\n")
			if i < 0 {
				break
			}
			lines = append(lines, frame{data: string(b[:i]), at: time.Now()})
			b = b[i+2:]
		}
		if err != nil {
			break
		}
	}
	return resp.StatusCode, lines
}

// A stream that waits in flow control's queue gets SSE comments while it
// waits (SSE_KEEPALIVE_S), then its frames and [DONE].
func TestFlowKeepAliveWhileQueued(t *testing.T) {
	_, r := flowRouter(t, "100ms", "FLOW_MAX_INFLIGHT=1", "SSE_KEEPALIVE_S=0.2")
	out := make(chan outcome, 1)
	go send(context.Background(), r.url, "busy", nil, 10, out)
	eventually(t, "the busy request in flight", func() bool {
		return engineMetric(t, r.engine, "vllm:num_requests_running") == 1
	})
	code, lines := readStream(t, r.url, nil)
	comments, firstData := 0, -1
	for i, l := range lines {
		if l.data == ": keep-alive" {
			comments++
			if firstData >= 0 {
				t.Errorf("a comment after the first frame: %v", lines)
			}
		} else if firstData < 0 {
			firstData = i
		}
	}
	if code != 200 || comments < 2 || firstData < 0 || lines[len(lines)-1].data != "data: [DONE]" {
		t.Fatalf("status %d, %d comments, frames %v", code, comments, lines)
	}
	if o := <-out; o.code != http.StatusOK {
		t.Fatalf("the busy request: %+v", o)
	}
}

// A model whose only engine restarts within MODEL_WAIT_S serves the
// requests sent while it was gone.
func TestModelRestartWithinWait(t *testing.T) {
	rs := &replicaSet{d: startDaemon(t, "daemon")}
	e := &engine{group: "rep-a", model: replicaModel}
	startAgent(t, rs.d.addr, e)
	rs.engines = append(rs.engines, e)
	r := rs.router(t, "router", 0, "MODEL_WAIT_S=30")
	ask(t, r.url, nil, `{"model":"`+replicaModel+`","max_tokens":2,"messages":[{"role":"user","content":"before"}]}`)
	stop(t, e.agent)
	eventually(t, "the model to stop routing", func() bool { return len(r.models(t)) == 0 })
	out := make(chan outcome, 3)
	for i := range 3 {
		go send(context.Background(), r.url, "w"+strconv.Itoa(i), nil, 2, out)
	}
	time.Sleep(500 * time.Millisecond) // the requests wait for the model
	startAgent(t, rs.d.addr, e)        // same group, same port
	for range 3 {
		if o := <-out; o.err != nil || o.code != http.StatusOK {
			t.Errorf("%s sent while the engine was down: %v %d %s", o.id, o.err, o.code, o.body)
		}
	}
}
