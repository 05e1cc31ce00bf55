package serve

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/proxy"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// StatusDoc is /status.json (mentat-wire.md, "Router outputs").
type StatusDoc struct {
	UptimeS int64                    `json:"uptime_s"`
	Daemons map[string]DaemonStatus  `json:"daemons"`
	Groups  map[string]GroupStatus   `json:"groups"`
	Models  map[string]ModelLocation `json:"models"`
}

// DaemonStatus is one watched daemon in /status.json.
type DaemonStatus struct {
	Connected bool     `json:"connected"`
	AgeS      *float64 `json:"age_s"` // null until a first good read
	Error     *string  `json:"error"`
	NodeID    string   `json:"node_id"`
	Seed      bool     `json:"seed"`
}

// GroupStatus is one group in /status.json.
type GroupStatus struct {
	Daemon           string   `json:"daemon"`
	AgentsAlive      int      `json:"agents_alive"`
	ActorsRunning    int      `json:"actors_running"`
	OpenAI           *string  `json:"openai"`
	OpenAICandidates []string `json:"openai_candidates"`
	OpenAINote       *string  `json:"openai_note"`
	Provider         string   `json:"provider"`
	MCP              *string  `json:"mcp"`
	Healthy          bool     `json:"healthy"`
	Models           []string `json:"models"`
	WhyNot           *string  `json:"why_not"`
}

// ModelLocation is one routable model in /status.json: its first replica
// (the first group by name, as before replicas were balanced) and every
// replica.
type ModelLocation struct {
	Group    string            `json:"group"`
	URL      string            `json:"url"`
	Replicas []ReplicaLocation `json:"replicas"`
}

// ReplicaLocation is one replica of a model: the group, the endpoint in
// use, and its routing state (see balance.ReplicaInfo: ready, stale or
// refused).
type ReplicaLocation struct {
	Group string `json:"group"`
	URL   string `json:"url"`
	State string `json:"state"`
}

// StateFunc gives a replica's routing state.
type StateFunc func(*routes.Route) string

// Status renders a snapshot as /status.json; the MCP serve_status tool
// reports the same document. state gives each replica's routing state
// (nil: every replica is "ready").
func Status(s *routes.Snapshot, uptime time.Duration, state StateFunc) StatusDoc {
	doc := StatusDoc{
		UptimeS: int64(uptime / time.Second),
		Daemons: make(map[string]DaemonStatus, len(s.Daemons)),
		Groups:  make(map[string]GroupStatus, len(s.Groups)),
		Models:  make(map[string]ModelLocation, len(s.Models)),
	}
	for addr, d := range s.Daemons {
		ds := DaemonStatus{Connected: d.Connected, Error: nullable(d.Error), NodeID: d.NodeID, Seed: d.Seed}
		if d.NodeID != "" || d.Age > 0 {
			age := math.Round(d.Age.Seconds()*10) / 10
			ds.AgeS = &age
		}
		doc.Daemons[addr] = ds
	}
	for name, g := range s.Groups {
		doc.Groups[name] = GroupStatus{
			Daemon: g.Daemon, AgentsAlive: g.AgentsAlive, ActorsRunning: g.ActorsRunning,
			OpenAI: nullable(g.OpenAI), OpenAICandidates: nonNil(g.OpenAICandidates),
			OpenAINote: nullable(g.OpenAINote), Provider: g.Provider, MCP: nullable(g.MCP),
			Healthy: g.Healthy, Models: nonNil(g.Models), WhyNot: nullable(g.WhyNot),
		}
	}
	for m, r := range s.Models {
		loc := ModelLocation{Group: r.Group, URL: r.Base.String(), Replicas: []ReplicaLocation{}}
		for _, rep := range s.Replicas[m] {
			st := "ready"
			if state != nil {
				st = state(rep)
			}
			loc.Replicas = append(loc.Replicas, ReplicaLocation{Group: rep.Group, URL: rep.Base.String(), State: st})
		}
		doc.Models[m] = loc
	}
	return doc
}

// ModelList renders /v1/models: every admitted engine's entries with every
// field kept and owned_by set to the group. An id several replicas serve
// is listed once, with the fields of its first replica (the first group
// by name), so the list does not change with the order of probes.
func ModelList(s *routes.Snapshot) []json.RawMessage {
	data := []json.RawMessage{}
	for _, name := range s.GroupNames() {
		g := s.Groups[name]
		if !g.Healthy {
			continue
		}
		for _, e := range g.ModelEntries {
			if _, b := routedEntry(s, name, e); b != nil {
				data = append(data, b)
			}
		}
	}
	return data
}

// ModelEntry renders /v1/models/{id}: the entry /v1/models lists for id,
// nil when id does not route.
func ModelEntry(s *routes.Snapshot, id string) json.RawMessage {
	r := s.Models[id]
	if r == nil || s.Groups[r.Group] == nil {
		return nil
	}
	for _, e := range s.Groups[r.Group].ModelEntries {
		if got, b := routedEntry(s, r.Group, e); got == id && b != nil {
			return b
		}
	}
	return nil
}

// routedEntry reads one engine entry of group and, when the group routes
// its id, renders it with owned_by set to the group; b is nil otherwise.
func routedEntry(s *routes.Snapshot, group string, e json.RawMessage) (id string, b json.RawMessage) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(e, &fields) != nil || json.Unmarshal(fields["id"], &id) != nil {
		return "", nil
	}
	if r := s.Models[id]; r == nil || r.Group != group {
		return id, nil
	}
	owner, _ := json.Marshal(group)
	fields["owned_by"] = owner
	b, err := json.Marshal(fields)
	if err != nil {
		return id, nil
	}
	return id, b
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, "encoding the answer failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, Status(s.holder.Load(), s.Uptime(), s.state))
}

// handleModels answers GET /v1/models; with keys on, only the models in
// the request's key's scope are listed.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	data := ModelList(s.holder.Load())
	if k := keys.FromContext(r.Context()); k != nil && len(k.Models) > 0 {
		kept := data[:0]
		for _, b := range data {
			var e struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &e) == nil && k.Allows(e.ID) {
				kept = append(kept, b)
			}
		}
		data = kept
	}
	writeJSON(w, struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", data})
}

// handleModel answers GET /v1/models/{id} (the official clients'
// models.retrieve). The id may hold slashes ("meta-llama/Llama-3-8B"),
// sent raw or escaped. An id that does not route gets the proxy's
// refusal for it: 503 with the group's why_not, or 404 listing what
// routes; param is null, since the id is in the path. With keys on, an id
// outside the key's scope is a 404 as if it did not exist, listing only
// the models in scope.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	snap := s.holder.Load()
	id := r.PathValue("id")
	k := keys.FromContext(r.Context())
	if b := ModelEntry(snap, id); b != nil && (k == nil || k.Allows(id)) {
		writeJSON(w, b)
		return
	}
	e := proxy.RefusalFor(snap, id, k)
	e.Param = ""
	proxy.WriteError(w, e)
}

func handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}
