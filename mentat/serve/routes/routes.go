// Package routes is the router's immutable route snapshot: which model goes
// to which group and upstream, and why a group is not routable. Discovery
// and admission build a new Snapshot whenever anything changes and publish
// it through a Holder; request handlers Load it without locks and never
// touch the discovery state.
//
// A published Snapshot and everything it points to must not be modified.
package routes

import (
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Snapshot is one consistent view of what routes.
type Snapshot struct {
	// Built is when the snapshot was made.
	Built time.Time
	// Models maps each routable model name to its first replica (the first
	// group by name): the route for whatever needs one engine per model
	// (token counting, the MCP merge).
	Models map[string]*Route
	// Replicas maps each routable model name to every admitted group whose
	// probe lists it, sorted by group name; Replicas[m][0] is Models[m].
	// The proxy balances requests over them (package balance).
	Replicas map[string][]*Route
	// Groups holds every known group, admitted or not, by name.
	Groups map[string]*Group
	// Daemons holds every watched daemon, by its HTTP address.
	Daemons map[string]*Daemon
	// serves maps a model name to the groups known to serve it (the group's
	// own name, or a name listed by its last successful probe), sorted.
	serves map[string][]string
	// available is the sorted list of routable model names.
	available []string
}

// Route is where requests for one model go.
type Route struct {
	Model string
	Group string
	// Base is the OpenAI base URL in use; it ends in /v1 (e.g.
	// http://10.0.0.1:8000/v1).
	Base *url.URL
	// Root is Base without its trailing /v1, for root-level engine paths
	// such as /tokenize and /metrics.
	Root *url.URL
	// Provider is the announced MENTAT_MODEL_PROVIDER, lowercased; empty
	// when the container did not say.
	Provider string
	// Probed is when the group's last successful probe finished: the
	// balancer clears a refused mark once a probe after it succeeded.
	Probed time.Time
}

// Group is the router's view of one group (see /status.json).
type Group struct {
	Name string
	// Daemon is the HTTP address of the daemon whose view won.
	Daemon        string
	AgentsAlive   int
	ActorsRunning int
	// OpenAI is the candidate in use ("" when none answers);
	// OpenAICandidates lists every candidate, best first.
	OpenAI           string
	OpenAICandidates []string
	// OpenAINote is the agent's bind finding ("" when none).
	OpenAINote string
	Provider   string
	// MCP is the management MCP URL ("" when none announced);
	// MCPCandidates lists every candidate, best first.
	MCP           string
	MCPCandidates []string
	Healthy       bool
	// WhyNot is the failed gate's text when not Healthy.
	WhyNot string
	// Models are the names the last successful probe listed, sorted;
	// ModelEntries are those /models entries verbatim, in engine order.
	Models       []string
	ModelEntries []json.RawMessage
	// ProbedAt is when the last probe finished (zero if never).
	ProbedAt time.Time
}

// Daemon is one watched daemon.
type Daemon struct {
	Addr      string
	Connected bool
	// Age is how old the last good view is (zero if none yet).
	Age    time.Duration
	Error  string
	NodeID string
	// Seed marks a daemon from MENTAT_DAEMONS; others came from UDP or peers.
	Seed   bool
	Source string
}

// New builds a snapshot where each model has the one route given. It
// takes ownership of the maps.
func New(built time.Time, models map[string]*Route, groups map[string]*Group, daemons map[string]*Daemon) *Snapshot {
	replicas := make(map[string][]*Route, len(models))
	for m, r := range models {
		replicas[m] = []*Route{r}
	}
	return NewReplicated(built, replicas, groups, daemons)
}

// NewReplicated builds a snapshot from every route of each model (in any
// order: they are sorted by group name) and indexes it; Models is each
// model's first replica. It takes ownership of the maps and slices.
func NewReplicated(built time.Time, replicas map[string][]*Route, groups map[string]*Group, daemons map[string]*Daemon) *Snapshot {
	if replicas == nil {
		replicas = map[string][]*Route{}
	}
	models := make(map[string]*Route, len(replicas))
	for m, rs := range replicas {
		if len(rs) == 0 {
			delete(replicas, m)
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Group < rs[j].Group })
		models[m] = rs[0]
	}
	if groups == nil {
		groups = map[string]*Group{}
	}
	if daemons == nil {
		daemons = map[string]*Daemon{}
	}
	s := &Snapshot{Built: built, Models: models, Replicas: replicas, Groups: groups, Daemons: daemons, serves: map[string][]string{}}
	for name, g := range groups {
		s.serves[name] = append(s.serves[name], name)
		for _, m := range g.Models {
			if m != name {
				s.serves[m] = append(s.serves[m], name)
			}
		}
	}
	for m := range s.serves {
		sort.Strings(s.serves[m])
	}
	for m := range models {
		s.available = append(s.available, m)
	}
	sort.Strings(s.available)
	return s
}

