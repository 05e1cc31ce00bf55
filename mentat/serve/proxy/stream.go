package proxy

import (
	"io"
	"sync"
)

// copyBufSize is the one buffer a response streams through. A slow client
// blocks the write, which stops the upstream read, so the engine's socket
// fills and TCP slows the engine: memory per stream is this buffer plus
// kernel socket buffers, whatever the answer's size.
const copyBufSize = 32 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// relay copies src to dst synchronously through one pooled buffer. With
// flush set (event streams and bodies of unknown length) every chunk is
// flushed as soon as it is written, so a frame reaches the client when the
// engine sends it. first runs once, when the first byte arrives (or at
// EOF of an empty body); wrote runs after each successful write.
//
// It reports the upstream read error (nil at EOF) apart from the client
// write error, because they mean different things: the engine failed, or
// the client went away.
func relay(dst io.Writer, flush func() error, src io.Reader, first func(), wrote func(int)) (readErr, writeErr error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	seen := false
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !seen {
				seen = true
				first()
			}
			m, werr := dst.Write(buf[:n])
			if m > 0 {
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
			if !seen {
				first()
			}
			return nil, nil
		}
		if rerr != nil {
			return rerr, nil
		}
	}
}
