package server

import (
	"io"
	"sync"
)

// Request bodies are read into pooled buffers: a body is parsed and dropped
// within its request, and io.ReadAll would grow a fresh buffer from 512
// bytes, copying a multi-kilobyte image body several times.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept: one huge request must not pin its
// memory in the pool. A photograph of a few megapixels is a body of one to a
// few megabytes of base64, so the bound is well above that.
const maxPooledBody = 8 << 20

// getBody returns a pooled buffer with room for a declared Content-Length
// (plus one byte, to see EOF without growing). The caller has checked the
// length against request_size_limit; a buffer grown from nothing would copy
// a megabyte body some dozen times on its way up.
func getBody(contentLength int64) *[]byte {
	b := bodyPool.Get().(*[]byte)
	if contentLength >= 0 && int64(cap(*b)) < contentLength+1 {
		*b = make([]byte, 0, contentLength+1)
	}
	return b
}

func putBody(b *[]byte) {
	if cap(*b) > maxPooledBody {
		return
	}
	*b = (*b)[:0]
	bodyPool.Put(b)
}

// readBody reads r to EOF into buf, growing it when needed, and returns the
// bytes read (which alias *buf until putBody).
func readBody(r io.Reader, buf *[]byte) ([]byte, error) {
	b := (*buf)[:0]
	if cap(b) == 0 {
		b = make([]byte, 0, 512)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			*buf = b
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
	}
}
