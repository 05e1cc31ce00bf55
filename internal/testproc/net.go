package testproc

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago, for a
// binary that must be told its port. Another process may still take it
// before the binary binds; see pickPort for how that window is kept small.
func FreePort(t testing.TB) int {
	t.Helper()
	return pickPort(t, func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) })
}

// FreeUDPPort returns a loopback UDP port that was free a moment ago.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	return pickPort(t, func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) })
}

// handedOut holds every port this test binary has returned: the kernel's
// port-0 pick hands a just-closed port out again, and two servers of one
// test were once told the same port that way.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// pickPort draws ports at random below the kernel's ephemeral range, so that
// neither another package's port-0 pick nor the local end of some outgoing
// connection can land on a port between its check here and the binary's bind.
// Ports are never handed out twice by one test binary.
func pickPort(t testing.TB, bind func(addr string) (io.Closer, error)) int {
	t.Helper()
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
		return p
	}
	t.Fatalf("no free loopback port in [%d, %d) after 1000 tries", lo, hi)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// SendUDP sends one datagram b to the address to.
func SendUDP(t testing.TB, to net.Addr, b []byte) {
	t.Helper()
	c, err := net.Dial("udp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// GetJSON GETs url with c and decodes a 200 answer's JSON body into v; any
// other status is an error that quotes the body.
func GetJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}
