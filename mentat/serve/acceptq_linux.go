package serve

import (
	"net"

	"golang.org/x/sys/unix"
)

// acceptQueue is how many connections the kernel has queued on ln that
// Accept has not taken yet: TCP_INFO of a listening socket reports its
// accept queue's length in tcpi_unacked.
func acceptQueue(ln net.Listener) (n int, ok bool) {
	tl, isTCP := ln.(*net.TCPListener)
	if !isTCP {
		return 0, false
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return 0, false
	}
	cerr := rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = int(info.Unacked)
		}
	})
	return n, cerr == nil && err == nil
}
