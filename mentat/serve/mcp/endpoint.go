// Package mcp is the router's merged MCP endpoint (/mcp): every group's
// management MCP server behind one Streamable HTTP endpoint, tools named
// <group>__<tool>, plus the native serve_status tool.
//
// The merge skips the admission gate: a group's tools are listed and called
// through its announced MCP URL whether or not its OpenAI endpoint is
// healthy, because a status server matters most while its engine is loading
// or wedged.
//
// Lifecycle: New builds the endpoint (an http.Handler); Run keeps the
// merged tool set in step with the route snapshots and upstream answers
// until its context ends; Close ends client sessions and upstream sessions.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Config tunes the endpoint. A zero field takes its default.
type Config struct {
	// ToolsTTL is how long one group's tools/list answer is kept before the
	// group is asked again (TOOLS_TTL_S). Default 60s. A failed or empty
	// answer is not kept: the group is asked again after RetryInterval.
	ToolsTTL time.Duration
	// CallTimeout bounds one forwarded MCP request: a tools/call, or the
	// tools/list that refreshes a group (MCP_TIMEOUT_S). Default 180s.
	CallTimeout time.Duration
	// AllowedOrigins lists browser origins ("https://ops.example:8443")
	// allowed to use the endpoint besides loopback ones and, for a router
	// reached by IP address, its own origin. Nil allows only those.
	AllowedOrigins []string
	// SessionTimeout closes this router's local copy of a 2025-era client
	// session that has sent it no request for this long (an open GET
	// stream does not count, and ends with it). Default 30m. The session
	// itself goes on: its next request rebuilds the local copy.
	SessionTimeout time.Duration
	// SessionKeys seal and open the session ids clients hold (seal.go):
	// the first seals, every one opens; each at least MinSessionKeyBytes
	// (MENTAT_SESSION_KEY_FILE, read by LoadSessionKeys). Nil: New makes
	// a random key, so a session continues on this endpoint only.
	SessionKeys [][]byte
	// SessionMaxAge is a session's absolute lifetime from its initialize
	// (MCP_SESSION_MAX_S), after which its id is answered 404 on every
	// router. An id is also refused once older than this endpoint's
	// SessionMaxAge, whatever the router that sealed it set. Default 24h.
	SessionMaxAge time.Duration
	// MaxSessions bounds the local sessions this endpoint holds. A new
	// one past it evicts the least recently used idle one (rebuilt on its
	// next request); when every one is in use, it is refused. Default
	// 10000 (more than the router's default connection cap).
	MaxSessions int
	// ConnectTimeout bounds connecting to one upstream (the MCP handshake).
	// Default 10s, capped at CallTimeout.
	ConnectTimeout time.Duration
	// RetryInterval is the first wait before asking again a group whose
	// tools/list failed or came back empty; it doubles up to ToolsTTL.
	// Default 1s.
	RetryInterval time.Duration
	// SnapshotPoll is how often Run looks for a new route snapshot.
	// Default 500ms.
	SnapshotPoll time.Duration
	// ListWait bounds how long a tools/list waits for groups that were
	// never asked yet (a group that just appeared), so a client connecting
	// right after discovery still sees their tools. Default 3s.
	ListWait time.Duration
}

// Defaults.
const (
	DefaultToolsTTL       = 60 * time.Second
	DefaultCallTimeout    = 180 * time.Second
	DefaultSessionTimeout = 30 * time.Minute
	DefaultSessionMaxAge  = 24 * time.Hour
	DefaultMaxSessions    = 10000
	DefaultConnectTimeout = 10 * time.Second
	DefaultRetryInterval  = time.Second
	DefaultSnapshotPoll   = 500 * time.Millisecond
	DefaultListWait       = 3 * time.Second
)

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&c.ToolsTTL, DefaultToolsTTL)
	set(&c.CallTimeout, DefaultCallTimeout)
	set(&c.SessionTimeout, DefaultSessionTimeout)
	set(&c.ConnectTimeout, DefaultConnectTimeout)
	set(&c.RetryInterval, DefaultRetryInterval)
	set(&c.SnapshotPoll, DefaultSnapshotPoll)
	set(&c.ListWait, DefaultListWait)
	set(&c.SessionMaxAge, DefaultSessionMaxAge)
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	c.ConnectTimeout = min(c.ConnectTimeout, c.CallTimeout)
	c.RetryInterval = min(c.RetryInterval, c.ToolsTTL)
	return c
}

