package httpx

import (
	"io"
	"sync"
)

var copyBufs = sync.Pool{New: func() any { b := make([]byte, CopyBufSize); return &b }}

// Relay copies src to dst synchronously through one pooled buffer. A slow
// client blocks the write, which stops the upstream read, so the
// upstream's socket fills and TCP slows the upstream: memory per stream
// is this buffer plus kernel socket buffers, whatever the answer's size.
// With flush set (event streams and bodies of unknown length) every chunk
// is flushed as soon as it is written, so a frame reaches the client when
// the upstream sends it. first (if set) runs once, when the first byte
// arrives (or at EOF of an empty body); wrote (if set) runs after each
// successful write.
//
// It reports the upstream read error (nil at EOF) apart from the client
// write error, because they mean different things: the upstream failed,
// or the client went away.
func Relay(dst io.Writer, flush func() error, src io.Reader, first func(), wrote func(int)) (readErr, writeErr error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
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
