package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// Inflight is the registry of requests the router is carrying right now,
// for the status page. A row is added once a request has been routed and
// removed when its handler returns, whatever the outcome (including a
// client that hung up). Safe for concurrent use.
//
// Rows form a doubly linked list in arrival order: adding and removing is
// a few pointer writes under the lock (no hashing, no allocation besides
// the row), and a snapshot is already sorted by ID.
type Inflight struct {
	mu         sync.Mutex
	next       uint64
	n          int
	head, tail *flight
}

// flight is one live row; the hot counters are atomics so the copy loop
// never takes the registry lock.
type flight struct {
	prev, next *flight // guarded by Inflight.mu
	id         uint64
	model      string
	group      string
	start      time.Time
	bodyBytes  int64
	stream     atomic.Bool
	// firstByte is nanoseconds from start to the first upstream byte; 0
	// until it arrives.
	firstByte atomic.Int64
	outBytes  atomic.Int64
}

// Request is a copy of one in-flight row.
type Request struct {
	// ID is unique per router process, increasing.
	ID    uint64
	Model string
	Group string
	// Start is when the request was routed.
	Start time.Time
	// BodyBytes is the size of the request body forwarded.
	BodyBytes int64
	// Stream is true when the body asked for a stream or the engine
	// answered with text/event-stream.
	Stream bool
	// FirstByte is when the first byte of the engine's answer body
	// arrived; zero while still waiting.
	FirstByte time.Time
	// OutBytes is how many body bytes were returned to the client so far.
	OutBytes int64
}

func newInflight() *Inflight { return &Inflight{} }

func (in *Inflight) add(model, group string, bodyBytes int64, stream bool, start time.Time) *flight {
	f := &flight{model: model, group: group, start: start, bodyBytes: bodyBytes}
	f.stream.Store(stream)
	in.mu.Lock()
	in.next++
	f.id = in.next
	f.prev = in.tail
	if in.tail != nil {
		in.tail.next = f
	} else {
		in.head = f
	}
	in.tail = f
	in.n++
	in.mu.Unlock()
	return f
}

func (in *Inflight) remove(f *flight) {
	in.mu.Lock()
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		in.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		in.tail = f.prev
	}
	f.prev, f.next = nil, nil
	in.n--
	in.mu.Unlock()
}

// Snapshot returns a copy of every row, oldest first. The caller owns it.
func (in *Inflight) Snapshot() []Request {
	in.mu.Lock()
	out := make([]Request, 0, in.n)
	for f := in.head; f != nil; f = f.next {
		r := Request{ID: f.id, Model: f.model, Group: f.group, Start: f.start,
			BodyBytes: f.bodyBytes, Stream: f.stream.Load(), OutBytes: f.outBytes.Load()}
		if d := f.firstByte.Load(); d > 0 {
			r.FirstByte = f.start.Add(time.Duration(d))
		}
		out = append(out, r)
	}
	in.mu.Unlock()
	return out
}

// Counts returns how many requests are proxied right now per model (the
// status page's "proxied" column); models with none are absent. The
// caller owns the map.
func (in *Inflight) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for f := in.head; f != nil; f = f.next {
		out[f.model]++
	}
	return out
}

// Count is how many requests for model are proxied to group right now.
func (in *Inflight) Count(model, group string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for f := in.head; f != nil; f = f.next {
		if f.model == model && f.group == group {
			n++
		}
	}
	return n
}

// Len is the number of requests in flight.
func (in *Inflight) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.n
}
