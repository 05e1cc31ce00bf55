// Package stats serves the router's /stats.json: for every replica of
// every routable model (one row each, under the model), what its engine
// reports on /metrics, how the balancer sees it and the requests the
// router is carrying; for every group that fails its gate, one row with
// the reason; with API keys on, every key's usage. The status page
// (package ui) polls it.
package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Defaults for Stats' tunables.
const (
	// DefaultCacheTTL is how long one group's scrape is reused: the page
	// polls every 2 s, so any number of open pages costs one scrape per
	// group per poll.
	DefaultCacheTTL = time.Second
	// DefaultScrapeTimeout bounds one /metrics fetch, so a wedged engine
	// cannot hold the whole document past the page's poll interval.
	DefaultScrapeTimeout = 2 * time.Second
)

// Stats builds the /stats.json document.
type Stats struct {
	src      routes.Source
	inflight Inflight
	routing  Routing
	keys     Keys
	flow     Flow
	scraper  *scraper
	started  time.Time
	now      func() time.Time
}

// New returns a Stats reading routes from src and in-flight requests from
// inflight (nil: the router carries none). client fetches engines'
// /metrics; nil means http.DefaultClient. Scrape failures are logged on
// change to logger (nil: discarded).
func New(src routes.Source, inflight Inflight, client *http.Client, logger *slog.Logger) *Stats {
	if client == nil {
		client = http.DefaultClient
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Stats{
		src:      src,
		inflight: inflight,
		scraper:  newScraper(client, DefaultCacheTTL, DefaultScrapeTimeout, logger),
		started:  time.Now(),
		now:      time.Now,
	}
}

// Routing is the balancer's view of a replica (nil: rows carry none).
type Routing interface {
	Replica(rt *routes.Route) RoutingRow
}

// RoutingRow is why a replica gets traffic: its routing state, the load
// the policies compare, and the decisions so far by reason.
type RoutingRow struct {
	State     string             `json:"state"`
	Load      float64            `json:"load"`
	Decisions map[string]float64 `json:"decisions"`
}

// SetRouting makes rows carry the balancer's view; call it before serving.
func (s *Stats) SetRouting(r Routing) { s.routing = r }

// Scrape returns the exposition of the engine behind rt, reusing a cached
// one younger than maxAge and sharing a scrape in progress with the
// document: the balancer's load reads and the page cost one scrape per
// engine per interval.
func (s *Stats) Scrape(ctx context.Context, rt *routes.Route, maxAge time.Duration) (Families, error) {
	u := metricsURL(rt)
	if u == "" {
		return nil, fmt.Errorf("route for %s has no engine URL", rt.Model)
	}
	return s.scraper.getFresh(ctx, u, maxAge)
}

// Document is the /stats.json body. Discovery, set while no watched
// daemon is connected, says so and what to do (the page shows it).
type Document struct {
	UptimeS   int64        `json:"uptime_s"`
	Discovery string       `json:"discovery,omitempty"`
	Models    []Row        `json:"models"`
	Requests  []RequestRow `json:"requests"`
	// Keys is every key's usage and limits (keys.Usage), in key-file
	// order, then removed keys that ran up usage; absent with keys off
	// (and while the key file lists no key).
	Keys []keys.Usage `json:"keys,omitempty"`
	// Queues is, with flow control on, every routable model's requests
	// waiting in the router by band; absent with it off.
	Queues []QueueRow `json:"queues,omitempty"`
}

// QueueRow is one model's flow-control queue.
type QueueRow struct {
	Model     string `json:"model"`
	Critical  int    `json:"critical"`
	Standard  int    `json:"standard"`
	Sheddable int    `json:"sheddable"`
}

// Flow is flow control's view of the queues (flow.Controller).
type Flow interface {
	Queued(model string) [flow.NumBands]int
}

// SetFlow makes /stats.json and the series carry the flow-control
// queues; call it before serving.
func (s *Stats) SetFlow(f Flow) { s.flow = f }

// Row is one model (or one failing group). Engine numbers are null when the
// engine does not publish them, when its /metrics could not be read
// (ScrapeError says why), and always for a group that fails its gate.
type Row struct {
	Model    string  `json:"model"`
	Group    string  `json:"group"`
	Provider string  `json:"provider"`
	Healthy  bool    `json:"healthy"`
	WhyNot   *string `json:"why_not"`
	Proxied  int     `json:"proxied"`
	// Routing is the balancer's view of a routable replica (null for a
	// failing group).
	Routing          *RoutingRow        `json:"routing"`
	Running          *float64           `json:"running"`
	Waiting          *float64           `json:"waiting"`
	KV               *float64           `json:"kv"`
	PromptTokens     *float64           `json:"prompt_tokens"`
	GenerationTokens *float64           `json:"generation_tokens"`
	Preemptions      *float64           `json:"preemptions"`
	TTFTS            *float64           `json:"ttft_s"`
	QueueS           *float64           `json:"queue_s"`
	ITLS             *float64           `json:"itl_s"`
	Finished         map[string]float64 `json:"finished"`
	ScrapeError      string             `json:"scrape_error,omitempty"`
}

// RequestRow is one in-flight request. WaitingS counts while no byte of the
// answer has arrived and is null after; TTFBS is null until it arrives.
type RequestRow struct {
	ID        uint64   `json:"id"`
	Model     string   `json:"model"`
	Group     string   `json:"group"`
	AgeS      float64  `json:"age_s"`
	BodyBytes int64    `json:"body_bytes"`
	Stream    bool     `json:"stream"`
	WaitingS  *float64 `json:"waiting_s"`
	TTFBS     *float64 `json:"ttfb_s"`
	OutBytes  int64    `json:"out_bytes"`
}

// Handler serves GET /stats.json.
func (s *Stats) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "/stats.json answers GET only", http.StatusMethodNotAllowed)
			return
		}
		doc := s.Document(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(doc)
	})
}

