package serve

import (
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func subnets(cidrs ...string) []*net.IPNet {
	var out []*net.IPNet
	for _, c := range cidrs {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			panic(err)
		}
		out = append(out, n)
	}
	return out
}

func TestCandidatesOrdering(t *testing.T) {
	allow := discovery.NewAllow([]string{"10.100.0.", "192.168.1.", "127."})
	port := &endpoint{svc: wire.Service{Port: 8002, Path: "/v1"},
		nodeAddrs: []string{"10.100.0.1", "192.168.1.11", "10.9.0.1", "127.0.0.2", "10.100.0.1"}}
	// On-link first (192.168.1.11 is off the node's first rank), the node's
	// ranking within each half, 10.9.0.1 dropped by the allowlist,
	// duplicates once.
	got := candidates(port, subnets("192.168.1.0/24", "127.0.0.0/8"), allow)
	want := []string{"http://192.168.1.11:8002/v1", "http://127.0.0.2:8002/v1", "http://10.100.0.1:8002/v1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("port form: %v", got)
	}
	// No subnet in common: the node's own ranking.
	got = candidates(port, nil, allow)
	want = []string{"http://10.100.0.1:8002/v1", "http://192.168.1.11:8002/v1", "http://127.0.0.2:8002/v1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("off-link only: %v", got)
	}
	// URL form: itself, not checked.
	u := &endpoint{svc: wire.Service{Host: "203.0.113.5", Port: 80, Path: "/x/v1"}, nodeAddrs: []string{"10.100.0.1"}}
	if got := candidates(u, nil, allow); !reflect.DeepEqual(got, []string{"http://203.0.113.5:80/x/v1"}) {
		t.Fatalf("url form: %v", got)
	}
	// Nothing passes.
	if got := candidates(&endpoint{svc: wire.Service{Port: 1}, nodeAddrs: []string{"10.9.0.1"}}, nil, allow); got != nil {
		t.Fatalf("disallowed: %v", got)
	}
	if got := candidates(&endpoint{svc: wire.Service{Port: 8, Path: "/v1"}, nodeAddrs: []string{"::1"}}, nil, discovery.NewAllow([]string{"::1"})); !reflect.DeepEqual(got, []string{"http://[::1]:8/v1"}) {
		t.Fatalf("ipv6: %v", got)
	}
}

func agent(nodeIP string, alive bool, svcs map[string]wire.Service) wire.Agent {
	return wire.Agent{NodeIP: nodeIP, Alive: alive, Services: svcs}
}

func actors(states ...string) map[string]wire.Actor {
	m := map[string]wire.Actor{}
	for i, s := range states {
		m["a"+string(rune('0'+i))] = wire.Actor{State: s}
	}
	return m
}

func viewOf(addr string, fetched time.Time, s *wire.Snapshot) discovery.View {
	return discovery.View{Addr: addr, Snapshot: s, Fetched: fetched}
}

