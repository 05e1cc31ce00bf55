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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		// EAGAIN: nothing to read, the connection is open and quiet. A
		// byte or EOF (0) or any other error means it is not reusable.
		alive = errno == syscall.EAGAIN
		return true
	})
	return err == nil && alive
}
