// Package testnet gives a test machines of its own: network namespaces on
// one private LAN, which the root namespace (where the test, and for
// example Nginx, run) reaches too, and whose links the test can cut.
//
// The LAN is a bridge inside a namespace of its own, so the root
// namespace's firewall (a host's Docker or br_netfilter rules) never sees
// the bridged traffic. Every address is in testRange, whose blackhole
// route is added first: a packet for a cut host dies here instead of
// following the default route off the machine. Links are cut from the
// host's side, so the root side's route stays. Everything is removed when
// the test ends, failed or not.
//
// Benchmarks and the soak use it too, through T: testing.TB satisfies
// it, and outside a test Adapter runs the cleanups itself and turns Fatal
// and Skip into errors.
package testnet

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// T is what the package needs of a test: testing.TB has every method.
// Fatal, Skip and Skipf must not return (a test's stop its goroutine; an
// adapter may panic and recover); Errorf reports a failed cleanup step and
// returns; Cleanup registers a function to run, last registered first,
// when the user is done with the LAN.
type T interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
	Skipf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// testRange holds every address this package (and the other namespace
// tests) use.
const testRange = "10.231.0.0/16"

// LAN is one /24 of testRange: the root namespace at .1, hosts from .2.
type LAN struct {
	t      T
	tag    string // short, per process: interface names have 15 bytes
	subnet string // 10.231.N
	sw     string // the switch namespace, holding the bridge
	hosts  int
}

// Host is a namespace on the LAN, standing for one machine.
type Host struct {
	lan  *LAN
	NS   string // namespace name
	Addr string // its address on the LAN
	ifc  string // its LAN interface, inside NS
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewLAN makes the LAN on 10.231.octet.0/24. octet must differ from those
// of other packages' namespace tests that may run at the same time
// (test/e2e/mentat uses 100–198, test/faults/mentat 213, test/e2e/mortred
// 220–249, bench/mortredhosts 250–254, bench/soak 212). The test is skipped when the
// kernel or a missing privilege refuses namespaces.
func NewLAN(t T, octet int) *LAN {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespace test skipped: the ip command (iproute2) is not installed")
	}
	pid := os.Getpid()
	l := &LAN{t: t, tag: fmt.Sprintf("tn%d", pid%100000), subnet: fmt.Sprintf("10.231.%d", octet)}
	l.sw = "fd-lan-" + l.tag

	// The blackhole first; removed afterwards only if this test made it.
	owned := false
	if out, err := exec.Command("ip", "route", "show", "exact", testRange).Output(); err == nil && len(strings.TrimSpace(string(out))) == 0 {
		if err := ip("route", "replace", "blackhole", testRange); err != nil {
			t.Skipf("network namespace test skipped: the kernel refused a blackhole route for %s (needs root and CAP_NET_ADMIN): %v", testRange, err)
		}
		owned = true
	}
	if err := ip("netns", "add", l.sw); err != nil {
		if owned {
			_ = ip("route", "del", "blackhole", testRange)
		}
		t.Skipf("network namespace test skipped: the kernel refused `ip netns add` (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		// Deleting a namespace removes the veth ends in it, and with
		// them their peers; the root side goes with the switch's end.
		for i := range l.hosts {
			if err := ip("netns", "del", l.hostNS(i)); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := ip("netns", "del", l.sw); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := ip("link", "del", l.tag+"r"); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			t.Errorf("cleanup: %v", err)
		}
		if owned {
			if err := ip("route", "del", "blackhole", testRange); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	l.must(l.in(l.sw, "ip", "link", "add", "br0", "type", "bridge"))
	l.must(l.in(l.sw, "ip", "link", "set", "br0", "up"))
	l.must(l.in(l.sw, "ip", "link", "set", "lo", "up"))
	// The root namespace's port on the switch.
	l.plug(l.tag+"r", "")
	l.must(ip("addr", "add", l.subnet+".1/24", "dev", l.tag+"r"))
	l.must(ip("link", "set", l.tag+"r", "up"))
	return l
}

func (l *LAN) must(err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatal(err)
	}
}

// in runs argv inside namespace ns.
func (l *LAN) in(ns string, argv ...string) error {
	return ip(append([]string{"netns", "exec", ns}, argv...)...)
}

func (l *LAN) hostNS(i int) string { return fmt.Sprintf("fd-host-%s-%d", l.tag, i) }

// plug makes a veth pair whose switch end joins the bridge and whose other
// end, name, is moved into namespace ns ("" leaves it in the root one).
func (l *LAN) plug(name, ns string) {
	l.t.Helper()
	sw := name + "s"
	l.must(ip("link", "add", name, "type", "veth", "peer", "name", sw))
	l.must(ip("link", "set", sw, "netns", l.sw))
	l.must(l.in(l.sw, "ip", "link", "set", sw, "master", "br0"))
	l.must(l.in(l.sw, "ip", "link", "set", sw, "up"))
	if ns != "" {
		l.must(ip("link", "set", name, "netns", ns))
	}
}

// AddHost adds a namespace at the LAN's next address.
func (l *LAN) AddHost() *Host {
	l.t.Helper()
	i := l.hosts
	h := &Host{lan: l, NS: l.hostNS(i), Addr: fmt.Sprintf("%s.%d", l.subnet, i+2), ifc: fmt.Sprintf("%sh%d", l.tag, i)}
	l.must(ip("netns", "add", h.NS))
	l.hosts++
	l.must(l.in(h.NS, "ip", "link", "set", "lo", "up"))
	l.plug(h.ifc, h.NS)
	l.must(l.in(h.NS, "ip", "addr", "add", h.Addr+"/24", "dev", h.ifc))
	l.must(l.in(h.NS, "ip", "link", "set", h.ifc, "up"))
	return h
}

// Command is argv run inside the host's namespace (ip netns exec execs
// it, so the process started is the program itself).
func (h *Host) Command(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", h.NS}, argv...)
}

// Cut takes the host's LAN link down from its side: its packets stop both
// ways, its connections hang as behind a pulled cable.
func (h *Host) Cut() {
	h.lan.t.Helper()
	h.lan.must(h.lan.in(h.NS, "ip", "link", "set", h.ifc, "down"))
}

// Restore brings the link back.
func (h *Host) Restore() {
	h.lan.t.Helper()
	h.lan.must(h.lan.in(h.NS, "ip", "link", "set", h.ifc, "up"))
}
