package httpx

import (
	"io"
	"sync"
)

// EventBufSize is the buffer an event stream is relayed through
// (RelayEvents). A stream spends nearly all its life blocked in a read,
// holding its buffer, and its frames are small (a token's JSON chunk is a
// few hundred bytes): a bulk-sized buffer there would be most of what an
// idle stream costs. A frame larger than this is written in pieces, each
// flushed as soon as it is read; nothing waits for the rest.
const EventBufSize = 512

var (
	copyBufs  = sync.Pool{New: func() any { b := make([]byte, CopyBufSize); return &b }}
	eventBufs = sync.Pool{New: func() any { b := make([]byte, EventBufSize); return &b }}
)

// Relay copies src to dst synchronously through one pooled buffer of
// CopyBufSize, for answers sent in bulk. A slow client blocks the write,
// which stops the upstream read, so the upstream's socket fills and TCP
// slows the upstream: memory per answer is this buffer plus kernel socket
// buffers, whatever the answer's size. With flush set (bodies of unknown
// length) every chunk is flushed as soon as it is written, so bytes reach
// the client when the upstream sends them. first (if set) runs once, when
// the first byte arrives (or at EOF of an empty body); wrote (if set) runs
// after each successful write.
//
// It reports the upstream read error (nil at EOF) apart from the client
// write error, because they mean different things: the upstream failed,
// or the client went away.
func Relay(dst io.Writer, flush func() error, src io.Reader, first func(), wrote func(int)) (readErr, writeErr error) {
	return relay(&copyBufs, dst, flush, src, first, wrote)
}

// RelayEvents is Relay for an event stream (text/event-stream): the same
// synchronous copy and back-pressure, flushed after every read, through a
// buffer of EventBufSize instead of CopyBufSize.
func RelayEvents(dst io.Writer, flush func() error, src io.Reader, first func(), wrote func(int)) (readErr, writeErr error) {
	return relay(&eventBufs, dst, flush, src, first, wrote)
}

func relay(pool *sync.Pool, dst io.Writer, flush func() error, src io.Reader, first func(), wrote func(int)) (readErr, writeErr error) {
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	seen := false
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !seen {
				seen = true
				if first != nil {
					first()
				}
			}
			m, werr := dst.Write(buf[:n])
			if m > 0 && wrote != nil {
				wrote(m)
			}
			if werr == nil && m < n {
				werr = io.ErrShortWrite
			}
			if werr == nil && flush != nil {
				werr = flush()
			}
			if werr != nil {
				return nil, werr
			}
		}
		if rerr == io.EOF {
			if !seen && first != nil {
				first()
			}
			return nil, nil
		}
		if rerr != nil {
			return rerr, nil
		}
	}
}
