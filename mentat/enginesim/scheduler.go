package enginesim

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// scheduler admits requests the way vLLM's FCFS scheduler does: at most
// maxSeqs run at once, each holds KV cache blocks for its context, and the
// rest wait in arrival order. The head of the queue blocks those behind it.
//
// It also books each admitted request's prefill on one prefill lane: the
// uncached prompt tokens of requests admitted together are computed one
// request after another, at a rate the running decodes share (see
// prefillCost). So a burst of long prompts queues, as on a real engine.
//
// All state is under mu; handlers call in from their own goroutines, so
// there is no scheduler goroutine to stop.
type scheduler struct {
	mu         sync.Mutex
	maxSeqs    int
	maxWaiting int
	kv         *kvCache
	running    int
	waiting    list.List // of *ticket, head first
	// prefillPerToken and budget (max-num-batched-tokens) price the lane;
	// laneFree is when it has computed everything booked so far.
	prefillPerToken time.Duration
	budget          int
	laneFree        time.Time
}

type ticketState uint8

const (
	stWaiting ticketState = iota
	stRunning
	stDone
)

// ticket is one request's place in the scheduler. The owning handler is the
// only one to call wait, grow, preempt and release on it. The fields set
// on admission are written under mu before ready closes, so the owner reads
// them after wait without the lock.
type ticket struct {
	seq       kvSeq
	preempted bool // readmission needs room for the token that did not fit
	state     ticketState
	elem      *list.Element
	ready     chan struct{} // closed on admission; replaced on preemption

	admitted   time.Time // last admission
	laneStart  time.Time // when the lane starts this admission's prefill
	prefillEnd time.Time // when the lane has computed it
	batch      int       // requests running at admission, this one included
	// cachedTokens is the prompt's prefix served from the cache on its
	// first admission (usage.prompt_tokens_details.cached_tokens, as vLLM
	// keeps num_cached_tokens); -1 before it.
	cachedTokens int
}

// schedConfig is what the scheduler is built from.
type schedConfig struct {
	maxSeqs, maxWaiting int
	kvTokens, blockSize int
	caching             bool
	prefillPerToken     time.Duration
	budget              int
}

func newScheduler(c schedConfig) *scheduler {
	return &scheduler{
		maxSeqs: c.maxSeqs, maxWaiting: c.maxWaiting,
		kv:              newKVCache(c.kvTokens, c.blockSize, c.caching),
		prefillPerToken: c.prefillPerToken, budget: c.budget,
	}
}

// newSeq is the KV sequence of a prompt (ids may be nil with caching off).
func (s *scheduler) newSeq(ids []int, n int, salt string) kvSeq {
	return newKVSeq(ids, n, salt, s.kv.blockSize, s.kv.caching)
}

// enqueue puts a request at the tail of the queue, or returns errQueueFull.
func (s *scheduler) enqueue(seq kvSeq) (*ticket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &ticket{seq: seq, ready: make(chan struct{}), cachedTokens: -1}
	t.elem = s.waiting.PushBack(t)
	s.dispatch()
	if t.state == stWaiting && s.waiting.Len() > s.maxWaiting {
		s.waiting.Remove(t.elem)
		t.state = stDone
		return nil, errQueueFull
	}
	return t, nil
}

// dispatch admits from the head while a slot and the blocks for it are
// free, and books each admitted prefill on the lane.
func (s *scheduler) dispatch() {
	var now time.Time
	for s.running < s.maxSeqs {
		front := s.waiting.Front()
		if front == nil {
			return
		}
		t := front.Value.(*ticket)
		extra := 0
		if t.preempted {
			extra = 1
		}
		cached, ok := s.kv.allocate(&t.seq, extra)
		if !ok {
			return
		}
		if now.IsZero() {
			now = time.Now()
		}
		s.waiting.Remove(front)
		t.elem = nil
		t.state = stRunning
		if t.cachedTokens < 0 {
			t.cachedTokens = cached
		}
		t.admitted = now
		t.laneStart = now
		if s.laneFree.After(now) {
			t.laneStart = s.laneFree
		}
		t.prefillEnd = t.laneStart.Add(s.prefillCost(t.seq.tokens-cached, s.running))
		s.laneFree = t.prefillEnd
		s.running++
		t.batch = s.running
		close(t.ready)
	}
}

// prefillCost is the compute time of uncached prompt tokens while decoding
// others run. Each engine step has budget tokens (max-num-batched-tokens);
// every running decode takes one of them and prefill gets the rest, so the
// cost per token grows by budget / (budget - decoding). vLLM requires
// budget >= max-num-seqs, so the share never reaches zero.
func (s *scheduler) prefillCost(uncached, decoding int) time.Duration {
	if uncached <= 0 || s.prefillPerToken <= 0 {
		return 0
	}
	share := max(s.budget-decoding, 1)
	return time.Duration(float64(s.prefillPerToken) * float64(uncached) * float64(s.budget) / float64(share))
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

// grow places one more token of t in the cache and returns the running
// batch size; false means no block is free and the caller must preempt.
func (s *scheduler) grow(t *ticket, token int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.kv.grow(&t.seq, token)
}

// preempt frees t's slot and blocks and puts it back at the head of the
// queue. Its hashed blocks stay cached, so its readmission may find them.
func (s *scheduler) preempt(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.state != stRunning {
		return
	}
	s.running--
	s.kv.release(&t.seq)
	t.preempted = true
	t.state = stWaiting
	t.ready = make(chan struct{})
	t.elem = s.waiting.PushFront(t)
	s.dispatch()
}

// release ends t wherever it is; safe to call more than once. A request
// that ends before its prefill was computed gives the lane back its time
// when nothing was booked behind it.
func (s *scheduler) release(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t.state {
	case stRunning:
		s.running--
		s.kv.release(&t.seq)
		if now := time.Now(); s.laneFree.Equal(t.prefillEnd) && t.prefillEnd.After(now) {
			s.laneFree = t.laneStart
			if now.After(t.laneStart) {
				s.laneFree = now
			}
		}
	case stWaiting:
		s.waiting.Remove(t.elem)
		t.elem = nil
	case stDone:
		return
	}
	t.state = stDone
	s.dispatch()
}

// schedState is one consistent reading of the scheduler and its cache.
type schedState struct {
	Running, Waiting int
	BlockSize        int
	Blocks           int // capacity in blocks
	BlocksUsed       int // pinned or private: not free
	CachedBlocks     int // holding a cached prefix, pinned or evictable
	Usage            float64
	Caching          bool
	Queries, Hits    int64 // prefix cache lookups and hits, in tokens
	Evictions        int64
}

func (s *scheduler) state() schedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	kv := s.kv
	return schedState{
		Running: s.running, Waiting: s.waiting.Len(),
		BlockSize: kv.blockSize, Blocks: kv.numBlocks, BlocksUsed: kv.numBlocks - kv.free(),
		CachedBlocks: kv.cachedBlocks(), Usage: kv.usage(), Caching: kv.caching,
		Queries: kv.queries, Hits: kv.hits, Evictions: kv.evictions,
	}
}
