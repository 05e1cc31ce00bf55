package httpx

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// frames is a source that returns one frame per Read (as an engine's
// chunked event stream does), recording the size of every Read.
type frames struct {
	left  []string
	sizes []int
}

func (f *frames) Read(p []byte) (int, error) {
	f.sizes = append(f.sizes, len(p))
	if len(f.left) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.left[0])
	if f.left[0] = f.left[0][n:]; f.left[0] == "" {
		f.left = f.left[1:]
	}
	return n, nil
}

// journal records writes and flushes in order.
type journal struct{ ops []string }

func (j *journal) Write(p []byte) (int, error) {
	j.ops = append(j.ops, fmt.Sprintf("write %q", p))
	return len(p), nil
}

func (j *journal) flush() error { j.ops = append(j.ops, "flush"); return nil }

// TestRelayBufferSizes: an event stream is read EventBufSize at a time,
// a bulk answer CopyBufSize at a time, and each read is written and
// flushed before the next (no frame waits for another).
func TestRelayBufferSizes(t *testing.T) {
	big := strings.Repeat("x", EventBufSize+10)
	for _, c := range []struct {
		name  string
		relay func(io.Writer, func() error, io.Reader, func(), func(int)) (error, error)
		size  int
		ops   []string
	}{
		{"events", RelayEvents, EventBufSize, []string{`write "data: 1\n\n"`, "flush", `write "data: 2\n\n"`, "flush",
			fmt.Sprintf("write %q", big[:EventBufSize]), "flush", fmt.Sprintf("write %q", big[EventBufSize:]), "flush"}},
		{"bulk", Relay, CopyBufSize, []string{`write "data: 1\n\n"`, "flush", `write "data: 2\n\n"`, "flush",
			fmt.Sprintf("write %q", big), "flush"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &frames{left: []string{"data: 1\n\n", "data: 2\n\n", big}}
			var dst journal
			firsts, wrote := 0, 0
			rerr, werr := c.relay(&dst, dst.flush, src, func() { firsts++ }, func(n int) { wrote += n })
			if rerr != nil || werr != nil {
				t.Fatalf("relay: %v, %v", rerr, werr)
			}
			for i, n := range src.sizes {
				if n != c.size {
					t.Fatalf("read %d with a %d-byte buffer, want %d", i, n, c.size)
				}
			}
			if fmt.Sprint(dst.ops) != fmt.Sprint(c.ops) {
				t.Fatalf("writes and flushes:\n got %q\nwant %q", dst.ops, c.ops)
			}
			if want := 2*len("data: 1\n\n") + len(big); firsts != 1 || wrote != want {
				t.Fatalf("first ran %d times, wrote counted %d bytes; want 1 and %d", firsts, wrote, want)
			}
		})
	}
}

// blockingWriter blocks every Write until released, telling when one
// starts.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.entered <- struct{}{}
	<-w.release
	return w.Buffer.Write(p)
}

// TestRelayBackPressure: while the client's write is blocked, no further
// upstream read is made (and so nothing more is buffered): a slow client
// slows the upstream through TCP, whatever the answer's size.
func TestRelayBackPressure(t *testing.T) {
	for name, relay := range map[string]func(io.Writer, func() error, io.Reader, func(), func(int)) (error, error){
		"events": RelayEvents, "bulk": Relay,
	} {
		t.Run(name, func(t *testing.T) {
			src := &frames{left: []string{"a", "b", "c"}}
			w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				_, werr := relay(w, nil, src, nil, nil)
				done <- werr
			}()
			for i := 1; i <= 3; i++ {
				<-w.entered
				if len(src.sizes) != i {
					t.Fatalf("%d reads made while write %d is blocked, want %d", len(src.sizes), i, i)
				}
				w.release <- struct{}{}
			}
			if err := <-done; err != nil || w.String() != "abc" {
				t.Fatalf("relay: %v, wrote %q", err, w.String())
			}
		})
	}
}
