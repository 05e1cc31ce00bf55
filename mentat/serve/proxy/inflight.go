package proxy

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Inflight is the registry of requests the router is carrying right now,
// for the status page. A row is added once a request has been routed and
// removed when its handler returns, whatever the outcome (including a
// client that hung up). Safe for concurrent use.
type Inflight struct {
	mu       sync.Mutex
	next     uint64
	rows     map[uint64]*flight
	perModel map[string]int
}

// flight is one live row; the hot counters are atomics so the copy loop
// never takes the registry lock.
type flight struct {
	id        uint64
	model     string
	group     string
	start     time.Time
	bodyBytes int64
	stream    atomic.Bool
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

func newInflight() *Inflight {
	return &Inflight{rows: map[uint64]*flight{}, perModel: map[string]int{}}
}

func (in *Inflight) add(model, group string, bodyBytes int64, stream bool, start time.Time) *flight {
	f := &flight{model: model, group: group, start: start, bodyBytes: bodyBytes}
	f.stream.Store(stream)
	in.mu.Lock()
	in.next++
	f.id = in.next
	in.rows[f.id] = f
	in.perModel[model]++
	in.mu.Unlock()
	return f
}

func (in *Inflight) remove(f *flight) {
	in.mu.Lock()
	delete(in.rows, f.id)
	if in.perModel[f.model]--; in.perModel[f.model] <= 0 {
		delete(in.perModel, f.model)
	}
	in.mu.Unlock()
}

// Snapshot returns a copy of every row, oldest first. The caller owns it.
func (in *Inflight) Snapshot() []Request {
	in.mu.Lock()
	out := make([]Request, 0, len(in.rows))
	for _, f := range in.rows {
		r := Request{ID: f.id, Model: f.model, Group: f.group, Start: f.start,
			BodyBytes: f.bodyBytes, Stream: f.stream.Load(), OutBytes: f.outBytes.Load()}
		if d := f.firstByte.Load(); d > 0 {
			r.FirstByte = f.start.Add(time.Duration(d))
		}
		out = append(out, r)
	}
	in.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Counts returns how many requests are proxied right now per model (the
// status page's "proxied" column); models with none are absent. The
// caller owns the map.
func (in *Inflight) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int, len(in.perModel))
	for m, n := range in.perModel {
		out[m] = n
	}
	return out
}

// Len is the number of requests in flight.
func (in *Inflight) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.rows)
}