// Endpoint is the merged MCP endpoint. It is an http.Handler for /mcp.
type Endpoint struct {
	cfg     Config
	logger  *slog.Logger
	src     routes.Source
	status  func() any
	origins *originPolicy

	server *sdk.Server
	// stateful is the SDK's stateful handler, behind the session layer
	// (session.go), which also rebuilds sessions through it.
	stateful http.Handler
	handler  http.Handler
	pool     *pool

	// table resolves merged names; replaced whole by the refresh loop.
	table atomic.Pointer[nameTable]
	// callable holds the merged names the SDK server has registered. The
	// table is published before the tools are added (so that a scoped
	// tools/list, sent on the SDK's list_changed, keeps them), which
	// leaves a moment where a name is in the table but not yet on the
	// server; a tools/call is let through to the SDK only for a name in
	// this set, else the SDK would answer a bare "unknown tool".
	callable atomic.Pointer[map[string]bool]
	// view tells tools/list which groups have had their first answer.
	view atomic.Pointer[settledView]
	// wake pokes the refresh loop (capacity 1: a burst is one signal).
	wake chan struct{}
	// stale holds upstream URLs that announced a tools change.
	staleMu sync.Mutex
	stale   map[string]bool

	// sealer seals and opens the session ids clients hold (seal.go).
	sealer *sealer
	// sessions maps them to local sessions (session.go).
	sessions *sessionTable

	running   atomic.Bool
	closeOnce sync.Once
}

// New builds the endpoint. status returns the /status.json document that
// serve_status reports; it must be safe to call from any goroutine.
func New(src routes.Source, cfg Config, status func() any, logger *slog.Logger) (*Endpoint, error) {
	if src == nil {
		return nil, errors.New("mcp: a route source is required")
	}
	if status == nil {
		return nil, errors.New("mcp: a status document func is required")
	}
	if logger == nil {
		logger = logx.Discard()
	}
	cfg = cfg.withDefaults()
	origins, err := newOriginPolicy(cfg.AllowedOrigins)
	if err != nil {
		return nil, err
	}
	sealer, err := newSealer(cfg.SessionKeys)
	if err != nil {
		return nil, err
	}
	if len(cfg.SessionKeys) == 0 {
		logger.Info("mcp_session_key_random", "effect", "MCP sessions continue on this router only, and not across its restart",
			"advice", "give every router behind one balancer the same MENTAT_SESSION_KEY_FILE")
	}
	e := &Endpoint{
		cfg:      cfg,
		logger:   logger,
		src:      src,
		status:   status,
		origins:  origins,
		wake:     make(chan struct{}, 1),
		stale:    map[string]bool{},
		sealer:   sealer,
		sessions: newSessionTable(cfg.MaxSessions),
	}
	e.table.Store(buildNames(nil, nativeTools...))
	e.callable.Store(&map[string]bool{})
	e.view.Store(&settledView{settled: map[string]string{}, next: make(chan struct{})})
	e.pool = newPool(logger, cfg.ConnectTimeout, e.upstreamListChanged)

	e.server = sdk.NewServer(&sdk.Implementation{Name: "mentatd-serve", Title: "mentat router", Version: version.Version}, &sdk.ServerOptions{
		Instructions: "Management tools of every model group this router knows, named <group>__<tool>, " +
			"plus serve_status (the router's own view: daemons, groups, models).",
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		SetCacheable: func(ctx context.Context, req sdk.Request, c *sdk.Cacheable) {
			// Without keys every client sees the same merged list, which
			// changes at the earliest when a group's cached answer
			// expires; with a key the list is the key's own.
			c.TTLMs = int(cfg.ToolsTTL / time.Millisecond)
			c.CacheScope = "public"
			if e.requestKey(ctx, req) != nil {
				c.CacheScope = "private"
			}
		},
	})
	e.addNativeTools()
	e.server.AddReceivingMiddleware(e.middleware)
	var stateless http.Handler
	e.stateful, stateless = newSDKHandlers(e.server, cfg.SessionTimeout, logger)
	e.handler = e.origins.wrap(&dispatcher{stateful: e.sessionLayer(e.stateful), stateless: stateless})
	return e, nil
}

