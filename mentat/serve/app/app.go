// Package app assembles the router: discovery and admission (package
// serve), the POST proxy, the merged MCP endpoint, /stats.json, token
// counting, the status page and /metrics, on one listener. Both
// mentatd-serve and `mentatd serve` run exactly this.
package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/gcfloor"
	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve"
	"github.com/fe64bb06/frontdoor/mentat/serve/auth"
	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
	"github.com/fe64bb06/frontdoor/mentat/serve/mcp"
	"github.com/fe64bb06/frontdoor/mentat/serve/proxy"
	rroutes "github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
	"github.com/fe64bb06/frontdoor/mentat/serve/tokens"
	"github.com/fe64bb06/frontdoor/mentat/serve/ui"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// App is the assembled router.
type App struct {
	Server *serve.Server
	Proxy  *proxy.Proxy
	MCP    *mcp.Endpoint
	Stats  *stats.Stats
	// History samples every model for the status page's charts.
	History *stats.History
	// Balancer orders each model's replicas (ROUTING_POLICY); Run keeps
	// its engine loads fresh.
	Balancer *balance.Balancer
	// Keys is the key store (SERVE_KEYS_FILE), nil with keys off.
	Keys *keys.Store
	// Upstream are the keys sent to engines (SERVE_UPSTREAM_KEYS_FILE),
	// nil when none.
	Upstream *upstream.Keys
	// Flow is flow control (FLOW_CONTROL), nil when off.
	Flow *flow.Controller
	log  *slog.Logger
}

// New builds the router from cfg. Nothing listens until Run (or
// Server.Listen, for tests that need the address first).
func New(cfg serve.Config, log *slog.Logger) (*App, error) {
	srv, err := serve.New(cfg, log)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := srv.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	// A key file that cannot be used stops the router: serving without
	// the keys the operator asked for would open the port to everyone.
	var store *keys.Store
	if cfg.KeysFile != "" {
		if store, err = keys.Open(cfg.KeysFile, keys.Options{Product: keys.Router, Log: log, Registerer: reg}); err != nil {
			return nil, fmt.Errorf("SERVE_KEYS_FILE: %w", err)
		}
		// CORS (useCORS, added last) wraps it, so that a browser's
		// preflight, which carries no key, is answered.
		srv.Use(auth.Middleware(store))
	}
	var up *upstream.Keys
	if cfg.UpstreamKeysFile != "" {
		if up, err = upstream.Open(cfg.UpstreamKeysFile, log); err != nil {
			return nil, err
		}
		srv.SetUpstreamKeys(up)
	}
	routes := srv.Routes()
	bal := balance.New(cfg.Routing, reg)
	var fc *flow.Controller
	if cfg.Flow {
		// A model's room is what its replicas take now, as the balancer
		// sees them (balance.Free).
		fc = flow.New(cfg.FlowLimits, func(model string) int { return bal.Free(routes.Load().Replicas[model]) }, reg)
	}
	px := proxy.New(routes, proxy.Config{Timeout: cfg.ServingTimeout, Edge: cfg.Edge, Balancer: bal, Keys: store != nil, Upstream: up, Flow: fc, KeepAlive: cfg.KeepAlive,
		ModelWait: cfg.ModelWait, Stop: srv.HardStop(), Ready: srv.Ready()}, log, reg)
	srv.SetStopReport(func() []any {
		n := px.Stopped()
		return []any{"streams_ended", n.Streams, "answered_503", n.Refused, "connections_cut", n.Aborted}
	})
	state := func(rt *rroutes.Route) string { return bal.Info(rt).State }
	srv.SetReplicaState(state)
	status := func() any { return serve.Status(routes.Load(), srv.Uptime(), state) }
	// The MCP endpoint's own origin check allows the CORS origins too, so
	// that what CORS lets a page send, /mcp serves.
	// A session key file that cannot be used stops the router, like the
	// key files; without one, sessions continue on this router only.
	var sessionKeys [][]byte
	if cfg.SessionKeyFile != "" {
		if sessionKeys, err = mcp.LoadSessionKeys(cfg.SessionKeyFile, log); err != nil {
			return nil, fmt.Errorf("MENTAT_SESSION_KEY_FILE: %w", err)
		}
	}
	ep, err := mcp.New(routes, mcp.Config{ToolsTTL: cfg.ToolsTTL, CallTimeout: cfg.MCPTimeout, AllowedOrigins: cfg.CORSOrigins,
		SessionKeys: sessionKeys, SessionMaxAge: cfg.MCPSessionMax}, status, log)
	if err != nil {
		return nil, err
	}
	// Engine scrapes share one small client: the engines are few, the
	// scrapes cached, and a wedged engine must not hold a page load. The
	// history scrapes every 2 s: its idle connections live a little longer
	// than that, so each engine keeps one connection between samples
	// (still under uvicorn's 5 s keep-alive).
	scrapeTransport := proxy.NewTransport()
	scrapeTransport.IdleConnTimeout = stats.DefaultSampleInterval + time.Second
	scrapeClient := &http.Client{Timeout: cfg.ProbeTimeout, Transport: scrapeTransport}
	st := stats.New(routes, inflight{px.Inflight()}, scrapeClient, log)
	st.SetRouting(routing{bal})

	// Every answer must be written within SERVE_WRITE_TIMEOUT_S of the
	// request's start (httpx.Limits.Server) but the proxy's, which sets
	// its own (SERVING_TIMEOUT_S for streams), and those of the two
	// handlers that wait on engines for up to MCP_TIMEOUT_S first (the
	// MCP endpoint's may be streams).
	srv.Handle("/", root(px, ui.Handler(status)))
	srv.Handle("/mcp", httpx.NoWriteDeadline(endAtShutdown(srv.ShuttingDown(), ep)))
	srv.Handle("GET /stats.json", st.Handler())
	history := st.NewHistory(reg, 0, 0)
	srv.Handle("GET /stats/series.json", history.Handler())
	// The router owns this route: vLLM has none, and the engine's
	// /v1/responses/{id} pattern would answer 405.
	srv.Handle("POST /v1/responses/input_tokens", httpx.NoWriteDeadline(tokens.New(routes, cfg.MCPTimeout, &http.Client{Transport: proxy.NewTransport()}, up)))
	srv.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if fc != nil {
		st.SetFlow(fc)
	}
	if store != nil {
		// Usage per key: /stats.json's "keys" and the page's key charts.
		st.SetKeys(store)
		srv.Handle("GET /stats/keys/series.json", stats.KeysSeriesHandler(store))
	}
	// CORS goes last, so it runs first: a browser's preflight carries no
	// key, and must be answered before the keys are checked.
	if err := useCORS(srv, cfg.CORSOrigins); err != nil {
		return nil, err
	}
	return &App{Server: srv, Proxy: px, MCP: ep, Stats: st, History: history, Balancer: bal, Keys: store, Upstream: up, Flow: fc, log: log}, nil
}

