package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// call is one admitted request: N result slots filled by the workers
// (Prepare failures included) or the deadline, whichever comes first for
// each slot.
type call struct {
	deadline time.Time
	onStart  func()           // first item handed to the model (async: running)
	parsed   *envelope.Parsed // its Params go to every Prepare

	// refs counts who may still read the request's image bytes: the handler
	// and each item no worker has prepared yet. The last to let go hands the
	// buffers back to the envelope's pool; a worker may still be preparing
	// an item after the handler has answered (deadline, hang-up).
	refs int // guarded by mu

	startOnce sync.Once
	mu        sync.Mutex
	results   []envelope.Item
	finished  []bool
	published int // slots finished with a real outcome (not a timeout)
	remaining int
	done      chan struct{}
}

func newCall(p *envelope.Parsed, deadline time.Time, onStart func()) *call {
	n := len(p.Data)
	return &call{deadline: deadline, onStart: onStart, parsed: p, refs: n + 1,
		results: make([]envelope.Item, n), finished: make([]bool, n), remaining: n, done: make(chan struct{})}
}

// drop lets go of n references to the request's image bytes.
func (c *call) drop(n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.refs -= n
	last := c.refs == 0
	c.mu.Unlock()
	if last {
		c.parsed.Release()
	}
}

// finish fills slot i once; later outcomes for the slot (a batch that ends
// after the deadline) are dropped.
func (c *call) finish(i int, it envelope.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished[i] {
		return
	}
	c.finished[i], c.results[i] = true, it
	if it.Status != envelope.StatusRunTimeout {
		c.published++
	}
	c.remaining--
	if c.remaining == 0 {
		close(c.done)
	}
}

func (c *call) started() {
	if c.onStart != nil {
		c.startOnce.Do(c.onStart)
	}
}

// expire times out every slot still open and reports whether any was.
func (c *call) expire() bool {
	c.mu.Lock()
	open := c.remaining > 0
	c.mu.Unlock()
	if !open {
		return false
	}
	for i := range c.results {
		c.finish(i, timeoutItem())
	}
	return true
}

// errQueueFull is the 429 of a full queue; retry carries Retry-After.
type errQueueFull struct{ retry int }

func (e *errQueueFull) Error() string { return "queue full" }

// infer runs an admitted request: queue its images (bytes that are no image
// file at all fail here, imageio.Sniff), wait for the workers
// (which prepare and run them) or the deadline, and build the envelope.
// force skips the queue bound (async jobs). It returns nil, nil when ctx
// ended first (the client hung up).
//
// Prepare runs on the worker, just before the batch, rather than here: one
// thread then decodes and runs in turn, as a program of its own would, and
// the handlers' threads, which share the cores with ONNX Runtime, only carry
// HTTP, JSON and base64 (BLAZEFACE on 2 cores: 89-91 % -> 91-94 % of the
// in-process loop, CPU per item 8.2-8.5 -> 7.6-7.9 ms; bench/ppocr). Queued
// items hold the request's compressed bytes, not decoded tensors.
func (s *Server) infer(ctx context.Context, p *envelope.Parsed, taskID string, arrival, deadline time.Time, force bool, onStart func()) (*envelope.Response, error) {
	c := newCall(p, deadline, onStart)
	defer c.drop(1)
	items := make([]*item, 0, len(p.Data))
	for i, img := range p.Data {
		if err := imageio.Sniff(img); err != nil {
			c.drop(1)
			c.finish(i, failedItem(err))
			continue
		}
		items = append(items, &item{call: c, idx: i, image: img})
	}
	if len(items) > 0 && !s.q.push(items, force) {
		c.drop(len(items))
		s.m.queueRejected.WithLabelValues("model").Inc()
		return nil, &errQueueFull{retry: s.q.retryAfter()}
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	expired := false
	select {
	case <-c.done:
	case <-timer.C:
		// Queued items leave the queue without taking a worker; items being
		// run finish in the background and are dropped.
		c.drop(s.q.remove(items))
		expired = c.expire()
	case <-ctx.Done():
		c.drop(s.q.remove(items))
		return nil, nil
	case <-s.ctx.Done():
		c.drop(s.q.remove(items))
		for i := range c.results {
			c.finish(i, envelope.Item{Status: envelope.StatusNotReady, Data: envelope.Null, Message: "the server is shutting down; retry"})
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	info := s.info()
	resp := &envelope.Response{
		TaskID:  taskID,
		Model:   &envelope.ModelInfo{Name: info.Name, Version: info.Version},
		Results: append([]envelope.Item(nil), c.results...),
	}
	switch {
	case expired && c.published > 0:
		resp.Status, resp.Partial = envelope.StatusPartial, true
	case expired:
		resp.Status = envelope.StatusRunTimeout
	default:
		resp.Status = summary(resp.Results)
	}
	resp.StatusStr = envelope.Text(resp.Status)
	resp.ServerTimeMS = envelope.MS(time.Since(arrival).Nanoseconds())
	return resp, nil
}

// summary is the top-level status of a request that did not time out: OK
// while any item succeeded (failures stay per item), else the items' common
// status, or a server error when they failed differently.
func summary(items []envelope.Item) envelope.Status {
	st := items[0].Status
	for _, it := range items {
		if it.Status == envelope.StatusOK {
			return envelope.StatusOK
		}
		if it.Status != st {
			st = envelope.StatusServerError
		}
	}
	return st
}

// safePrepare turns a panicking Prepare into a failure of that item.
func safePrepare(m model.Model, img []byte, params map[string]json.RawMessage) (in model.Input, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("model panicked preparing the image: %v", p)
		}
	}()
	return m.Prepare(img, params)
}
