package httpx

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
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
// until the last of Release and the Close of every Reader it handed out.
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
// pool once every Reader is closed too.
func (b *Body) Release() { b.unref() }

func (b *Body) unref() {
	if b.refs.Add(-1) == 0 && b.buf != nil {
		putBuf(b.buf)
		b.buf = nil
	}
}

// Reader returns a reader over the body that holds the buffer until it is
// closed: the upstream request's Body (and GetBody's). Readers write
// straight from the buffer (WriteTo), no copy in between.
func (b *Body) Reader() io.ReadCloser {
	b.refs.Add(1)
	r := &bodyReader{body: b}
	r.Reset(b.Bytes())
	return r
}

type bodyReader struct {
	bytes.Reader
	body   *Body
	closed atomic.Bool
}

func (r *bodyReader) Close() error {
	if r.closed.CompareAndSwap(false, true) {
		r.body.unref()
	}
	return nil
}