// Document builds the current document, scraping every routable group's
// engine concurrently (or reusing a scrape younger than the cache TTL).
// It returns when every scrape has answered or ctx ends.
func (s *Stats) Document(ctx context.Context) Document {
	snap := s.src.Load()
	now := s.now()
	doc := Document{UptimeS: int64(now.Sub(s.started).Seconds()), Discovery: snap.DiscoveryNote(), Models: []Row{}, Requests: []RequestRow{}}

	results := s.scrapeAll(ctx, snap)

	proxied := func(model, group string) int {
		if s.inflight == nil {
			return 0
		}
		return s.inflight.Proxied(model, group)
	}
	for _, model := range snap.Available() {
		for _, rt := range snap.Replicas[model] {
			row := Row{Model: model, Group: rt.Group, Provider: rt.Provider, Healthy: true, Proxied: proxied(model, rt.Group)}
			if s.routing != nil {
				r := s.routing.Replica(rt)
				row.Routing = &r
			}
			if n, err := engineNumbers(results, model, rt); err != nil {
				row.ScrapeError = err.Error()
			} else {
				row.Running, row.Waiting, row.KV = n.Running, n.Waiting, n.KV
				row.PromptTokens, row.GenerationTokens, row.Preemptions = n.PromptTokens, n.GenerationTokens, n.Preemptions
				row.TTFTS, row.QueueS, row.ITLS = n.TTFT, n.Queue, n.ITL
				row.Finished = n.Finished
			}
			doc.Models = append(doc.Models, row)
		}
	}
	for _, name := range snap.GroupNames() {
		g := snap.Groups[name]
		if g.Healthy {
			continue
		}
		why := g.WhyNot
		if why == "" {
			why = "not admitted"
		}
		// The row is named for what the group served when last probed, so
		// an operator looking for a model finds it; the group name stands
		// in when it was never probed.
		model := name
		if len(g.Models) > 0 {
			model = strings.Join(g.Models, ", ")
		}
		n := 0
		for _, m := range g.Models {
			n += proxied(m, name)
		}
		doc.Models = append(doc.Models, Row{Model: model, Group: name, Provider: g.Provider, WhyNot: &why, Proxied: n})
	}

	if s.inflight != nil {
		reqs := s.inflight.Requests()
		sort.Slice(reqs, func(i, j int) bool { return reqs[i].ID < reqs[j].ID })
		for _, q := range reqs {
			row := RequestRow{
				ID: q.ID, Model: q.Model, Group: q.Group,
				AgeS:      seconds(now.Sub(q.Started)),
				BodyBytes: q.BodyBytes, Stream: q.Stream, OutBytes: q.OutBytes,
			}
			if q.FirstByte.IsZero() {
				w := row.AgeS
				row.WaitingS = &w
			} else {
				t := seconds(q.FirstByte.Sub(q.Started))
				row.TTFBS = &t
			}
			doc.Requests = append(doc.Requests, row)
		}
	}
	if s.keys != nil {
		doc.Keys = s.keys.Usage()
	}
	if s.flow != nil {
		doc.Queues = []QueueRow{}
		for _, m := range snap.Available() {
			q := s.flow.Queued(m)
			doc.Queues = append(doc.Queues, QueueRow{Model: m, Critical: q[flow.Critical], Standard: q[flow.Standard], Sheddable: q[flow.Sheddable]})
		}
	}
	return doc
}

// scrapeResult is one engine's exposition or why it could not be read.
type scrapeResult struct {
	fams Families
	err  error
}

// scrapeAll reads every routable engine's /metrics concurrently, once per
// engine whatever number of models it serves (or reuses a scrape younger
// than the cache TTL), keyed by metrics URL. It returns when every scrape
// has answered or ctx ends.
func (s *Stats) scrapeAll(ctx context.Context, snap *routes.Snapshot) map[string]scrapeResult {
	urls := map[string]bool{}
	for _, reps := range snap.Replicas {
		for _, rt := range reps {
			if u := metricsURL(rt); u != "" {
				urls[u] = true
			}
		}
	}
	results := make(map[string]scrapeResult, len(urls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := range urls {
		wg.Go(func() {
			fams, err := s.scraper.get(ctx, u)
			mu.Lock()
			results[u] = scrapeResult{fams, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	s.scraper.keep(urls)
	return results
}

// engineNumbers is what the engine serving rt reports for model, or why
// it could not be read.
func engineNumbers(results map[string]scrapeResult, model string, rt *routes.Route) (Numbers, error) {
	res, ok := results[metricsURL(rt)]
	if !ok {
		return Numbers{}, fmt.Errorf("route for %s has no engine URL", model)
	}
	if res.err != nil {
		return Numbers{}, res.err
	}
	return res.fams.Extract(model), nil
}

// metricsURL is where the engine serving rt publishes its metrics: at the
// root, beside /v1, as vLLM does.
func metricsURL(rt *routes.Route) string {
	if rt.Root == nil {
		return ""
	}
	return rt.Root.JoinPath("metrics").String()
}

// seconds rounds to milliseconds, never below zero (clocks of the proxy's
// timestamps and ours are the same monotonic clock, but be safe).
func seconds(d time.Duration) float64 {
	if d < 0 {
		d = 0
	}
	return math.Round(d.Seconds()*1000) / 1000
}
