package testproc

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/freeport"
)

// FreePort returns a loopback TCP port that was free a moment ago, for a
// binary that must be told its port (see package freeport for how the
// window before the binary binds it is kept small).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.TCP()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeUDPPort returns a loopback UDP port that was free a moment ago.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	p, err := freeport.UDP()
	if err != nil {
		t.Fatal(err)
	}
	return p
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