// Empty is the snapshot before discovery has found anything.
func Empty() *Snapshot { return New(time.Time{}, nil, nil, nil) }

// Lookup resolves a model name. It returns the first replica's route when
// the model is routable (Replicas has them all). Otherwise, when some group
// is known to serve the name, it returns that group (the first by name that
// is not admitted) so the caller can answer 503 with its WhyNot; else both
// are nil (404).
func (s *Snapshot) Lookup(model string) (*Route, *Group) {
	if r, ok := s.Models[model]; ok {
		return r, s.Groups[r.Group]
	}
	for _, name := range s.serves[model] {
		// A healthy group that does not route the name does not serve
		// it: its engine lists what it serves, and that is not among them.
		if g := s.Groups[name]; g != nil && !g.Healthy {
			return nil, g
		}
	}
	return nil, nil
}

// Available lists the routable model names, sorted. The slice is shared:
// do not modify it.
func (s *Snapshot) Available() []string { return s.available }

// why_not texts (mentat-wire.md), in gate order. The builder writes them;
// the proxy's refusals read them to say what to do next.
const (
	WhyNoEndpoint = "no announced OpenAI endpoint"
	// WhyNotAllowed starts "announced <X>, and no address of that node
	// passes ALLOWED_SOURCES".
	WhyNotAllowed = "announced "
	WhyNoActors   = "no running actors"
	WhyUnprobed   = "not probed yet"
	// WhyProbeFailed starts the list of every candidate tried with its
	// error.
	WhyProbeFailed = "endpoint probe failed: "
	WhyStale       = "endpoint probe stale"
)

// DiscoveryNote says why the snapshot knows no group, and what to do
// about it, when that is because no watched daemon is connected: "" when
// some group is known or some daemon connected. The router's empty
// answers (404 with no models, /stats.json and the status page) carry it,
// so a router started before, or without, its daemons says so.
func (s *Snapshot) DiscoveryNote() string {
	if len(s.Groups) > 0 {
		return ""
	}
	if len(s.Daemons) == 0 {
		return "the router watches no mentatd daemon: set MENTAT_DAEMONS to the daemons' HTTP addresses, or have them announce to MENTAT_ANNOUNCE_PORT"
	}
	addrs := make([]string, 0, len(s.Daemons))
	for a, d := range s.Daemons {
		if d.Connected {
			return ""
		}
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	notes := make([]string, 0, len(addrs))
	for _, a := range addrs {
		e := s.Daemons[a].Error
		if e == "" {
			e = "not read yet"
		}
		notes = append(notes, a+": "+e)
	}
	return "no mentatd daemon is reachable (" + strings.Join(notes, "; ") + ")"
}

// GroupNames lists every known group, sorted.
func (s *Snapshot) GroupNames() []string {
	out := make([]string, 0, len(s.Groups))
	for n := range s.Groups {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NewRoute builds a Route from an OpenAI base URL such as
// "http://10.0.0.1:8000/v1". Root is the base with a trailing /v1 removed.
func NewRoute(model, group, base, provider string) (*Route, error) {
	b, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	root := *b
	root.Path = strings.TrimSuffix(strings.TrimRight(b.Path, "/"), "/v1")
	root.RawPath = ""
	return &Route{Model: model, Group: group, Base: b, Root: &root, Provider: provider}, nil
}

// Holder publishes snapshots. The zero value holds an empty snapshot.
type Holder struct{ p atomic.Pointer[Snapshot] }

// Load returns the current snapshot; never nil.
func (h *Holder) Load() *Snapshot {
	if s := h.p.Load(); s != nil {
		return s
	}
	return empty
}

// Store publishes s.
func (h *Holder) Store(s *Snapshot) { h.p.Store(s) }

var empty = Empty()

// Source is what request handlers need: the current snapshot.
type Source interface{ Load() *Snapshot }

var _ Source = (*Holder)(nil)
