package h1client

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// BenchmarkCall: one small request and answer over loopback on a pooled
// connection, as the router sends a non-streamed completion.
func BenchmarkCall(b *testing.B) {
	const out = `{"id":"x","choices":[{"index":0}]}`
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(out)) + "\r\n\r\n" + out)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`)
	var head []byte
	var reqLen atomic.Int64 // set once the address is known
	// The server reads each request by its known size, without
	// allocating: the allocations reported are the client's.
	srv := testproc.NewConnServer(b, func(c net.Conn, br *bufio.Reader) {
		req := make([]byte, reqLen.Load())
		for {
			if _, err := io.ReadFull(br, req); err != nil {
				return
			}
			if _, err := c.Write(answer); err != nil {
				return
			}
		}
	})
	addr := srv.Addr()
	head = postHead(addr, "/v1/chat/completions", len(body))
	reqLen.Store(int64(len(head) + len(body)))
	c := New(Options{})
	b.Cleanup(c.CloseIdle)
	buf := make([]byte, 512)
	x := &Call{}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(x, addr, head, body); err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			k, err := x.Read(buf[n:])
			n += k
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		x.Close()
		if n != len(out) || x.Status != 200 {
			b.Fatalf("answer %d %q", x.Status, buf[:n])
		}
	}
	if n := srv.Conns(); n != 1 {
		b.Fatalf("used %d connections, want 1", n)
	}
}
