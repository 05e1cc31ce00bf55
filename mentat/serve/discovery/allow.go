package discovery

import (
	"net"
	"net/netip"
	"strings"
)

// Allow is ALLOWED_SOURCES: textual address prefixes ("10.100.0.",
// "127.0.0.1", "::1"). An address passes when its canonical text starts
// with one of them. The zero value allows nothing.
type Allow struct{ prefixes []string }

// NewAllow builds the list; empty items are ignored.
func NewAllow(prefixes []string) Allow {
	var a Allow
	for _, p := range prefixes {
		if p = strings.TrimSpace(p); p != "" {
			a.prefixes = append(a.prefixes, strings.ToLower(p))
		}
	}
	return a
}

// String lists the prefixes in force, comma-joined, for log lines.
func (a Allow) String() string { return strings.Join(a.prefixes, ",") }

// Addr reports whether ip passes. IPv4-mapped IPv6 addresses are read as
// IPv4 so a dual-stack socket's "::ffff:10.0.0.1" matches "10.0.0.".
func (a Allow) Addr(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	return a.text(ip.Unmap().WithZone("").String())
}

// Host reports whether a host string passes: an IP literal is canonicalised
// first; anything else (a name) is matched as written.
func (a Allow) Host(host string) bool {
	host = strings.Trim(host, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return a.Addr(ip)
	}
	return a.text(strings.ToLower(host))
}

func (a Allow) text(s string) bool {
	for _, p := range a.prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// SubnetsFunc returns the subnets the router is attached to. Tests inject
// their own so on-link ordering can be exercised on loopback.
type SubnetsFunc func() []*net.IPNet

// LocalSubnets reads the subnets of this host's interfaces. An error reads
// as "no subnets": every address then counts as off-link, which only costs
// ordering, never correctness.
func LocalSubnets() []*net.IPNet {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n)
		}
	}
	return out
}

// OnLink reports whether host (an IP literal) is inside one of subnets.
// Names are never on-link: the router does not resolve them for ordering.
func OnLink(host string, subnets []*net.IPNet) bool {
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		return false
	}
	for _, n := range subnets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}