// ServeHTTP serves /mcp.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) }

// Close ends every client session and every upstream session. Call it after
// Run has returned and the HTTP server has stopped serving the endpoint.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		for ss := range e.server.Sessions() {
			_ = ss.Close()
		}
		e.pool.close()
	})
	return nil
}

// middleware answers tools/list, and a tools/call of a name it does not
// know, only once groups that just appeared had their first chance to
// answer, and answers a tools/call for a name that is not (or no longer)
// in the merged set with a tool error that says why,
// instead of the SDK's bare "unknown tool" protocol error. With a key it
// keeps both to the key's scope (scope.go). An initialize enters the
// session table (session.go).
func (e *Endpoint) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch method {
		case "initialize":
			if init, ok := req.(*sdk.ServerRequest[*sdk.InitializeParams]); ok {
				if err := e.trackSession(init); err != nil {
					return nil, err
				}
			}
		case "tools/list":
			e.awaitFirstAnswers(ctx)
			k := e.requestKey(ctx, req)
			res, err := next(ctx, method, req)
			if list, ok := res.(*sdk.ListToolsResult); ok && err == nil {
				e.filterTools(k, list)
			}
			return res, err
		case "tools/call":
			call, ok := req.(*sdk.CallToolRequest)
			if !ok || call.Params == nil {
				break
			}
			native := isNative(call.Params.Name)
			if !native && !e.isCallable(call.Params.Name) {
				// A router that just started (or that a session just
				// moved to) may not have asked its groups yet.
				e.awaitFirstAnswers(ctx)
			}
			k := e.requestKey(ctx, req)
			if !e.toolInScope(k, e.src.Load(), call.Params.Name) {
				return complete(call, e.unknownTool(k, call.Params.Name)), nil
			}
			if !native && !e.isCallable(call.Params.Name) {
				return complete(call, e.unknownTool(k, call.Params.Name)), nil
			}
		}
		return next(ctx, method, req)
	}
}

// isCallable reports whether the SDK server has the merged tool name.
func (e *Endpoint) isCallable(name string) bool { return (*e.callable.Load())[name] }

// poke wakes the refresh loop without blocking.
func (e *Endpoint) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Endpoint) upstreamListChanged(url string) {
	e.staleMu.Lock()
	e.stale[url] = true
	e.staleMu.Unlock()
	e.poke()
}

func (e *Endpoint) takeStale() map[string]bool {
	e.staleMu.Lock()
	defer e.staleMu.Unlock()
	if len(e.stale) == 0 {
		return nil
	}
	s := e.stale
	e.stale = map[string]bool{}
	return s
}

// settledView is published by the refresh loop after each change: which
// group had an answer (or a failure) from which URL. next is closed when a
// newer view replaces it.
type settledView struct {
	settled map[string]string
	next    chan struct{}
}

// awaitFirstAnswers waits, up to ListWait, until every group of the current
// snapshot with an MCP URL has been asked at least once.
func (e *Endpoint) awaitFirstAnswers(ctx context.Context) {
	if !e.running.Load() {
		return
	}
	timer := time.NewTimer(e.cfg.ListWait)
	defer timer.Stop()
	e.poke()
	for {
		v := e.view.Load()
		if !pendingGroups(e.src.Load(), v) {
			return
		}
		select {
		case <-v.next:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func pendingGroups(snap *routes.Snapshot, v *settledView) bool {
	for name, g := range snap.Groups {
		if url := mcpURL(g); url != "" && v.settled[name] != url {
			return true
		}
	}
	return false
}

// mcpURL is the group's management MCP URL: the candidate in use, else the
// best candidate (the merge does not wait for admission).
func mcpURL(g *routes.Group) string {
	if g == nil {
		return ""
	}
	if g.MCP != "" {
		return g.MCP
	}
	if len(g.MCPCandidates) > 0 {
		return g.MCPCandidates[0]
	}
	return ""
}

// errorResult is a tool result that reports a failure to the model.
func errorResult(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{
		IsError: true,
		Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}},
	}
}