func TestBuildTableMerge(t *testing.T) {
	now := time.Now()
	oa := map[string]wire.Service{wire.ServiceOpenAI: {Port: 8000, Path: "/v1", Provider: "vllm"}, wire.ServiceMCP: {Port: 9000, Path: "/mcp"}}
	// Daemon A sees glm with one running actor; daemon B sees two. B wins.
	a := &wire.Snapshot{NodeIP: "10.100.0.1", Addrs: []string{"10.100.0.1"},
		Peers: map[string]wire.Peer{"p": {NodeIP: "10.100.0.2", LinkIP: "10.100.0.2", Addrs: []string{"10.100.0.2"}}},
		Groups: map[string]wire.Group{
			"glm": {Agents: map[string]wire.Agent{"glm@b": agent("10.100.0.2", true, oa)}, Actors: actors("running", "spawning")},
			"tie": {Agents: map[string]wire.Agent{"t@1": agent("10.100.0.1", true, oa)}, Actors: actors("running")},
		}}
	b := &wire.Snapshot{NodeIP: "10.100.0.2", Addrs: []string{"10.100.0.2", "192.168.1.12"},
		Groups: map[string]wire.Group{
			"glm": {Agents: map[string]wire.Agent{
				"glm@z": agent("10.100.0.2", true, oa), "glm@b": agent("192.168.1.12", true, oa), "glm@a": agent("10.100.0.2", false, oa),
				"glm@c": agent("10.100.0.2", true, map[string]wire.Service{wire.ServiceMCP: {Port: 9001}}),
			}, Actors: actors("running", "running", "dead")},
			"tie": {Agents: map[string]wire.Agent{"t@2": agent("10.100.0.2", true, oa)}, Actors: actors("running")},
		}}
	stale := &wire.Snapshot{NodeIP: "10.100.0.3", Groups: map[string]wire.Group{
		"old": {Actors: actors("running")},
		"glm": {Agents: map[string]wire.Agent{"x": agent("10.100.0.3", true, oa)}, Actors: actors("running", "running", "running")},
	}}
	views := []discovery.View{
		viewOf("b:6380", now, b), viewOf("a:6380", now, a), viewOf("c:6380", now.Add(-time.Minute), stale),
	}
	table := buildTable(views, now, time.Second)
	if _, ok := table["old"]; ok {
		t.Fatal("group from a stale view in the table")
	}
	glm := table["glm"]
	if glm.daemon != "b:6380" || glm.actorsRunning != 2 || glm.agentsAlive != 3 {
		t.Fatalf("glm: %+v", glm)
	}
	// The lexically first alive announcing rank serves the API; it joins
	// its node by a secondary address (192.168.1.12) and gets the fuller
	// description (B's own, two addresses) over A's peer entry (one).
	if glm.openai.agent != "glm@b" || !reflect.DeepEqual(glm.openai.nodeAddrs, []string{"10.100.0.2", "192.168.1.12"}) {
		t.Fatalf("glm openai: %+v", glm.openai)
	}
	if glm.mcp.agent != "glm@b" {
		t.Fatalf("mcp beside the API: %+v", glm.mcp)
	}
	// Equal actors and agents: the lower daemon address wins, whatever
	// order the views come in.
	if table["tie"].daemon != "a:6380" {
		t.Fatalf("tie: %+v", table["tie"])
	}
	rev := buildTable([]discovery.View{views[1], views[0]}, now, time.Second)
	if rev["tie"].daemon != "a:6380" {
		t.Fatal("tie break depends on view order")
	}
}

// A restarted daemon reports an empty registry until its agents register
// again; the previous boot's groups keep counting for three poll
// intervals, and a group the new boot reports wins over the carried copy.
func TestBuildTableCarriesRestartedDaemon(t *testing.T) {
	now := time.Now()
	oa := map[string]wire.Service{wire.ServiceOpenAI: {Port: 8000, Path: "/v1"}}
	old := &wire.Snapshot{NodeIP: "10.100.0.1", BootID: "b1", Groups: map[string]wire.Group{
		"glm":  {Agents: map[string]wire.Agent{"g": agent("10.100.0.1", true, oa)}, Actors: actors("running")},
		"qwen": {Agents: map[string]wire.Agent{"q": agent("10.100.0.1", true, oa)}, Actors: actors("running")},
	}}
	fresh := &wire.Snapshot{NodeIP: "10.100.0.1", BootID: "b2", Groups: map[string]wire.Group{
		"qwen": {Agents: map[string]wire.Agent{"q": agent("10.100.0.1", true, oa)}, Actors: actors("running", "running")},
	}}
	v := viewOf("a:6380", now, fresh)
	v.Previous, v.PreviousUntil = old, now.Add(3*time.Second)
	table := buildTable([]discovery.View{v}, now, time.Second)
	if table["glm"] == nil || table["glm"].actorsRunning != 1 {
		t.Fatalf("glm of the previous boot not carried: %+v", table["glm"])
	}
	if table["qwen"].actorsRunning != 2 {
		t.Fatalf("qwen must come from the new boot: %+v", table["qwen"])
	}
	later := buildTable([]discovery.View{v}, now.Add(4*time.Second), time.Hour)
	if _, ok := later["glm"]; ok {
		t.Fatal("glm still carried after the window")
	}
}
