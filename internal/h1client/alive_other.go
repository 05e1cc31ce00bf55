//go:build !linux

package h1client

import "net"

// connAlive cannot peek without blocking here; a connection the server
// closed while idle then fails its request (it is never re-sent).
func connAlive(net.Conn) bool { return true }

type peeker struct{}

func (pc *conn) alive() bool { return true }
