//go:build !linux

package proxy

import "net"

// connAlive cannot peek without blocking here; a connection the engine
// closed while idle then fails its request with a 502 (never re-sent).
func connAlive(net.Conn) bool { return true }
