package daemon

import (
	"sync"
	"sync/atomic"
)

// hub fans event frames out to /events clients. Publishing never blocks:
// each client has a bounded queue, and a client whose queue is full is
// dropped (its Done channel closes) rather than slowing the daemon.
type hub struct {
	mu      sync.Mutex
	subs    map[*subscription]struct{}
	queue   int
	dropped atomic.Int64 // clients dropped for being too slow
}

// subscription is one client's queue. Frames arrive on C in publish order;
// Done closes when the client was dropped or unsubscribed.
type subscription struct {
	C    chan []byte
	Done chan struct{}
	once sync.Once
}

func newHub(queue int) *hub {
	return &hub{subs: map[*subscription]struct{}{}, queue: queue}
}

func (h *hub) subscribe() *subscription {
	s := &subscription{C: make(chan []byte, h.queue), Done: make(chan struct{})}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.once.Do(func() { close(s.Done) })
}

// publish queues frame for every client, dropping the ones that are full.
func (h *hub) publish(frame []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.C <- frame:
		default:
			delete(h.subs, s)
			h.dropped.Add(1)
			s.once.Do(func() { close(s.Done) })
		}
	}
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
