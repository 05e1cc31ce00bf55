package testproc

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer that may be read while others write to it: a log
// sink for a server running in the test, or a child's output. The zero
// value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CountEvent counts the logx lines of one event (event=name) written so
// far.
func (b *Buffer) CountEvent(name string) int {
	return strings.Count(b.String(), "event="+name+" ")
}
