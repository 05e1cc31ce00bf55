package config

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Listen opens a TCP listener on addr; when the port is taken, the error
// says so and what to do: find the other process, or move this one with
// move (e.g. "set api_port in [supervisor] of conf/mortred.toml").
func Listen(addr, move string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		_, port, _ := net.SplitHostPort(addr)
		return nil, fmt.Errorf("listen on %s: the port is already in use by another process (`ss -ltnp 'sport = :%s'` shows which): stop it, or %s", addr, port, move)
	}
	return nil, fmt.Errorf("listen on %s: %w (%s)", addr, err, move)
}
