package enginesim

import (
	"container/list"
	"context"
	"sync"
)

// scheduler admits requests the way vLLM's FCFS scheduler does: at most
// maxSeqs run at once, each holds KV cache for its context, and the rest wait
// in arrival order. The head of the queue blocks those behind it.
//
// All state is under mu; handlers call in from their own goroutines, so
// there is no scheduler goroutine to stop.
type scheduler struct {
	mu         sync.Mutex
	maxSeqs    int
	maxWaiting int
	kvCap      int
	kvUsed     int
	running    int
	waiting    list.List // of *ticket, head first
}

type ticketState uint8

const (
	stWaiting ticketState = iota
	stRunning
	stDone
)

// ticket is one request's place in the scheduler. The owning handler is the
// only one to call wait, grow, preempt and release on it.
type ticket struct {
	need  int // KV tokens needed to (re)admit
	held  int // KV tokens held while running
	state ticketState
	elem  *list.Element
	ready chan struct{} // closed on admission; replaced on preemption
}

func newScheduler(maxSeqs, maxWaiting, kvCap int) *scheduler {
	return &scheduler{maxSeqs: maxSeqs, maxWaiting: maxWaiting, kvCap: kvCap}
}

// enqueue puts a request needing promptTokens of KV at the tail of the
// queue, or returns errQueueFull.
func (s *scheduler) enqueue(promptTokens int) (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{need: max(promptTokens, 1), ready: make(chan struct{})}
	t.elem = s.waiting.PushBack(t)
	s.dispatch()
	if t.state == stWaiting && s.waiting.Len() > s.maxWaiting {
		s.waiting.Remove(t.elem)
		return nil, errQueueFull
	}
	return t, nil
}

// dispatch admits from the head while a slot and the KV for it are free.
func (s *scheduler) dispatch() {
	for s.running < s.maxSeqs {
		front := s.waiting.Front()
		if front == nil {
			return
		}
		t := front.Value.(*ticket)
		if s.kvUsed+t.need > s.kvCap {
			return
		}
		s.waiting.Remove(front)
		t.elem = nil
		t.state = stRunning
		t.held = t.need
		s.kvUsed += t.need
		s.running++
		close(t.ready)
	}
}

// wait blocks until t is admitted or ctx ends; on ctx's end t leaves the
// queue (release still must be called).
func (s *scheduler) wait(ctx context.Context, t *ticket) error {
	s.mu.Lock()
	ready := t.ready
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// grow takes KV for one more token; false means the cache is full and the
// caller must preempt.
func (s *scheduler) grow(t *ticket) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kvUsed+1 > s.kvCap {
		return false
	}
	s.kvUsed++
	t.held++
	return true
}

// preempt frees t's slot and KV and puts it back at the head of the queue,
// needing its whole context plus the token it could not place (so it is not
// readmitted into the same full cache at once).
func (s *scheduler) preempt(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.state != stRunning {
		return
	}
	s.running--
	s.kvUsed -= t.held
	t.need = t.held + 1
	t.held = 0
	t.state = stWaiting
	t.ready = make(chan struct{})
	t.elem = s.waiting.PushFront(t)
	s.dispatch()
}

// release ends t wherever it is; safe to call more than once.
func (s *scheduler) release(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t.state {
	case stRunning:
		s.running--
		s.kvUsed -= t.held
		t.held = 0
	case stWaiting:
		s.waiting.Remove(t.elem)
		t.elem = nil
	case stDone:
		return
	}
	t.state = stDone
	s.dispatch()
}

// schedState is one consistent reading of the scheduler.
type schedState struct {
	Running, Waiting int
	KVUsed, KVCap    int
}

func (s *scheduler) state() schedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return schedState{Running: s.running, Waiting: s.waiting.Len(), KVUsed: s.kvUsed, KVCap: s.kvCap}
}
