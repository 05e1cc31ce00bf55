package serve

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// why_not texts, in gate order (mentat-wire.md).
const (
	whyNoEndpoint = routes.WhyNoEndpoint
	whyNoActors   = routes.WhyNoActors
	whyUnprobed   = routes.WhyUnprobed
	whyStale      = routes.WhyStale
)

func whyNotAllowed(ep *endpoint) string {
	return routes.WhyNotAllowed + announcedText(ep) + ", and no address of that node passes ALLOWED_SOURCES"
}

func whyProbeFailed(errs []string, note string) string {
	s := routes.WhyProbeFailed + strings.Join(errs, "; ")
	if note != "" {
		s += " (agent reports: " + note + ")"
	}
	return s
}

// admission is what the builder needs from the prober.
type admission interface {
	sync(cands map[string][]string)
	state(name string) (inUse string, cur, good probeResult, known bool)
}

// builder turns daemon views and probe results into a route snapshot.
type builder struct {
	poll, fresh time.Duration
	allow       discovery.Allow
	subnets     discovery.SubnetsFunc
}

// build merges the views into the group table, hands the prober its
// candidate lists, and applies the admission gates.
func (b *builder) build(now time.Time, views []discovery.View, adm admission) *routes.Snapshot {
	table := buildTable(views, now, b.poll)
	subnets := b.subnets()

	openai := make(map[string][]string, len(table))
	mcp := make(map[string][]string, len(table))
	probed := map[string][]string{}
	for name, e := range table {
		openai[name] = candidates(e.openai, subnets, b.allow)
		mcp[name] = candidates(e.mcp, subnets, b.allow)
		if len(openai[name]) > 0 {
			probed[name] = openai[name]
		}
	}
	adm.sync(probed)

	groups := make(map[string]*routes.Group, len(table))
	for name, e := range table {
		g := &routes.Group{
			Name: name, Daemon: e.daemon, AgentsAlive: e.agentsAlive, ActorsRunning: e.actorsRunning,
			OpenAICandidates: openai[name], MCPCandidates: mcp[name],
		}
		if e.openai != nil {
			g.OpenAINote, g.Provider = e.openai.svc.Note, e.openai.svc.Provider
		}
		inUse, cur, good, _ := adm.state(name)
		if len(g.OpenAICandidates) > 0 {
			g.OpenAI = inUse
			g.Models, g.ModelEntries = good.models, good.entries
			g.ProbedAt = cur.at
		}
		g.MCP = pickMCP(g.MCPCandidates, g.OpenAI)
		switch {
		case e.openai == nil:
			g.WhyNot = whyNoEndpoint
		case len(g.OpenAICandidates) == 0:
			g.WhyNot = whyNotAllowed(e.openai)
		case e.actorsRunning == 0:
			g.WhyNot = whyNoActors
		case cur.at.IsZero():
			g.WhyNot = whyUnprobed
		case !cur.ok:
			g.WhyNot = whyProbeFailed(cur.errs, g.OpenAINote)
		case now.Sub(cur.at) > b.fresh:
			g.WhyNot = whyStale
		case g.OpenAI == "":
			g.WhyNot = whyUnprobed // a result without a candidate in use cannot route
		default:
			g.Healthy = true
			g.Models, g.ModelEntries = cur.models, cur.entries
		}
		groups[name] = g
	}

	// Every admitted group listing a model is a replica of it (NewReplicated
	// sorts them by group name).
	replicas := map[string][]*routes.Route{}
	for n, g := range groups {
		if !g.Healthy {
			continue
		}
		for _, m := range g.Models {
			if r, err := routes.NewRoute(m, n, g.OpenAI, g.Provider); err == nil {
				r.Probed = g.ProbedAt
				replicas[m] = append(replicas[m], r)
			}
		}
	}

	daemons := make(map[string]*routes.Daemon, len(views))
	for _, v := range views {
		d := &routes.Daemon{Addr: v.Addr, Seed: v.Seed, Source: v.Source, Error: v.Err,
			Connected: v.Err == "" && v.Fresh(now, b.poll)}
		if v.Snapshot != nil {
			d.NodeID = v.Snapshot.NodeID
			d.Age = now.Sub(v.Fetched)
			if d.Error == "" && !d.Connected {
				d.Error = "view stale: no good /status read in three poll intervals"
			}
		}
		daemons[v.Addr] = d
	}
	return routes.NewReplicated(now, replicas, groups, daemons)
}

// pickMCP prefers the MCP candidate on the host the API answers on, since
// that address is proven reachable; else the best-ranked one.
func pickMCP(cands []string, openai string) string {
	if len(cands) == 0 {
		return ""
	}
	if u, err := url.Parse(openai); err == nil && openai != "" {
		for _, c := range cands {
			if cu, err := url.Parse(c); err == nil && sameHost(cu.Hostname(), u.Hostname()) {
				return c
			}
		}
	}
	return cands[0]
}

func sameHost(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}
