// Package freeport picks loopback ports for binaries that must be told their
// port before they start, as tests and benchmarks do.
//
// A port that was free at the check may still be taken before the binary
// binds it. The kernel's own port-0 pick makes that likely: it hands a
// just-closed port out again, and the same range serves the local ends of
// outgoing connections. So ports are drawn at random below the ephemeral
// range, and one process never hands the same port out twice.
package freeport

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// TCP returns a loopback TCP port that was free a moment ago.
func TCP() (int, error) {
	return pick(func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) })
}

// UDP returns a loopback UDP port that was free a moment ago.
func UDP() (int, error) {
	return pick(func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) })
}

func pick(bind func(addr string) (io.Closer, error)) (int, error) {
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 {
		lo, hi = 1024, 65536 // an unusual ephemeral range: take any port
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if handedOut.ports[p] {
			continue
		}
		c, err := bind(net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		c.Close()
		handedOut.ports[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free loopback port in [%d, %d) after 1000 tries", lo, hi)
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 32768
// when /proc does not say.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
