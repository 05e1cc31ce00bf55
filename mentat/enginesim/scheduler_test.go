package enginesim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// openStream starts a streaming chat request and returns once its headers
// arrived; cancel ends it from the client side.
func (te *testEngine) openStream(t *testing.T, ctx context.Context, maxTokens int) (*http.Response, error) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "sim", "stream": true, "max_tokens": maxTokens, "ignore_eos": true,
		"messages": []map[string]any{{"role": "user", "content": "long one"}}})
	req, _ := http.NewRequestWithContext(ctx, "POST", te.url+"/v1/chat/completions", bytes.NewReader(b))
	res, err := te.client.Do(req)
	if err == nil && res.StatusCode != 200 {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Errorf("stream request: %d %s", res.StatusCode, body)
		return nil, fmt.Errorf("status %d", res.StatusCode)
	}
	return res, err
}

func TestQueueBeyondMaxNumSeqs(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.MaxNumSeqs = 2; c.ITL = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := te.openStream(t, ctx, 3000)
			if err != nil {
				return // cancelled while waiting for headers
			}
			defer res.Body.Close()
			_, _ = bufio.NewReader(res.Body).WriteTo(discard{})
		}()
	}
	eventually(t, "2 running and 3 waiting in /metrics", func() bool {
		f := te.scrape(t)
		return value(t, f, "vllm:num_requests_running") == 2 && value(t, f, "vllm:num_requests_waiting") == 3
	})
	f := te.scrape(t)
	if kv := value(t, f, "vllm:kv_cache_usage_perc"); kv <= 0 || kv > 1 {
		t.Errorf("kv_cache_usage_perc %v with two requests running", kv)
	}
	// Clients that leave free their slot or their place at once.
	cancel()
	wg.Wait()
	eventually(t, "an empty engine after the clients left", func() bool {
		f := te.scrape(t)
		return value(t, f, "vllm:num_requests_running") == 0 && value(t, f, "vllm:num_requests_waiting") == 0 &&
			value(t, f, "vllm:request_success_total", "finished_reason", "abort") == 5 &&
			value(t, f, "vllm:kv_cache_usage_perc") == 0
	})
	f = te.scrape(t)
	// Queue time is observed on admission: the two that ran, and any waiting
	// one admitted in the moment before its own cancellation arrived.
	if q := value(t, f, "vllm:request_queue_time_seconds"); q < 2 || q > 5 {
		t.Errorf("queue time observed %v times, want 2 to 5", q)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestDisconnectFreesSlot(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.MaxNumSeqs = 1; c.ITL = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	res, err := te.openStream(t, ctx, 3000)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || len(line) < 6 {
		t.Fatalf("first frame: %q %v", line, err)
	}
	cancel()
	res.Body.Close()
	// The one slot is free again: a short request is served.
	done := make(chan int, 1)
	go func() {
		code, _ := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "max_tokens": 1,
			"messages": []map[string]any{{"role": "user", "content": "next"}}})
		done <- code
	}()
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("next request: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the slot of a disconnected client was not freed")
	}
	if a := te.stats.finishedAbort.Load(); a != 1 {
		t.Errorf("aborted %d, want 1", a)
	}
}

func TestMaxWaiting(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.MaxNumSeqs = 1; c.MaxWaiting = 1; c.ITL = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := te.openStream(t, ctx, 3000); err == nil {
				_, _ = bufio.NewReader(res.Body).WriteTo(discard{})
				res.Body.Close()
			}
		}()
	}
	eventually(t, "one running, one waiting", func() bool {
		st := te.sched.state()
		return st.Running == 1 && st.Waiting == 1
	})
	code, body := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": "x"}}})
	if code != 503 || decode[errorBody](t, body).Type != "ServiceUnavailableError" {
		t.Errorf("beyond --max-waiting: %d %s", code, body)
	}
	cancel()
	wg.Wait()
}

func TestPreemption(t *testing.T) {
	// Two requests of 5 prompt + 40 generated tokens fit the queue's slots
	// but not the 64-token cache together: one must be preempted, and both
	// must still finish whole.
	te := startEngine(t, false, func(c *Config) {
		c.MaxModelLen, c.KVCacheTokens, c.MaxNumSeqs = 64, 64, 2
		c.TTFT, c.ITL = time.Millisecond, time.Millisecond
	})
	var wg sync.WaitGroup
	results := make([]completionOut, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "abcdefghij", "max_tokens": 40, "ignore_eos": true})
			if code != 200 {
				t.Errorf("request %d: %d %s", i, code, body)
				return
			}
			results[i] = decode[completionOut](t, body)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Usage.CompletionTokens != 40 {
			t.Errorf("request %d generated %d tokens, want 40", i, r.Usage.CompletionTokens)
		}
	}
	f := te.scrape(t)
	if p := value(t, f, "vllm:num_preemptions_total"); p < 1 {
		t.Errorf("num_preemptions_total %v, want at least 1", p)
	}
	// Preemption and the ends free every block; the whole blocks of both
	// contexts (prompt and generated tokens) stay cached.
	if st := te.sched.state(); st.BlocksUsed != 0 || st.Running != 0 || st.CachedBlocks == 0 {
		t.Errorf("scheduler not empty after both finished: %+v", st)
	}
}

