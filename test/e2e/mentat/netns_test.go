package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// testRange is the private range the namespace tests use. Its blackhole
// route is added before anything else, so that no packet of a cut link can
// follow the default route off the machine.
const testRange = "10.231.0.0/16"

// node is a network namespace standing for one machine, joined to the root
// namespace (where the router runs) by veth links.
type node struct {
	t    *testing.T
	ns   string
	tag  string // short per-process tag for interface names (15-byte limit)
	oct  int    // third octet of the first subnet: 100–198 (test/faults/mentat uses 213)
	link int    // links made so far
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNode makes the namespace, or skips the test when the kernel (or a
// missing privilege) refuses. Everything it makes is removed when the test
// ends, failed or not; processes started in it are stopped first, since
// their cleanups are registered later and run earlier.
func newNode(t *testing.T) *node {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespace test skipped: the ip command (iproute2) is not installed")
	}
	pid := os.Getpid()
	n := &node{t: t, ns: fmt.Sprintf("fd-mentat-%d", pid), tag: fmt.Sprintf("fm%d", pid%100000), oct: 100 + pid%33*3}

	// The blackhole first; remove it afterwards only if this test made it.
	owned := false
	if out, err := exec.Command("ip", "route", "show", "exact", testRange).Output(); err == nil && len(strings.TrimSpace(string(out))) == 0 {
		if err := ipCmd("route", "replace", "blackhole", testRange); err != nil {
			t.Skipf("network namespace test skipped: the kernel refused a blackhole route for %s (needs root and CAP_NET_ADMIN): %v", testRange, err)
		}
		owned = true
	}
	if err := ipCmd("netns", "add", n.ns); err != nil {
		if owned {
			_ = ipCmd("route", "del", "blackhole", testRange)
		}
		t.Skipf("network namespace test skipped: the kernel refused `ip netns add` (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		for i := range n.link {
			// Deleting the root side removes the pair.
			if err := ipCmd("link", "del", n.ifname(i, "r")); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := ipCmd("netns", "del", n.ns); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if owned {
			if err := ipCmd("route", "del", "blackhole", testRange); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	n.exec("ip", "link", "set", "lo", "up")
	return n
}

func (n *node) ifname(i int, side string) string { return fmt.Sprintf("%s%c%s", n.tag, 'a'+i, side) }

// exec runs a command inside the namespace and fails the test on error.
func (n *node) exec(args ...string) {
	n.t.Helper()
	if err := ipCmd(append([]string{"netns", "exec", n.ns}, args...)...); err != nil {
		n.t.Fatal(err)
	}
}

// addLink adds a veth pair: root side 10.231.X.1/24, namespace side
// 10.231.X.2/24. Since the router's on-link detection reads the host's
// interfaces, the root-side address puts the subnet on-link for it.
// It returns the namespace-side interface name and address.
func (n *node) addLink() (ifname, addr string) {
	n.t.Helper()
	i := n.link
	root, in := n.ifname(i, "r"), n.ifname(i, "n")
	subnet := fmt.Sprintf("10.231.%d", n.oct+i)
	if err := ipCmd("link", "add", root, "type", "veth", "peer", "name", in); err != nil {
		n.t.Fatal(err)
	}
	n.link++
	for _, args := range [][]string{
		{"link", "set", in, "netns", n.ns},
		{"addr", "add", subnet + ".1/24", "dev", root},
		{"link", "set", root, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			n.t.Fatal(err)
		}
	}
	n.exec("ip", "addr", "add", subnet+".2/24", "dev", in)
	n.exec("ip", "link", "set", in, "up")
	return in, subnet + ".2"
}

// addRouted adds a third link whose root side carries no address: the
// root namespace reaches the namespace-side address only through a gateway
// (via), so it is off-link for the router. (A veth rather than a dummy
// interface, which not every kernel has.)
func (n *node) addRouted(via string) (ifname, addr string) {
	n.t.Helper()
	i := n.link
	root, in := n.ifname(i, "r"), n.ifname(i, "n")
	subnet := fmt.Sprintf("10.231.%d", n.oct+i)
	if err := ipCmd("link", "add", root, "type", "veth", "peer", "name", in); err != nil {
		n.t.Fatal(err)
	}
	n.link++
	for _, args := range [][]string{{"link", "set", in, "netns", n.ns}, {"link", "set", root, "up"}} {
		if err := ipCmd(args...); err != nil {
			n.t.Fatal(err)
		}
	}
	n.exec("ip", "addr", "add", subnet+".2/24", "dev", in)
	n.exec("ip", "link", "set", in, "up")
	// The route goes away with the veth it points through.
	if err := ipCmd("route", "add", subnet+".0/24", "via", via); err != nil {
		n.t.Fatal(err)
	}
	return in, subnet + ".2"
}

// start runs a binary inside the namespace.
func (n *node) start(name string, env []string, argv ...string) *testproc.Proc {
	n.t.Helper()
	return start(n.t, name, env, append([]string{"ip", "netns", "exec", n.ns}, argv...)...)
}

// A node with two links and a routed address: the router ranks the
// candidates (on-link first, then the node's own ranking), serves from the
// first, falls through to the second when the first link is cut from the
// node's side, and takes the first back after PROBE_PROMOTE_S once the
// link returns.
//
// Twice: once with the node's daemon reading its interfaces only at start,
// so that the router's prober alone moves traffic (fall-through within one
// probe round, logged probe_switched); once with the daemon re-reading them
// every 0.3 s, so that the node also drops the cut address from its
// ranking and brings it back, as a real node does.
func TestNetnsCandidateRankingFallThroughAndPromotion(t *testing.T) {
	t.Run("prober alone", func(t *testing.T) { netnsFallThrough(t, "3600", true) })
	t.Run("node re-ranks too", func(t *testing.T) { netnsFallThrough(t, "0.3", false) })
}

func netnsFallThrough(t *testing.T, announceInterval string, proberAlone bool) {
	n := newNode(t)
	ifA, addrA := n.addLink()
	ifB, addrB := n.addLink()
	ifC, addrC := n.addRouted(fmt.Sprintf("10.231.%d.2", n.oct))

	// The node ranks the routed address first; the router must still put
	// the two on-link addresses ahead of it.
	n.start("daemon", baseEnv("MENTAT_HTTP_PORT=6380", "MENTAT_ANNOUNCE_IFACES="+ifC+","+ifA+","+ifB,
		"MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S="+announceInterval, "MENTAT_AGENT_TIMEOUT_S=6"),
		testproc.Bin(t, "mentatd"), "daemon")
	n.start("agent", baseEnv("MENTAT_DAEMON=127.0.0.1:6380", "MENTAT_GROUP=fab", "MENTAT_CONTAINER=fab",
		"MENTAT_OPENAI_API=8000/v1", "MENTAT_MODEL_PROVIDER=vllm", "MENTAT_BIND_CHECK_S=0.2"),
		testproc.Bin(t, "mentatd"), "agent", "--", testproc.Bin(t, "enginesim"), "--model", "fab-1", "--host", "0.0.0.0", "--port", "8000",
		"--ttft", "10ms", "--itl", "5ms")

	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+addrB+":6380", "ALLOWED_SOURCES=10.231.",
		"PROBE_INTERVAL_S=0.3", "PROBE_TIMEOUT_S=1", "PROBE_PROMOTE_S=2",
		// A dead candidate costs one PROBE_TIMEOUT_S a round; results
		// outlive a round with room for a loaded machine.
		"PROBE_FRESH_S=6")
	url := func(a string) string { return "http://" + a + ":8000/v1" }
	r.waitModels(t, "fab-1")
	g := r.status(t).Groups["fab"]
	if want := []string{url(addrA), url(addrB), url(addrC)}; !slices.Equal(g.OpenAICandidates, want) {
		t.Fatalf("fab: candidates %v; want %v", g.OpenAICandidates, want)
	}
	// A first probe round that began before the engine listened may end
	// on the last candidate (CI saw C taken: A and B refused, C answered
	// a moment later); promotion brings A back within PROBE_PROMOTE_S.
	r.waitGroup(t, "fab", "serving from link A", func(g groupStatus) bool { return g.Healthy && g.openai() == url(addrA) })
	r.chatOK(t, "fab-1")

	// Cut link A from the node's side; the root side keeps its route, so
	// the router's packets die on the veth rather than leave the machine.
	n.exec("ip", "link", "set", ifA, "down")
	cut := time.Now()
	watch := watchRoutable(t, r, "fab-1")
	r.waitGroup(t, "fab", "serving from link B", func(g groupStatus) bool { return g.Healthy && g.openai() == url(addrB) })
	if gaps := watch(); gaps != "" {
		t.Fatalf("fab-1 left the route table while falling through: %s", gaps)
	}
	t.Logf("fell through to %s %v after the cut", url(addrB), time.Since(cut).Round(time.Millisecond))
	if proberAlone {
		r.WaitOutput(t, deadline, `probe_switched .*from=`+url(addrA)+` to=`+url(addrB))
	}
	r.chatOK(t, "fab-1")
	if got := r.models(t); !slices.Equal(got, []string{"fab-1"}) {
		t.Fatalf("/v1/models = %v while serving from link B", got)
	}

	n.exec("ip", "link", "set", ifA, "up")
	back := time.Now()
	r.waitGroup(t, "fab", "promoted back to link A", func(g groupStatus) bool { return g.Healthy && g.openai() == url(addrA) })
	t.Logf("promoted back to %s %v after the link returned (PROBE_PROMOTE_S=2)", url(addrA), time.Since(back).Round(time.Millisecond))
	r.WaitOutput(t, deadline, `probe_switched .*from=`+url(addrB)+` to=`+url(addrA))
	r.chatOK(t, "fab-1")
}

// watchRoutable samples /v1/models every 20 ms until the returned stop is
// called (or the test ends) and reports every sample that did not list
// model.
func watchRoutable(t *testing.T, r *router, model string) (stop func() string) {
	done, result := make(chan struct{}), make(chan string, 1)
	var once sync.Once
	var gaps string
	stop = func() string {
		once.Do(func() { close(done); gaps = <-result })
		return gaps
	}
	t.Cleanup(func() { stop() })
	go func() {
		var gaps []string
		for {
			var list struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			err := testproc.GetJSON(client, r.url+"/v1/models", &list)
			found := slices.ContainsFunc(list.Data, func(m struct {
				ID string `json:"id"`
			}) bool {
				return m.ID == model
			})
			if err != nil || !found {
				gaps = append(gaps, fmt.Sprintf("%s: %v %v", time.Now().Format("15:04:05.000"), err, list.Data))
			}
			select {
			case <-done:
				result <- strings.Join(gaps, "; ")
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return stop
}
