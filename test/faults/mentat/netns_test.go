package mentat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// The dropped-link test's addresses. Only this test uses 10.231.213.0/24;
// the whole range is blackholed first, so no packet for it can ever follow
// the default route off the machine, whatever state the links are in.
const (
	nsRange   = "10.231.213.0/24"
	fabRoot   = "10.231.213.1"
	fabNode   = "10.231.213.2"
	lanRoot   = "10.231.213.5"
	lanNode   = "10.231.213.6"
	nsPrefix  = "f13n" // namespaces: f13n<pid>
	vethRoot  = "f13r" // root-side veths: f13ra<pid>, f13rb<pid>
	vethNode  = "f13p" // their peers before the move: f13pa<pid>, f13pb<pid>
	allowedNS = "10.231.213.,127.0.0.1"
)

// ipCmd runs `ip args...`.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeStale deletes namespaces and veths an earlier run of this test
// left behind when it was killed before its cleanup ran.
func removeStale() {
	alive := func(name, prefix string) bool {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
		if err != nil {
			return true // not ours
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err == nil
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) && !alive(f[0], nsPrefix) {
				_ = ipCmd("netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			for _, p := range []string{vethRoot + "a", vethRoot + "b"} {
				if strings.HasPrefix(name, p) && !alive(name, p) {
					_ = ipCmd("link", "del", name)
				}
			}
		}
	}
}

// node is a network namespace joined to the root namespace by two links:
// fab0 (fabRoot ↔ fabNode, ranked first) and lan0 (lanRoot ↔ lanNode).
type node struct {
	ns string
}

// makeNode builds the namespace and its links. Everything it creates is
// removed when the test ends, failed or not. It skips the test when the
// machine refuses `ip netns add`.
func makeNode(t *testing.T) *node {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("dropped-link test needs iproute2's ip command: " + err.Error())
	}
	removeStale()
	pid := strconv.Itoa(os.Getpid())
	n := &node{ns: nsPrefix + pid}
	// Blackhole first, removed last.
	if err := ipCmd("route", "replace", "blackhole", nsRange); err != nil {
		t.Skipf("dropped-link test needs to manage routes (root or CAP_NET_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := ipCmd("route", "del", "blackhole", nsRange); err != nil {
			t.Errorf("removing the blackhole route: %v", err)
		}
	})
	if err := ipCmd("netns", "add", n.ns); err != nil {
		t.Skipf("dropped-link test needs network namespaces, and `ip netns add` was refused: %v", err)
	}
	t.Cleanup(func() {
		// Deleting the namespace destroys its veth ends, and with them
		// their root-side peers; delete those too in case a move failed.
		if err := ipCmd("netns", "del", n.ns); err != nil {
			t.Errorf("removing namespace %s: %v", n.ns, err)
		}
		for _, l := range []string{vethRoot + "a" + pid, vethRoot + "b" + pid, vethNode + "a" + pid, vethNode + "b" + pid} {
			if exec.Command("ip", "link", "show", l).Run() == nil {
				_ = ipCmd("link", "del", l)
			}
		}
	})
	must := func(args ...string) {
		t.Helper()
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", n.ns, "link", "set", "lo", "up")
	for _, l := range []struct{ suffix, name, root, node string }{{"a", "fab0", fabRoot, fabNode}, {"b", "lan0", lanRoot, lanNode}} {
		root, peer := vethRoot+l.suffix+pid, vethNode+l.suffix+pid
		must("link", "add", root, "type", "veth", "peer", "name", peer)
		must("link", "set", peer, "netns", n.ns)
		must("-n", n.ns, "link", "set", peer, "name", l.name)
		must("addr", "add", l.root+"/30", "dev", root)
		must("-n", n.ns, "addr", "add", l.node+"/30", "dev", l.name)
		must("link", "set", root, "up")
		must("-n", n.ns, "link", "set", l.name, "up")
	}
	return n
}

// start runs argv inside the namespace.
func (n *node) start(t *testing.T, name string, env []string, argv ...string) *testproc.Proc {
	return start(t, name, env, append([]string{"ip", "netns", "exec", n.ns}, argv...)...)
}

// link sets a node-side interface up or down: the cut is made from the
// namespace's side, so the root side and its routes stay as they are.
func (n *node) link(t *testing.T, ifname, state string) {
	t.Helper()
	if err := ipCmd("-n", n.ns, "link", "set", ifname, state); err != nil {
		t.Fatal(err)
	}
}

// inUse reads the group's endpoint in use from /status.json.
func inUse(r *router, group string) (string, []string, error) {
	st, err := r.status()
	if err != nil {
		return "", nil, err
	}
	g := st.Groups[group]
	if !g.Healthy || g.OpenAI == nil {
		return "", g.OpenAICandidates, fmt.Errorf("group %s not routable: %s", group, deref(g.WhyNot))
	}
	return *g.OpenAI, g.OpenAICandidates, nil
}