// testSched is a scheduler with caching off and free prefill, for the
// admission rules alone.
func testSched(maxSeqs, kvTokens int) *scheduler {
	return newScheduler(schedConfig{maxSeqs: maxSeqs, maxWaiting: 10, kvTokens: kvTokens, blockSize: 1, budget: maxSeqs})
}

func (s *scheduler) enqueueN(n int) *ticket {
	t, err := s.enqueue(s.newSeq(nil, n, ""))
	if err != nil {
		panic(err)
	}
	return t
}

func TestSchedulerFIFO(t *testing.T) {
	s := testSched(1, 1000)
	a := s.enqueueN(10)
	b := s.enqueueN(10)
	c := s.enqueueN(10)
	if a.state != stRunning || b.state != stWaiting || c.state != stWaiting {
		t.Fatal("first request runs, the rest wait")
	}
	s.release(c) // leaves the queue without running
	s.release(a)
	if b.state != stRunning {
		t.Fatal("the next in line runs when a slot frees")
	}
	s.release(b)
	s.release(b) // twice is harmless
	if st := s.state(); st.Running != 0 || st.Waiting != 0 || st.BlocksUsed != 0 {
		t.Fatalf("not empty: %+v", st)
	}
	// A head that does not fit the cache blocks those behind it (FCFS).
	s = testSched(4, 100)
	big := s.enqueueN(90)
	next := s.enqueueN(20)
	small := s.enqueueN(5)
	if big.state != stRunning || next.state != stWaiting || small.state != stWaiting {
		t.Fatal("head-of-line blocking")
	}
	s.release(big)
	if next.state != stRunning || small.state != stRunning {
		t.Fatal("both fit once the cache is free")
	}
	s.release(next)
	s.release(small)
}

func TestSchedulerPrefillLane(t *testing.T) {
	// Three long prompts admitted together: their prefills are computed one
	// after another on the lane, each at a rate the running decodes share.
	s := newScheduler(schedConfig{maxSeqs: 4, maxWaiting: 10, kvTokens: 10000, blockSize: 16,
		prefillPerToken: time.Millisecond, budget: 100})
	var ts []*ticket
	for range 3 {
		ts = append(ts, s.enqueueN(50))
	}
	for i, tk := range ts {
		// The i-th admission found i requests decoding: 100/(100-i) of the
		// full rate per token.
		cost := time.Duration(float64(50*time.Millisecond) * 100 / float64(100-i))
		if got := tk.prefillEnd.Sub(tk.laneStart); got != cost {
			t.Errorf("prefill %d costs %s, want %s", i, got, cost)
		}
		if i > 0 && !tk.laneStart.Equal(ts[i-1].prefillEnd) {
			t.Errorf("prefill %d starts at %s, not when %d ends", i, tk.laneStart, i-1)
		}
	}
	// The last one leaving before its prefill gives the lane its time back.
	s.release(ts[2])
	if !s.laneFree.Equal(ts[1].prefillEnd) {
		t.Errorf("lane free at %v after the cancel, want %v", s.laneFree, ts[1].prefillEnd)
	}
	// A cached prefix costs nothing: only the uncached part is booked.
	s.release(ts[0])
	s.release(ts[1])
	caching := newScheduler(schedConfig{maxSeqs: 4, maxWaiting: 10, kvTokens: 10000, blockSize: 16,
		caching: true, prefillPerToken: time.Millisecond, budget: 100})
	p := ids(1, 100)
	a, _ := caching.enqueue(caching.newSeq(p, len(p), ""))
	caching.release(a)
	b, _ := caching.enqueue(caching.newSeq(p, len(p), ""))
	if b.cachedTokens != 96 || b.prefillEnd.Sub(b.laneStart) != 4*time.Millisecond {
		t.Errorf("repeat: %d cached, prefill %s; want 96 and 4ms", b.cachedTokens, b.prefillEnd.Sub(b.laneStart))
	}
	caching.release(b)
}

func TestDecodeSlowdown(t *testing.T) {
	l := newLatency(0, 10*time.Millisecond, 0, 256)
	for _, c := range []struct {
		batch int
		want  time.Duration
	}{{1, 10 * time.Millisecond}, {129, 15 * time.Millisecond}, {257, 20 * time.Millisecond}} {
		if got := l.decode(c.batch, nil); got != c.want {
			t.Errorf("batch %d: ITL %s, want %s", c.batch, got, c.want)
		}
	}
	if got := newLatency(0, 10*time.Millisecond, 0, 0).decode(1000, nil); got != 10*time.Millisecond {
		t.Errorf("knee 0: ITL %s at batch 1000", got)
	}
}
