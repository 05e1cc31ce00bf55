package h1server

import (
	"io"
	"net"
	"sync"
)

// handoffListener is the fallback server's listener: it yields the
// connections the fast path hands over.
type handoffListener struct {
	addr   net.Addr
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

// deliver passes c to the fallback; false when it no longer accepts (c
// is then closed).
func (l *handoffListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		c.Close()
		return true
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// replayConn is a handed-over connection: the bytes the fast path had
// read but not used come first.
type replayConn struct {
	net.Conn
	pending []byte
	src     io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.src.Read(p)
}

// CloseWrite lets net/http half-close the connection as it does a plain
// TCP connection's after an error answer.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
