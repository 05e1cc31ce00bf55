package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// legacy is the newest protocol version with sessions.
const legacy = "2025-11-25"

// testUpstream is a management MCP server like enginesim's: tools
// engine_status, latency_percentiles and set_latency, answering with its
// own name so a test can tell which group a call reached.
type testUpstream struct {
	name   string
	server *sdk.Server
	http   *httptest.Server
	URL    string

	listHits  atomic.Int64 // tools/list requests
	initHits  atomic.Int64 // initialize and server/discover requests
	callHits  atomic.Int64
	cancelled atomic.Int64 // tool handlers that saw their context end

	mu       sync.Mutex
	hang     bool // set_latency blocks until cancelled
	listFail int  // answer this many tools/list with an error
	listNone int  // answer this many tools/list with no tools
	started  chan struct{}
}

func newUpstream(t *testing.T, name string) *testUpstream {
	t.Helper()
	u := &testUpstream{name: name, started: make(chan struct{}, 16)}
	u.server = sdk.NewServer(&sdk.Implementation{Name: "enginesim-" + name, Version: "test"}, nil)
	u.server.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			switch method {
			case "tools/list":
				u.listHits.Add(1)
				u.mu.Lock()
				fail, none := u.listFail > 0, u.listNone > 0 && u.listFail == 0
				if fail {
					u.listFail--
				} else if none {
					u.listNone--
				}
				u.mu.Unlock()
				if fail {
					return nil, fmt.Errorf("%s: status server not ready", u.name)
				}
				if none {
					return &sdk.ListToolsResult{Tools: []*sdk.Tool{}}, nil
				}
			case "initialize", "server/discover":
				u.initHits.Add(1)
			case "tools/call":
				u.callHits.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	yes := true
	u.server.AddTool(&sdk.Tool{
		Name:         "engine_status",
		Title:        "Engine status",
		Description:  "Reports the engine's state.",
		InputSchema:  map[string]any{"type": "object"},
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"engine": map[string]any{"type": "string"}}},
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &yes},
		Meta:         sdk.Meta{"example.com/kind": "status"},
	}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: "engine " + u.name + " running"}},
			StructuredContent: map[string]any{"engine": u.name},
		}, nil
	})
	// An input schema without "type", as some servers send it.
	u.server.AddTool(&sdk.Tool{
		Name:        "latency_percentiles",
		Description: "Latency percentiles over a window; reports progress while it samples.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"window_s":{"type":"number"}}}`),
	}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			for i := 1; i <= 3; i++ {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: u.name})
			}
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: u.name + " p50=10ms args=" + string(req.Params.Arguments)}}}, nil
	})
	u.server.AddTool(&sdk.Tool{
		Name:        "set_latency",
		Description: "Sets the simulated latency.",
		InputSchema: map[string]any{"type": "object"},
	}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		u.mu.Lock()
		hang := u.hang
		u.mu.Unlock()
		if hang {
			u.started <- struct{}{}
			<-ctx.Done()
			u.cancelled.Add(1)
			return nil, ctx.Err()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: u.name + " latency set"}}}, nil
	})
	u.http = httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return u.server }, nil))
	u.URL = u.http.URL + "/mcp"
	t.Cleanup(u.close)
	return u
}

func (u *testUpstream) close() {
	u.dropSessions()
	u.http.CloseClientConnections()
	u.http.Close()
}

// dropSessions makes the upstream forget every session, as a restarted or
// idle-reaping server does: the next request with an old id gets 404.
func (u *testUpstream) dropSessions() {
	for ss := range u.server.Sessions() {
		_ = ss.Close()
	}
}

func (u *testUpstream) set(f func(u *testUpstream)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

// router is an endpoint under test, served on 127.0.0.1:0 and refreshing.
type router struct {
	*Endpoint
	holder *routes.Holder
	http   *httptest.Server
	URL    string
}

func newRouter(t *testing.T, cfg Config, groups ...*routes.Group) *router {
	t.Helper()
	return newRouterWrapped(t, cfg, nil, groups...)
}

// newRouterWrapped serves the endpoint behind wrap (nil: none), as the
// router serves it behind its auth middleware.
func newRouterWrapped(t *testing.T, cfg Config, wrap func(http.Handler) http.Handler, groups ...*routes.Group) *router {
	t.Helper()
	r := &router{holder: &routes.Holder{}}
	r.setGroups(groups...)
	e, err := New(r.holder, cfg, func() any {
		s := r.holder.Load()
		return map[string]any{"groups": s.GroupNames(), "uptime_s": 1}
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	r.Endpoint = e
	var h http.Handler = e
	if wrap != nil {
		h = wrap(e)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	r.http = httptest.NewServer(mux)
	r.URL = r.http.URL + "/mcp"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		r.http.CloseClientConnections()
		r.http.Close()
		_ = e.Close()
	})
	return r
}

// testLogger is quiet unless TEST_LOG names a level (TEST_LOG=debug).
func testLogger() *slog.Logger {
	if lvl := os.Getenv("TEST_LOG"); lvl != "" {
		return logx.New(os.Stderr, logx.ParseLevel(lvl))
	}
	return logx.Discard()
}

func (r *router) setGroups(groups ...*routes.Group) {
	m := map[string]*routes.Group{}
	for _, g := range groups {
		m[g.Name] = g
	}
	r.holder.Store(routes.New(time.Now(), nil, m, nil))
}

func group(name, mcpURL string, healthy bool) *routes.Group {
	g := &routes.Group{Name: name, MCP: mcpURL, Healthy: healthy}
	if mcpURL != "" {
		g.MCPCandidates = []string{mcpURL}
	}
	if !healthy {
		g.WhyNot = "endpoint probe failed: connection refused"
	}
	return g
}

// clientOpts are what a test client listens for.
type clientOpts struct {
	version     string
	key         string // sent as Authorization: Bearer <key>
	listChanged chan struct{}
	progress    chan *sdk.ProgressNotificationParams
	reconnect   bool // the SDK's default retries of a broken stream (else none)
}

// connect opens a Go SDK client session to url.
func connect(t *testing.T, url string, o clientOpts) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{}
	if o.listChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case o.listChanged <- struct{}{}:
			default:
			}
		}
	}
	if o.progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			select {
			case o.progress <- req.Params:
			default:
			}
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	hc := &http.Client{Transport: tr}
	if o.key != "" {
		hc.Transport = bearer{key: o.key, next: tr}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var so *sdk.ClientSessionOptions
	if o.version != "" {
		so = &sdk.ClientSessionOptions{ProtocolVersion: o.version}
	}
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, so)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		tr.CloseIdleConnections()
	})
	return cs
}

// bearer sends every request with an API key.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func resultText(res *sdk.CallToolResult) string {
	if res == nil {
		return "<no result>"
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// eventually polls cond until it holds or the generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
