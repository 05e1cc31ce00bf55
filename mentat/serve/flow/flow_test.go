package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// engine stands for a model's replicas as the balancer sees them: a
// capacity and the requests sent to it.
type engine struct{ capacity, inflight atomic.Int64 }

func (e *engine) free(string) int { return int(e.capacity.Load() - e.inflight.Load()) }

// run is a test's controller and its admitted requests, in order.
type run struct {
	t  *testing.T
	c  *Controller
	e  *engine
	ch chan *admitted
	wg sync.WaitGroup
}

type admitted struct {
	id  string
	adm *Admission
	err error
}

func newRun(t *testing.T, cfg Config, capacity int64) *run {
	r := &run{t: t, e: &engine{}, ch: make(chan *admitted, 1000)}
	r.e.capacity.Store(capacity)
	r.c = New(cfg, r.e.free, prometheus.NewRegistry())
	t.Cleanup(r.wg.Wait)
	return r
}

// ask starts one request in its own goroutine; its outcome arrives on
// r.ch. A request let go is sent at once (counted by the engine).
func (r *run) ask(ctx context.Context, id string, req Request) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		adm, err := r.c.Admit(ctx, req)
		if err == nil {
			r.e.inflight.Add(1)
			adm.Sent()
		}
		r.ch <- &admitted{id: id, adm: adm, err: err}
	}()
}

// next is the next outcome.
func (r *run) next() *admitted {
	r.t.Helper()
	select {
	case a := <-r.ch:
		return a
	case <-time.After(10 * time.Second):
		r.t.Fatal("no request was let go or refused")
		return nil
	}
}

// end ends an admitted request, as its answer's end would.
func (r *run) end(a *admitted, tokens float64) {
	r.e.inflight.Add(-1)
	a.adm.Done(tokens)
}

// waitQueued waits until n requests of model wait.
func (r *run) waitQueued(model string, n int) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := r.c.Queued(model)
		if q[0]+q[1]+q[2] == n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%v wait, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func req(tenant string, band Band, cost float64) Request {
	return Request{Model: "m", Band: band, Tenant: tenant, Label: "-", Weight: 1, Cost: cost}
}

// With capacity and nobody waiting a request goes at once; at capacity
// the next waits until one ends, then goes.
func TestFastPathThenWait(t *testing.T) {
	r := newRun(t, Config{}, 1)
	ctx := context.Background()
	r.ask(ctx, "a", req("t", Standard, 10))
	a := r.next()
	if a.err != nil || a.adm.Waited != 0 {
		t.Fatalf("first request: %v, waited %v", a.err, a.adm)
	}
	r.ask(ctx, "b", req("t", Standard, 10))
	r.waitQueued("m", 1)
	select {
	case b := <-r.ch:
		t.Fatalf("%s went while the engine was full", b.id)
	case <-time.After(20 * time.Millisecond):
	}
	r.end(a, 5)
	b := r.next()
	if b.err != nil || b.id != "b" {
		t.Fatalf("after the first ended: %s %v", b.id, b.err)
	}
	r.end(b, 0)
}

// Critical requests overtake sheddable and standard ones that waited
// longer; inside a band, one tenant's requests go in arrival order.
func TestBandsInOrder(t *testing.T) {
	r := newRun(t, Config{}, 1)
	ctx := context.Background()
	r.ask(ctx, "busy", req("x", Standard, 1))
	busy := r.next()
	for i, c := range []struct {
		id   string
		band Band
	}{{"s1", Sheddable}, {"s2", Sheddable}, {"n1", Standard}, {"c1", Critical}, {"n2", Standard}, {"c2", Critical}} {
		r.ask(ctx, c.id, req("t", c.band, 1))
		r.waitQueued("m", i+1)
	}
	var order []string
	last := busy
	for range 6 {
		r.end(last, 0)
		last = r.next()
		if last.err != nil {
			t.Fatal(last.err)
		}
		order = append(order, last.id)
	}
	r.end(last, 0)
	if fmt.Sprint(order) != "[c1 c2 n1 n2 s1 s2]" {
		t.Errorf("order %v, want critical, standard, sheddable, each in arrival order", order)
	}
}