// TestLinkDrop: a model node reachable on two links, fab0 ranked first.
// Cutting fab0 must move traffic to lan0 within one probe round; bringing
// it back must move traffic back to fab0, but only once PROBE_PROMOTE_S
// has passed since the fall-through. Requests sent once a switch is
// visible all succeed.
func TestLinkDrop(t *testing.T) {
	t.Parallel()
	const (
		probeInterval = time.Second
		probeTimeout  = time.Second
		promote       = 5 * time.Second
	)
	n := makeNode(t)
	dport, eport := 16380, 18000 // private to the namespace
	daemonAddr := lanNode + ":" + strconv.Itoa(dport)
	// The daemon listens on lan0, which is never cut, so only the
	// endpoint's links change. Its interface list is read once (a long
	// announce interval): the router's probe alone must notice the cut.
	n.start(t, "mentatd daemon (netns)", cleanEnv("MENTAT_HTTP_HOST="+lanNode, "MENTAT_HTTP_PORT="+strconv.Itoa(dport),
		"MENTAT_ANNOUNCE_IFACES=fab0,lan0", "MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S=3600",
		"MENTAT_AGENT_TIMEOUT_S=6"), testproc.Bin(t, "mentatd"), "daemon").
		WaitOutput(t, 30*time.Second, `event=http_listening`)
	n.start(t, "agent (netns)", cleanEnv("MENTAT_DAEMON="+daemonAddr, "MENTAT_GROUP=alpha", "MENTAT_CONTAINER=alpha",
		"MENTAT_OPENAI_API="+strconv.Itoa(eport)+"/v1", "MENTAT_MODEL_PROVIDER=vllm"),
		testproc.Bin(t, "mentatd"), "agent", "--", testproc.Bin(t, "enginesim"), "--model", "alpha-7b", "--host", "0.0.0.0", "--port", strconv.Itoa(eport),
		"--ttft", "10ms", "--itl", "5ms", "--jitter", "0")
	r := startRouter(t, daemonAddr, "ALLOWED_SOURCES="+allowedNS, "POLL_INTERVAL_S=1",
		"PROBE_INTERVAL_S=1", "PROBE_TIMEOUT_S=1", "PROBE_PROMOTE_S=5", "SERVING_TIMEOUT_S=5")
	r.waitModels(t, "alpha-7b")

	fab := "http://" + fabNode + ":" + strconv.Itoa(eport) + "/v1"
	lan := "http://" + lanNode + ":" + strconv.Itoa(eport) + "/v1"
	testproc.Eventually(t, 30*time.Second, "alpha served over fab0", func() error {
		u, cands, err := inUse(r, "alpha")
		if err != nil || u != fab || len(cands) != 2 || cands[1] != lan {
			return fmt.Errorf("in use %q of %v: %v", u, cands, err)
		}
		return nil
	})
	mustServe(t, r.base, "alpha-7b")

	traffic := startTraffic(r.base, "alpha-7b")
	defer traffic.stop()

	cut := time.Now()
	n.link(t, "fab0", "down")
	var switched time.Time
	testproc.Eventually(t, 30*time.Second, "traffic moved to lan0", func() error {
		u, _, err := inUse(r, "alpha")
		if err != nil || u != lan {
			return fmt.Errorf("in use %q: %v", u, err)
		}
		switched = time.Now()
		return nil
	})
	t.Logf("fell through to %s %s after the cut", lan, switched.Sub(cut).Round(time.Millisecond))
	// One probe round: the wait for it, the dead candidate's timeout, the
	// next one's answer; doubled, plus room for a loaded machine.
	if d := switched.Sub(cut); d > 2*(probeInterval+2*probeTimeout)+10*time.Second {
		t.Fatalf("fall-through took %s, more than one probe round", d)
	}
	mustServe(t, r.base, "alpha-7b")

	n.link(t, "fab0", "up")
	var back time.Time
	testproc.Eventually(t, 45*time.Second, "traffic back on fab0", func() error {
		u, _, err := inUse(r, "alpha")
		if err != nil || u != fab {
			return fmt.Errorf("in use %q: %v", u, err)
		}
		back = time.Now()
		return nil
	})
	t.Logf("taken back %s after the fall-through (PROBE_PROMOTE_S %s)", back.Sub(switched).Round(time.Millisecond), promote)
	if d := back.Sub(switched); d < promote-2*probeInterval {
		t.Fatalf("the repaired link was taken back %s after the fall-through, before PROBE_PROMOTE_S (%s)", d, promote)
	}
	mustServe(t, r.base, "alpha-7b")

	ok, failed := traffic.stop()
	t.Logf("requests during the test: %d ok; failed around the cut: %v", ok, failed)
	if ok == 0 {
		t.Fatal("no request succeeded during the test")
	}
	// Only requests sent between the cut and the fall-through may fail;
	// from then on one link or the other always answers.
	for _, f := range failed {
		if f.sent.After(switched) {
			t.Fatalf("a request sent after the fall-through failed: %+v", f)
		}
	}
}

// traffic sends short completions one after another until stopped.
type traffic struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	ok     int
	failed []failure
}

type failure struct {
	sent time.Time
	err  string
}

func startTraffic(base, model string) *traffic {
	// Bounded: two minutes or 5,000 requests.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tr := &traffic{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; i < 5000 && ctx.Err() == nil; i++ {
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			rep, err := post(rctx, base, model, 2)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			tr.mu.Lock()
			if err == nil && rep.code == 200 {
				tr.ok++
			} else {
				tr.failed = append(tr.failed, failure{sent: sent, err: fmt.Sprintf("%v %d %.200s", err, rep.code, rep.body)})
			}
			tr.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return tr
}

func (tr *traffic) stop() (int, []failure) {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ok, tr.failed
}