// Run serves until ctx ends, then stops gracefully (serve.Server.Run) and
// returns. The background work (MCP, history, key reloads, engine loads,
// flow control) goes on until the server is done: a router that drains
// serves as usual.
func (a *App) Run(ctx context.Context) error {
	if path := a.Server.Config().IndexFile; path != "" {
		a.loadIndex(path)
		defer a.saveIndex(path)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	mcpDone := make(chan struct{})
	go func() {
		defer close(mcpDone)
		a.MCP.Run(bg)
	}()
	historyDone := make(chan struct{})
	go func() {
		defer close(historyDone)
		a.History.Run(bg)
	}()
	keysDone := make(chan struct{})
	go func() {
		defer close(keysDone)
		if a.Keys != nil {
			a.Keys.Run(bg)
		}
	}()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		var round func()
		if a.Flow != nil {
			round = a.Flow.Dispatch
		}
		a.Balancer.Watch(bg, a.Server.Routes(), engineLoad(a.Stats, a.Balancer.Config().ScrapeInterval), round)
	}()
	flowDone := make(chan struct{})
	go func() {
		defer close(flowDone)
		if a.Flow != nil {
			// Capacity other clients free reaches the waiting requests
			// within a tick; the router's own completions and each scrape
			// (Dispatch after the round) hand theirs on at once.
			a.Flow.Run(bg, FlowTick)
		}
	}()
	err := a.Server.Run(ctx)
	cancel()
	<-flowDone
	<-mcpDone
	<-historyDone
	<-loadDone
	<-keysDone
	a.MCP.Close()
	a.Proxy.Close()
	return err
}

// loadIndex reads the prefix index the router saved when it last stopped
// (ROUTING_INDEX_FILE). Whatever is wrong with the file, the router starts:
// the index only speeds prompts up, and it fills again as requests come.
func (a *App) loadIndex(path string) {
	info, err := a.Balancer.LoadIndexFile(path)
	switch {
	case err == nil:
		a.log.Info("routing_index_loaded", "file", path, "models", info.Models, "blocks", info.Blocks,
			"saved_ago", time.Since(info.Saved).Round(time.Second))
	case errors.Is(err, fs.ErrNotExist):
		a.log.Info("routing_index_absent", "file", path, "reason", "no index saved yet: it is written when the router stops")
	case errors.Is(err, balance.ErrIndexStale):
		a.log.Info("routing_index_not_loaded", "file", path, "reason", err.Error())
	default:
		a.log.Warn("routing_index_not_loaded", "file", path, "err", err)
	}
}

