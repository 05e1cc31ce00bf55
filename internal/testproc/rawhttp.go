package testproc

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// ConnServer hands each accepted connection to handle, on its own
// goroutine, so a test controls every byte on the socket. It listens on
// 127.0.0.1 and stops (closing every connection) when the test ends.
type ConnServer struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]bool
}

// NewConnServer starts a ConnServer; the connection is closed when handle
// returns.
func NewConnServer(t testing.TB, handle func(c net.Conn, br *bufio.Reader)) *ConnServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &ConnServer{ln: ln, open: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// Addr is the server's host:port.
func (s *ConnServer) Addr() string { return s.ln.Addr().String() }

// Conns is how many connections the server has accepted.
func (s *ConnServer) Conns() int64 { return s.conns.Load() }

// RawServer is an HTTP/1.1 server written against the socket, so a test
// controls every byte of the framing: answer writes one response for each
// request read and reports whether the connection stays open.
type RawServer struct{ *ConnServer }

// NewRawServer starts a RawServer.
func NewRawServer(t testing.TB, answer func(w *bufio.Writer, r *http.Request, body string) bool) *RawServer {
	t.Helper()
	return &RawServer{NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		bw := bufio.NewWriter(c)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(r.Body)
			keep := answer(bw, r, string(b))
			if bw.Flush() != nil || !keep {
				return
			}
		}
	})}
}
