package serve

import (
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// probedAll admits every group it is handed: probed OK at one instant on
// its first candidate, serving one model. It stands in for the prober so
// the benchmark times the builder alone, with every group routable (the
// costliest case: each group also yields a route).
type probedAll struct {
	at      time.Time
	results map[string]probeResult
}

func (a *probedAll) sync(cands map[string][]string) {
	for name, list := range cands {
		if _, ok := a.results[name]; !ok {
			a.results[name] = probeResult{at: a.at, ok: true, url: list[0], models: []string{name + "-model"},
				entries: []json.RawMessage{json.RawMessage(`{"id":"` + name + `-model","object":"model"}`)}}
		}
	}
}

func (a *probedAll) state(name string) (string, probeResult, probeResult, bool) {
	r, ok := a.results[name]
	return r.url, r, r, ok
}

// clusterViews is what the router holds for a cluster of daemons nodes in
// a full mesh, with groups spread round-robin over the nodes: each daemon
// reports its own groups (one alive agent announcing an OpenAI and an MCP
// endpoint in port form, one running actor) and every other node as a
// peer.
func clusterViews(daemons, groups int, now time.Time) []discovery.View {
	ip := func(i int) string { return fmt.Sprintf("10.100.%d.%d", i/250, i%250+1) }
	views := make([]discovery.View, daemons)
	for d := range daemons {
		s := &wire.Snapshot{NodeID: fmt.Sprintf("node-%d", d), NodeIP: ip(d), Addrs: []string{ip(d)},
			Peers: map[string]wire.Peer{}, Groups: map[string]wire.Group{}}
		for p := range daemons {
			if p != d {
				s.Peers[fmt.Sprintf("node-%d", p)] = wire.Peer{NodeIP: ip(p), LinkIP: ip(p), Addrs: []string{ip(p)}, HTTPPort: 6380, Alive: true}
			}
		}
		views[d] = discovery.View{Addr: ip(d) + ":6380", Snapshot: s, Fetched: now}
	}
	for g := range groups {
		d := g % daemons
		name := fmt.Sprintf("group-%05d", g)
		views[d].Snapshot.Groups[name] = wire.Group{
			Agents: map[string]wire.Agent{name + "@0": agent(ip(d), true, map[string]wire.Service{
				wire.ServiceOpenAI: {Port: 8000 + g/daemons, Path: "/v1", Provider: "vllm"},
				wire.ServiceMCP:    {Port: 20000 + g/daemons, Path: "/mcp"},
			})},
			Actors: actors("running"),
		}
	}
	return views
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkBuildRoutes times one route rebuild (group table, candidates,
// admission gates, route snapshot) for 10 to 10,000 groups across 1 to
// 100 daemons. Besides time and allocations per rebuild it reports the
// live memory of the daemon views the router holds (views-B) and of one
// route snapshot (snapshot-B).
//
//	go test -run '^$' -bench BuildRoutes -benchmem ./mentat/serve/
func BenchmarkBuildRoutes(b *testing.B) {
	for _, groups := range []int{10, 100, 1000, 10000} {
		for _, daemons := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("groups=%d/daemons=%d", groups, daemons), func(b *testing.B) {
				now := time.Now()
				h0 := heapInUse()
				views := clusterViews(daemons, groups, now)
				viewsB := heapInUse() - h0
				bl := &builder{poll: time.Second, fresh: time.Minute, allow: discovery.NewAllow([]string{"10.100."}),
					subnets: func() []*net.IPNet { return subnets("10.100.0.0/16") }}
				adm := &probedAll{at: now, results: map[string]probeResult{}}
				if s := bl.build(now, views, adm); len(s.Groups) != groups || len(s.Models) != groups {
					b.Fatalf("built %d groups and %d routes, want %d of each", len(s.Groups), len(s.Models), groups)
				}
				h1 := heapInUse()
				snap := bl.build(now, views, adm)
				snapB := heapInUse() - h1
				runtime.KeepAlive(snap)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					bl.build(now, views, adm)
				}
				b.ReportMetric(float64(viewsB), "views-B")
				b.ReportMetric(float64(snapB), "snapshot-B")
				runtime.KeepAlive(views)
			})
		}
	}
}