// saveIndex writes the prefix index for the next start, once every request
// has ended.
func (a *App) saveIndex(path string) {
	info, err := a.Balancer.SaveIndexFile(path)
	if err != nil {
		a.log.Warn("routing_index_save_failed", "file", path, "err", err)
		return
	}
	a.log.Info("routing_index_saved", "file", path, "models", info.Models, "blocks", info.Blocks)
}

// FlowTick is how often flow control looks for capacity that the router's
// own completions did not announce.
const FlowTick = 50 * time.Millisecond

// Reload reads the key files again (SIGHUP): the key store, which keeps
// its keys and logs keys_reload_failed when the file is broken, and the
// upstream keys, which keep theirs likewise.
func (a *App) Reload() {
	if a.Keys != nil {
		_ = a.Keys.Reload() // the store logs and counts a failure itself
	}
	if a.Upstream != nil {
		if err := a.Upstream.Reload(); err != nil {
			a.log.Warn("upstream_keys_reload_failed", "file", a.Upstream.Path(), "err", err, "kept", "the keys in force")
		} else {
			a.log.Info("upstream_keys_loaded", "file", a.Upstream.Path(), "groups", a.Upstream.Groups())
		}
	}
}

// useCORS puts httpx.CORS for origins (SERVE_CORS_ORIGINS) in front of
// every route and middleware added so far; no origins add nothing.
func useCORS(srv *serve.Server, origins []string) error {
	var err error
	srv.Use(func(next http.Handler) http.Handler {
		h, e := httpx.CORS(origins, next)
		if e != nil {
			err = fmt.Errorf("SERVE_CORS_ORIGINS: %w", e)
			return next
		}
		return h
	})
	return err
}

// endAtShutdown ends a GET /mcp, an MCP session's stream from server to
// client, once stop is done (the router has stopped accepting): it lasts
// until its client leaves, and would otherwise hold the stop for all of
// SERVE_SHUTDOWN_S. The client opens it again, through its balancer, on a
// router that runs. Other requests run on.
func endAtShutdown(stop context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(stop, cancel)()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// root serves what no specific route claims: any POST goes to the proxy
// (it routes by the body's model), GET / to the status page or document,
// anything else is a JSON 404/405 in the proxy's error shape.
func root(px http.Handler, page http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			px.ServeHTTP(w, r)
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Path == "/" && page != nil:
			page.ServeHTTP(w, r)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			proxy.WriteError(w, &proxy.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found",
				Message: "no route for GET " + r.URL.Path + "; try GET /v1/models, /status.json, /stats.json, /stats/series.json or POST with a model"})
		default:
			w.Header().Set("Allow", "GET, POST")
			proxy.WriteError(w, &proxy.Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
				Message: r.Method + " is not supported; the router takes POST requests with a model"})
		}
	})
}

// inflight adapts the proxy's registry to what the stats need.
type inflight struct{ in *proxy.Inflight }

func (f inflight) Requests() []stats.Request {
	rows := f.in.Snapshot()
	out := make([]stats.Request, len(rows))
	for i, r := range rows {
		out[i] = stats.Request{ID: r.ID, Model: r.Model, Group: r.Group, Started: r.Start, BodyBytes: r.BodyBytes,
			Stream: r.Stream, FirstByte: r.FirstByte, OutBytes: r.OutBytes}
	}
	return out
}

func (f inflight) Proxied(model, group string) int { return f.in.Count(model, group) }

// Main runs the router from the process environment until SIGINT or
// SIGTERM, stops gracefully (a second signal ends it at once) and returns
// the exit code: 0 on a clean stop, 1 when the configuration or a
// listener fails.
func Main(env envconf.Env, log *slog.Logger) int {
	env.Warn = func(name, value, reason string) {
		log.Warn("config_value_ignored", "var", name, "value", value, "reason", reason)
	}
	cfg, err := serve.LoadConfig(env)
	if err != nil {
		log.Error("config_failed", "err", err)
		return 1
	}
	a, err := New(cfg, log)
	if err != nil {
		log.Error("start_failed", "err", err)
		return 1
	}
	defer gcfloor.Auto().Stop()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The first signal starts the graceful stop; a second one gets the
	// signal's default action and ends the process at once (an operator's
	// second Ctrl-C).
	context.AfterFunc(ctx, stop)
	// SIGHUP reloads the key files; the store also reloads on change.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				a.Reload()
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Error("serve_failed", "err", err)
		return 1
	}
	return 0
}