// Tenants of one band share it by tokens per weight: with equal weights a
// tenant of long prompts gets as many tokens as one of short prompts, not
// as many requests; weight 2 gets twice the tokens.
func TestFairShareInTokens(t *testing.T) {
	for _, c := range []struct {
		name           string
		costA, costB   float64
		weightA        float64
		wantA, wantB   int // requests let go of the first 12
		answerTokensOf float64
	}{
		{"equal", 100, 100, 1, 6, 6, 0},
		{"long prompts count for what they cost", 500, 100, 1, 2, 10, 0},
		{"weight 2", 100, 100, 2, 8, 4, 0},
		{"answer tokens count at the end", 100, 100, 1, 3, 9, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRun(t, Config{}, 1)
			ctx := context.Background()
			r.ask(ctx, "busy", req("x", Standard, 1))
			last := r.next()
			n := 0
			for i := range 20 {
				a := req("A", Standard, c.costA)
				a.Weight = c.weightA
				// One at a time, so A is first in the band (ties go to it).
				r.ask(ctx, fmt.Sprintf("A%d", i), a)
				r.waitQueued("m", n+1)
				r.ask(ctx, fmt.Sprintf("B%d", i), req("B", Standard, c.costB))
				n += 2
				r.waitQueued("m", n)
			}
			counts := map[byte]int{}
			for range 12 {
				tokens := 0.0
				if last.id[0] == 'A' {
					tokens = c.answerTokensOf
				}
				r.end(last, tokens)
				last = r.next()
				counts[last.id[0]]++
			}
			if counts['A'] != c.wantA || counts['B'] != c.wantB {
				t.Errorf("of 12 let go: A %d, B %d; want %d and %d", counts['A'], counts['B'], c.wantA, c.wantB)
			}
			// Drain the rest.
			for range 28 {
				r.end(last, 0)
				last = r.next()
			}
			r.end(last, 0)
		})
	}
}

// A request whose client leaves while it waits is never let go, and the
// one behind it gets its turn.
func TestClientGoneWhileWaiting(t *testing.T) {
	r := newRun(t, Config{}, 1)
	r.ask(context.Background(), "busy", req("x", Standard, 1))
	busy := r.next()
	ctx, cancel := context.WithCancel(context.Background())
	r.ask(ctx, "gone", req("t", Critical, 1))
	r.waitQueued("m", 1)
	r.ask(context.Background(), "stays", req("t", Standard, 1))
	r.waitQueued("m", 2)
	cancel()
	gone := r.next()
	if gone.id != "gone" || !errors.Is(gone.err, context.Canceled) || gone.adm != nil {
		t.Fatalf("the left request: %s %v", gone.id, gone.err)
	}
	r.end(busy, 0)
	if s := r.next(); s.id != "stays" || s.err != nil {
		t.Fatalf("next: %s %v", s.id, s.err)
	} else {
		r.end(s, 0)
	}
	if v := testutil.ToFloat64(r.c.m.refusals.WithLabelValues("-", "client_gone")); v != 1 {
		t.Errorf("client_gone refusals %v, want 1", v)
	}
}

