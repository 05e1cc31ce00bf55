package server

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// item is one image waiting for, or being prepared and run by, a worker.
type item struct {
	call     *call
	idx      int
	image    []byte // the request's bytes, until the worker has prepared them
	enqueued time.Time
	elem     *list.Element // guarded by queue.mu; nil once taken or removed
}

// queue is the FIFO of items between request handlers and workers. Its depth
// is bounded by max_queue_depth (0 = unlimited); a full queue refuses a
// whole request (nothing half-queued). Workers are woken through a channel
// with one slot per worker, so a burst of pushes never blocks.
type queue struct {
	max  int
	wake chan struct{}
	m    *metrics

	mu sync.Mutex
	l  list.List

	// ewmaItem is the smoothed model time per item, for Retry-After.
	ewmaMu   sync.Mutex
	ewmaItem time.Duration
	workers  int
}

func newQueue(max, workers int, m *metrics) *queue {
	return &queue{max: max, wake: make(chan struct{}, workers), workers: workers, m: m, ewmaItem: 100 * time.Millisecond}
}

// push queues items unless the queue is full. force skips the depth bound
// (async jobs, already bounded by async_max_queue). An empty queue always
// takes a request, so one request larger than the bound still runs.
func (q *queue) push(items []*item, force bool) bool {
	now := time.Now()
	q.mu.Lock()
	depth := q.l.Len()
	if !force && q.max > 0 && depth > 0 && depth+len(items) > q.max {
		q.mu.Unlock()
		return false
	}
	for _, it := range items {
		it.enqueued = now
		it.elem = q.l.PushBack(it)
	}
	q.m.queueDepth.Set(float64(q.l.Len()))
	q.mu.Unlock()
	for range items {
		select {
		case q.wake <- struct{}{}:
		default:
			return true // every worker already has a signal pending
		}
	}
	return true
}

// pop takes the oldest item, or nil.
func (q *queue) pop() *item {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.l.Front()
	if e == nil {
		return nil
	}
	it := q.l.Remove(e).(*item)
	it.elem = nil
	q.m.queueDepth.Set(float64(q.l.Len()))
	if q.l.Len() > 0 {
		select { // hand the rest to another idle worker
		case q.wake <- struct{}{}:
		default:
		}
	}
	return it
}

// remove takes items out of the queue that no worker has taken yet and
// returns how many it removed (a deadline or a client that hung up).
func (q *queue) remove(items []*item) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, it := range items {
		if it.elem != nil {
			q.l.Remove(it.elem)
			it.elem = nil
			n++
		}
	}
	q.m.queueDepth.Set(float64(q.l.Len()))
	return n
}

func (q *queue) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.l.Len()
}

// observe feeds one batch's worker time (Prepare and Run) into the per-item
// EWMA.
func (q *queue) observe(run time.Duration, items int) {
	if items <= 0 {
		return
	}
	per := run / time.Duration(items)
	q.ewmaMu.Lock()
	q.ewmaItem = time.Duration(0.2*float64(per) + 0.8*float64(q.ewmaItem))
	q.ewmaMu.Unlock()
}

// retryAfter estimates, in whole seconds clamped to 1..60, how long the
// queue takes to drain: depth × per-item worker time / workers.
func (q *queue) retryAfter() int {
	q.ewmaMu.Lock()
	per := q.ewmaItem
	q.ewmaMu.Unlock()
	return retryAfterSeconds(q.depth(), per, q.workers)
}

func retryAfterSeconds(depth int, perItem time.Duration, workers int) int {
	if workers < 1 {
		workers = 1
	}
	s := math.Ceil(float64(depth) * perItem.Seconds() / float64(workers))
	return int(math.Min(60, math.Max(1, s)))
}
