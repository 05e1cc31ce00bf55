package httpx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/bits"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// Request bodies are read into buffers of power-of-two size classes from
// minClass up, each class pooled: after warm-up a body costs no
// allocation and no growth, whatever its size.
const (
	minClassShift = 12 // 4 KiB
	numClasses    = 20 // up to 2 GiB, above any limit in use
	// precommit is how much is allocated on a declared length alone. A
	// Content-Length is a promise, not bytes: a client must not make the
	// proxy hold 128 MiB by sending a header. Past this, the buffer is
	// sized to the declared length once (one copy of at most precommit
	// bytes) when the body's bytes really arrive.
	precommit = 1 << 20
	// chunkedStart is the first buffer for a body of unknown length; it
	// doubles as bytes arrive, up to the limit.
	chunkedStart = 64 << 10
)

var classes [numClasses]sync.Pool

// class is the size class holding n bytes.
func class(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

func getBuf(n int) *[]byte {
	c := class(n)
	if bp, ok := classes[c].Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 1<<(c+minClassShift))
	return &b
}

func putBuf(bp *[]byte) {
	c := class(cap(*bp))
	if c < numClasses && cap(*bp) == 1<<(c+minClassShift) {
		*bp = (*bp)[:cap(*bp)]
		classes[c].Put(bp)
	}
}

// ErrTooLarge is returned by ReadBody for a body over its limit.
var ErrTooLarge = errors.New("request body over the limit")

// Body is a request body read into a pooled buffer. Its bytes are valid
// until Release, or, once attached to an upstream request, until that
// request is written (Attach).
type Body struct {
	buf  *[]byte
	n    int
	refs atomic.Int32
}

// ReadBody reads r to its end into a pooled buffer: declared is the
// request's Content-Length (-1 unknown), limit the largest body accepted
// (over it: ErrTooLarge, also for a declared length, before reading).
// A read error is returned as it is.
func ReadBody(r io.Reader, declared, limit int64) (*Body, error) {
	if declared > limit {
		return nil, ErrTooLarge
	}
	b := &Body{}
	b.refs.Store(1)
	if declared == 0 || r == nil {
		return b, nil
	}
	size := chunkedStart
	if declared > 0 {
		size = int(min(declared, precommit))
	}
	b.buf = getBuf(size)
	want := limit
	if declared > 0 {
		want = declared
	}
	for {
		// Never read past want: the buffer may be larger.
		buf := (*b.buf)[:min(int64(len(*b.buf)), want)]
		m, err := io.ReadFull(r, buf[b.n:])
		b.n += m
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			if declared > 0 && int64(b.n) < declared {
				b.Release()
				return nil, io.ErrUnexpectedEOF
			}
			return b, nil
		case err != nil:
			b.Release()
			return nil, err
		}
		if int64(b.n) == want {
			if declared > 0 {
				return b, nil
			}
			// An undeclared length at the limit: one byte more is too
			// large, the end of the body is not.
			var one [1]byte
			k, err := io.ReadFull(r, one[:])
			switch {
			case k > 0:
				err = ErrTooLarge
			case err == io.EOF:
				return b, nil
			}
			b.Release()
			return nil, err
		}
		// The buffer is full and more is expected: grow once to the
		// declared length, or double (up to the limit) for an undeclared one.
		next := min(2*int64(len(*b.buf)), want)
		if declared > 0 {
			next = declared
		}
		nb := getBuf(int(next))
		copy(*nb, (*b.buf)[:b.n])
		putBuf(b.buf)
		b.buf = nb
	}
}

// Bytes is the body; it must not be modified.
func (b *Body) Bytes() []byte {
	if b.buf == nil {
		return nil
	}
	return (*b.buf)[:b.n]
}

// Len is the body's length.
func (b *Body) Len() int { return b.n }

// Release gives up the reader's own reference; the buffer returns to its
// pool once no upstream write is using it (Attach).
func (b *Body) Release() { b.unref() }

func (b *Body) unref() {
	if b.refs.Add(-1) == 0 && b.buf != nil {
		putBuf(b.buf)
		b.buf = nil
	}
}

// Attach makes b the body of req, an upstream request that has its
// context, and returns the request to send (req with a trace context):
// AttachContext with req's own context.
func (b *Body) Attach(req *http.Request) *http.Request {
	if b.n == 0 {
		req.Body, req.ContentLength, req.GetBody = http.NoBody, 0, nil
		return req
	}
	return b.AttachContext(req.Context(), req)
}

// AttachContext makes b the body of req and returns a copy of req with
// ctx (plus a trace) as its context: the one copy of the request. req
// itself may be a value the caller builds on its stack.
//
// The Transport reads the body as a *bytes.Reader, which it knows to be in
// memory: a small body goes out in one write with the head, a large one
// straight from the buffer (bodyConn). GetBody gives the same bytes again
// for a resend of a request never written. The buffer returns to its pool
// only when Release was called and every attempt the Transport started on
// a connection has finished writing (httptrace GotConn and WroteRequest):
// a write may still run after RoundTrip returned (an upstream answering
// before the whole body was written). An attempt that never ends leaves
// the buffer to the garbage collector, never to another request.
func (b *Body) AttachContext(ctx context.Context, req *http.Request) *http.Request {
	if b.n == 0 {
		req.Body, req.ContentLength, req.GetBody = http.NoBody, 0, nil
		return req.WithContext(ctx)
	}
	data := b.Bytes()
	req.ContentLength = int64(len(data))
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	trace := &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { b.refs.Add(1) },
		WroteRequest: func(httptrace.WroteRequestInfo) { b.unref() },
	}
	return req.WithContext(httptrace.WithClientTrace(ctx, trace))
}