// A request let go whose client left before it was sent gives its
// capacity to the next.
func TestLetGoThenGone(t *testing.T) {
	r := newRun(t, Config{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r.ask(context.Background(), "busy", req("x", Standard, 1))
	busy := r.next()
	// Admit directly so the test controls when the waiter looks.
	done := make(chan error, 1)
	go func() {
		_, err := r.c.Admit(ctx, req("t", Standard, 1))
		done <- err
	}()
	r.waitQueued("m", 1)
	r.ask(context.Background(), "next", req("u", Standard, 1))
	r.waitQueued("m", 2)
	cancel() // the first waiter is woken by ctx, maybe after it was let go
	r.end(busy, 0)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the left request: %v", err)
	}
	n := r.next()
	if n.id != "next" || n.err != nil {
		t.Fatalf("next: %s %v", n.id, n.err)
	}
	r.end(n, 0)
}

// Past its band's time limit a request is refused with a retry time; at
// the band's length limit a new one is refused at once.
func TestLimits(t *testing.T) {
	cfg := Config{MaxWait: [NumBands]time.Duration{time.Hour, 50 * time.Millisecond, time.Hour}, MaxQueue: [NumBands]int{10, 10, 2}}
	r := newRun(t, cfg, 1)
	ctx := context.Background()
	r.ask(ctx, "busy", req("x", Standard, 1))
	busy := r.next()
	r.ask(ctx, "late", req("t", Standard, 1))
	late := r.next()
	var ref *Refusal
	if !errors.As(late.err, &ref) || ref.Reason != "queue_timeout" || ref.RetryAfter < time.Second || ref.Band != Standard {
		t.Fatalf("past the time limit: %v %+v", late.err, ref)
	}
	r.ask(ctx, "s1", req("t", Sheddable, 1))
	r.ask(ctx, "s2", req("t", Sheddable, 1))
	r.waitQueued("m", 2)
	r.ask(ctx, "s3", req("t", Sheddable, 1))
	s3 := r.next()
	if !errors.As(s3.err, &ref) || ref.Reason != "queue_full" || s3.id != "s3" {
		t.Fatalf("at the length limit: %s %v", s3.id, s3.err)
	}
	r.end(busy, 0)
	for range 2 {
		r.end(r.next(), 0)
	}
}

// A band full of one tenant's requests makes room for another tenant's
// by refusing the flooding tenant's newest; once the two are within one
// request of each other, a newcomer is refused itself.
func TestFullBandCrowdsOutTheLongestTenant(t *testing.T) {
	r := newRun(t, Config{MaxQueue: [NumBands]int{10, 3, 10}}, 1)
	ctx := context.Background()
	r.ask(ctx, "busy", req("x", Standard, 1))
	busy := r.next()
	for i, id := range []string{"b1", "b2", "b3"} {
		r.ask(ctx, id, req("batch", Standard, 1))
		r.waitQueued("m", i+1)
	}
	r.ask(ctx, "i1", req("interactive", Standard, 1))
	r.expect("b3", "queue_full", "batch's newest refused for i1")
	r.waitQueued("m", 3)
	r.ask(ctx, "i2", req("interactive", Standard, 1))
	r.expect("i2", "queue_full", "i2 refused (batch 2 waiting, interactive 1)")
	r.ask(ctx, "b4", req("batch", Standard, 1))
	r.expect("b4", "queue_full", "b4 refused (its own tenant is the longest)")
	if order := r.drain(busy, 3); order != "[b1 i1 b2]" {
		t.Errorf("order %v", order)
	}
}

// A tenant back from idle may be up to Burst tokens behind the band's
// virtual time: a light tenant's burst goes ahead of a flooding tenant
// while within that credit, instead of alternating with it at its share.
func TestBurstCredit(t *testing.T) {
	for _, c := range []struct {
		burst float64
		want  string
	}{{0, "[i1 b4 i2 b5]"}, {3, "[i1 i2 i3 b4]"}} {
		r := newRun(t, Config{Burst: c.burst}, 1)
		ctx := context.Background()
		r.ask(ctx, "busy", req("x", Standard, 1))
		busy := r.next()
		for i := 1; i <= 6; i++ {
			r.ask(ctx, fmt.Sprintf("b%d", i), req("batch", Standard, 1))
			r.waitQueued("m", i)
		}
		// batch runs alone for three requests.
		last := busy
		for range 3 {
			r.end(last, 0)
			last = r.next()
		}
		for i := 1; i <= 3; i++ {
			r.ask(ctx, fmt.Sprintf("i%d", i), req("interactive", Standard, 1))
			r.waitQueued("m", 3+i)
		}
		var order []string
		for range 4 {
			r.end(last, 0)
			last = r.next()
			order = append(order, last.id)
		}
		if got := fmt.Sprint(order); got != c.want {
			t.Errorf("burst %v: order %s, want %s", c.burst, got, c.want)
		}
		r.drain(last, 2)
	}
}

// With the model's total full, a critical request takes the place of the
// sheddable one that came last; a sheddable one is refused.
func TestShedForHigherBand(t *testing.T) {
	r := newRun(t, Config{MaxTotal: 3}, 1)
	ctx := context.Background()
	r.ask(ctx, "busy", req("x", Standard, 1))
	busy := r.next()
	for i, id := range []string{"s1", "s2", "n1"} {
		b := Sheddable
		if id == "n1" {
			b = Standard
		}
		r.ask(ctx, id, req("t", b, 1))
		r.waitQueued("m", i+1)
	}
	r.ask(ctx, "s3", req("t", Sheddable, 1))
	r.expect("s3", "queue_full", "a sheddable request at the total refused")
	r.ask(ctx, "c1", req("t", Critical, 1))
	r.expect("s2", "shed", "s2 shed for c1")
	if order := r.drain(busy, 3); order != "[c1 n1 s1]" {
		t.Errorf("order %v", order)
	}
}

// expect takes the next outcome and fails unless it is id's refusal for
// reason.
func (r *run) expect(id, reason, what string) {
	r.t.Helper()
	if a := r.next(); a.id != id || !isReason(a.err, reason) {
		r.t.Fatalf("want %s: got %s %v", what, a.id, a.err)
	}
}

// drain ends first, then each of the n requests let go after it in turn,
// and returns their ids in the order they went.
func (r *run) drain(first *admitted, n int) string {
	r.t.Helper()
	var order []string
	last := first
	for range n {
		r.end(last, 0)
		last = r.next()
		order = append(order, last.id)
	}
	r.end(last, 0)
	return fmt.Sprint(order)
}

func isReason(err error, reason string) bool {
	var ref *Refusal
	return errors.As(err, &ref) && ref.Reason == reason
}

// Capacity freed outside the router (another client's request ended) is
// handed on by Dispatch and Tick; the retry estimate follows the drain rate.
func TestTickAndRetryEstimate(t *testing.T) {
	r := newRun(t, Config{}, 0)
	ctx := context.Background()
	for i := range 5 {
		r.ask(ctx, fmt.Sprint(i), req("t", Standard, 1))
	}
	r.waitQueued("m", 5)
	// Dispatch (after a scrape) hands on what the capacity shows now,
	// Tick the same.
	r.e.capacity.Store(2)
	r.c.Dispatch()
	var adms []*admitted
	for range 2 {
		adms = append(adms, r.next())
	}
	r.waitQueued("m", 3)
	r.e.capacity.Store(5)
	r.c.Tick()
	for range 3 {
		adms = append(adms, r.next())
	}
	for _, a := range adms {
		if a.err != nil {
			t.Fatal(a.err)
		}
		r.end(a, 0)
	}
	// 5 completions in the window: 0.5/s; a request with 9 ahead would
	// wait 20 s.
	mq := r.c.models["m"]
	mq.bands[Standard].queued = 9
	if d := r.c.retryAfter(mq, Standard); d != 20*time.Second {
		t.Errorf("retry after %v, want 20s", d)
	}
	mq.bands[Standard].queued = 0
}

// Many requests racing for a small capacity under -race: each is let go
// exactly once, never more at once than the capacity, and all go.
func TestConcurrentNeverOverCapacity(t *testing.T) {
	r := newRun(t, Config{}, 3)
	var peak, cur atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adm, err := r.c.Admit(context.Background(), req(fmt.Sprint(i%7), Band(i%3), float64(i%5)))
			if err != nil {
				t.Error(err)
				return
			}
			r.e.inflight.Add(1)
			adm.Sent()
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
			cur.Add(-1)
			r.e.inflight.Add(-1)
			adm.Done(1)
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 3 {
		t.Errorf("%d requests went at once over a capacity of 3", p)
	}
	if q := r.c.Queued("m"); q != [NumBands]int{} {
		t.Errorf("left waiting: %v", q)
	}
}
