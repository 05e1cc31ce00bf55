package h1client

import (
	"net"
	"syscall"
	"unsafe"
)

// connAlive reports whether an idle pooled connection can carry another
// request: the server has neither closed it nor sent anything unasked.
// One non-blocking peek, no waiting, no deadline changes.
func connAlive(c net.Conn) bool {
	var p peeker
	if !p.init(c) {
		return true
	}
	return p.alive()
}

// peeker does connAlive's peek for one connection, set up once so that
// a check allocates nothing.
type peeker struct {
	rc  syscall.RawConn
	ctl func(fd uintptr)
	ok  bool
	buf [1]byte
}

// init prepares p for c; false when c has no file descriptor to peek at.
func (p *peeker) init(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	p.rc = rc
	p.ctl = func(fd uintptr) {
		_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		// EAGAIN: nothing to read, the connection is open and quiet. A
		// byte or EOF (0) or any other error means it is not reusable.
		p.ok = errno == syscall.EAGAIN
	}
	return true
}

// alive peeks without waiting, so Control (no read lock, no poller
// state) is enough: nothing else reads an idle connection.
func (p *peeker) alive() bool {
	p.ok = false
	return p.rc.Control(p.ctl) == nil && p.ok
}

// alive is connAlive for a pooled connection.
func (pc *conn) alive() bool {
	if pc.peek == nil {
		pc.peek = &peeker{}
		if !pc.peek.init(pc.nc) {
			return true
		}
	}
	if pc.peek.rc == nil {
		return true
	}
	return pc.peek.alive()
}
