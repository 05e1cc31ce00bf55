package stats

import "time"

// Inflight is the router's view of the requests it is carrying, supplied by
// the proxy. Both methods are called on every /stats.json request, from
// many goroutines at once, so they must be cheap and safe for concurrent
// use.
type Inflight interface {
	// Requests returns a copy of every request in flight now. The caller
	// owns the slice. A request must leave the list when it ends, including
	// when its client hangs up.
	Requests() []Request
	// Proxied is how many requests for model are in flight to group now.
	Proxied(model, group string) int
}

// Request is one in-flight request as the proxy sees it.
type Request struct {
	// ID is unique for the life of the process.
	ID    uint64
	Model string
	Group string
	// Started is when the router accepted the request.
	Started time.Time
	// BodyBytes is the size of the request body.
	BodyBytes int64
	Stream    bool
	// FirstByte is when the first byte of the upstream answer arrived; zero
	// until it does.
	FirstByte time.Time
	// OutBytes is how many bytes of the answer have been sent to the client.
	OutBytes int64
}
