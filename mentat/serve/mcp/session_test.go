package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// sessionKey is a fresh random session key.
func sessionKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, MinSessionKeyBytes)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// counted counts the requests a router serves, by method.
type counted struct {
	mu   sync.Mutex
	seen map[string]int // "POST", "GET", "DELETE"
}

func (c *counted) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		if c.seen == nil {
			c.seen = map[string]int{}
		}
		c.seen[r.Method]++
		c.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (c *counted) n(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[method]
}

// cluster is two routers over the same upstreams and session key, as two
// routers behind one balancer are.
type cluster struct {
	a, b   *router
	ca, cb *counted
	groups []*routes.Group
}

func newCluster(t *testing.T, cfg Config, wrap func(http.Handler) http.Handler) *cluster {
	t.Helper()
	up1, up2 := newUpstream(t, "alpha"), newUpstream(t, "beta")
	groups := []*routes.Group{modelGroup("alpha", up1.URL, "alpha-7b"), modelGroup("beta", up2.URL, "beta-1b")}
	if cfg.SessionKeys == nil {
		cfg.SessionKeys = [][]byte{sessionKey(t)}
	}
	c := &cluster{ca: &counted{}, cb: &counted{}, groups: groups}
	chain := func(cnt *counted) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			if wrap != nil {
				h = wrap(h)
			}
			return cnt.wrap(h)
		}
	}
	c.a = newRouterWrapped(t, cfg, chain(c.ca), groups...)
	c.b = newRouterWrapped(t, cfg, chain(c.cb), groups...)
	return c
}

// balancer sends each request to the router pick chooses, as a balancer
// in front of several routers does.
type balancer struct {
	next http.RoundTripper
	pick func(r *http.Request) string // the router's /mcp URL
}

func (b *balancer) RoundTrip(r *http.Request) (*http.Response, error) {
	to, err := url.Parse(b.pick(r))
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = to.Scheme, to.Host, to.Host
	return b.next.RoundTrip(r)
}

// connectVia opens an SDK client session through a balancer.
func connectVia(t *testing.T, pick func(*http.Request) string, o clientOpts) *sdk.ClientSession {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = &balancer{next: tr, pick: pick}
	if o.key != "" {
		rt = bearer{key: o.key, next: rt}
	}
	opts := &sdk.ClientOptions{}
	if o.listChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case o.listChanged <- struct{}{}:
			default:
			}
		}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, opts)
	version := o.version
	if version == "" {
		version = legacy
	}
	retries := -1
	if o.reconnect {
		retries = 0
	}
	cs, err := c.Connect(ctxT(t), &sdk.StreamableClientTransport{Endpoint: "http://balancer.invalid/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: retries},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func localSessions(r *router) []*sdk.ServerSession {
	var out []*sdk.ServerSession
	for ss := range r.server.Sessions() {
		if ss.ID() != "" {
			out = append(out, ss)
		}
	}
	return out
}

// rawRequest sends one request on session id ("" none) with key ("" none)
// and returns the status, the session header of the answer and its body.
func rawRequest(t *testing.T, method, url, id, key, body string) (int, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(t), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if method == http.MethodGet {
		req.Header.Set("Accept", "text/event-stream")
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", legacy)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	if method == http.MethodGet && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "", "" // the GET stream stays open
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

// modernPost sends one 2026-07-28 request (method, with the params' _meta
// the protocol wants) with extra headers, and returns status, session
// header and body.
func modernPost(t *testing.T, url string, id int, method string, extra map[string]string) (int, string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",`+
		`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`, id, method)
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

const (
	rawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"7"}}}`
	rawInitalized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	rawList       = `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
)

// openRaw initializes a session on url with key and returns its id.
func openRaw(t *testing.T, url, key string) string {
	t.Helper()
	code, id, body := rawRequest(t, http.MethodPost, url, "", key, rawInitialize)
	if code != http.StatusOK || id == "" {
		t.Fatalf("initialize on %s: %d %q %s", url, code, id, body)
	}
	if code, _, body := rawRequest(t, http.MethodPost, url, id, key, rawInitalized); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	return id
}

// The client opens its session on router A; every later request (the
// initialized notification, the GET stream, tools/list, tools/call and
// the DELETE) lands on router B.
func TestSessionContinuesOnAnotherRouter(t *testing.T) {
	c := newCluster(t, Config{SnapshotPoll: 50 * time.Millisecond}, nil)
	pick := func(r *http.Request) string {
		if r.Header.Get("Mcp-Session-Id") == "" {
			return c.a.URL
		}
		return c.b.URL
	}
	changed := make(chan struct{}, 1)
	cs := connectVia(t, pick, clientOpts{listChanged: changed})
	id := cs.ID()
	for _, ch := range id {
		if ch < 0x21 || ch > 0x7e {
			t.Fatalf("session id %q has a character that is not visible ASCII", id)
		}
	}
	for _, ss := range append(localSessions(c.a), localSessions(c.b)...) {
		if ss.ID() == id {
			t.Fatal("the client holds the SDK's local session id")
		}
	}
	want := []string{
		"alpha__engine_status", "alpha__latency_percentiles", "alpha__set_latency",
		"beta__engine_status", "beta__latency_percentiles", "beta__set_latency", "serve_status",
	}
	if got := toolNames(t, cs); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools/list on B = %v", got)
	}
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "beta__engine_status"})
	if err != nil || res.IsError || resultText(res) != "engine beta running" {
		t.Fatalf("tools/call on B: %v %q", err, resultText(res))
	}
	eventually(t, "the GET stream on B", func() bool { return c.cb.n(http.MethodGet) >= 1 })
	if got := len(localSessions(c.b)); got != 1 {
		t.Fatalf("B holds %d local sessions, want the one it rebuilt", got)
	}
	// The GET stream is B's: a change of B's tool set reaches the client
	// through it.
	c.b.setGroups(c.groups[0])
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no list_changed on the GET stream held by B")
	}
	if got := c.ca.n(http.MethodPost); got != 1 {
		t.Errorf("A served %d POSTs, want only the initialize", got)
	}
	if c.ca.n(http.MethodGet) != 0 {
		t.Error("A served a GET")
	}

	if err := cs.Close(); err != nil {
		t.Fatalf("close (DELETE on B): %v", err)
	}
	if c.cb.n(http.MethodDelete) != 1 {
		t.Fatalf("B served %d DELETEs", c.cb.n(http.MethodDelete))
	}
	eventually(t, "B's local copy closed", func() bool { return len(localSessions(c.b)) == 0 })
	// B refuses the id from now on; A, which never heard of the DELETE,
	// still serves it (its own local copy).
	if code, _, body := rawRequest(t, http.MethodPost, c.b.URL, id, "", rawList); code != http.StatusNotFound || body != "session not found\n" {
		t.Errorf("B after the DELETE: %d %q, want 404", code, body)
	}
	if code, _, _ := rawRequest(t, http.MethodPost, c.a.URL, id, "", rawList); code != http.StatusOK {
		t.Errorf("A after B's DELETE: %d, want 200 (DELETE is per router)", code)
	}
}

// A DELETE on a router that holds no copy of the session ends it there
// all the same; the router that opened it still serves it.
func TestDeleteWithoutLocalCopy(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	id := openRaw(t, c.a.URL, "")
	if code, _, body := rawRequest(t, http.MethodDelete, c.b.URL, id, "", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on B: %d %s", code, body)
	}
	if code, _, _ := rawRequest(t, http.MethodPost, c.b.URL, id, "", rawList); code != http.StatusNotFound {
		t.Fatalf("B after its DELETE: %d", code)
	}
	if code, _, _ := rawRequest(t, http.MethodGet, c.b.URL, id, "", ""); code != http.StatusNotFound {
		t.Fatalf("GET on B after its DELETE: %d", code)
	}
	if n := len(localSessions(c.b)); n != 0 {
		t.Fatalf("B made %d sessions for a DELETE", n)
	}
	if code, _, _ := rawRequest(t, http.MethodPost, c.a.URL, id, "", rawList); code != http.StatusOK {
		t.Fatalf("A after B's DELETE: %d", code)
	}
}

// Every request goes to the other router than the one before.
func TestSessionAlternatingRouters(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	var n atomic.Int64
	pick := func(*http.Request) string {
		if n.Add(1)%2 == 1 {
			return c.a.URL
		}
		return c.b.URL
	}
	cs := connectVia(t, pick, clientOpts{})
	for i := range 6 {
		if got := len(toolNames(t, cs)); got != 7 {
			t.Fatalf("tools/list %d: %d tools", i, got)
		}
		res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__latency_percentiles", Arguments: map[string]any{"window_s": i}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call %d: %v %q", i, err, resultText(res))
		}
	}
	if len(localSessions(c.a)) != 1 || len(localSessions(c.b)) != 1 {
		t.Fatalf("local sessions: A %d, B %d; want one each", len(localSessions(c.a)), len(localSessions(c.b)))
	}
	if c.ca.n(http.MethodPost) < 3 || c.cb.n(http.MethodPost) < 3 {
		t.Fatalf("POSTs: A %d, B %d", c.ca.n(http.MethodPost), c.cb.n(http.MethodPost))
	}
}

// The rebuilt session is the client's: the protocol version it asked for,
// its clientInfo and capabilities.
func TestRebuiltSessionKeepsInitializeParams(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	id := openRaw(t, c.a.URL, "")
	if code, _, body := rawRequest(t, http.MethodPost, c.b.URL, id, "", rawList); code != http.StatusOK || !strings.Contains(body, "alpha__engine_status") {
		t.Fatalf("tools/list on B: %d %s", code, body)
	}
	ss := localSessions(c.b)
	if len(ss) != 1 {
		t.Fatalf("B holds %d sessions", len(ss))
	}
	p := ss[0].InitializeParams()
	if p.ProtocolVersion != "2025-06-18" || p.ClientInfo == nil || p.ClientInfo.Name != "raw" || p.ClientInfo.Version != "7" ||
		p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		t.Fatalf("rebuilt with %+v %+v %+v", p, p.ClientInfo, p.Capabilities)
	}
}

// A router that restarts (a new endpoint with the same key) continues the
// sessions the old one opened.
func TestSessionSurvivesRestart(t *testing.T) {
	a := newUpstream(t, "alpha")
	cfg := Config{SessionKeys: [][]byte{sessionKey(t)}}
	var target atomic.Pointer[string]
	first := newRouter(t, cfg, group("alpha", a.URL, true))
	target.Store(&first.URL)
	// The client's GET stream ends with the first router; the SDK client
	// opens it again (on the second) only with retries.
	cs := connectVia(t, func(*http.Request) string { return *target.Load() }, clientOpts{reconnect: true})
	if got := len(toolNames(t, cs)); got != 4 {
		t.Fatalf("before the restart: %d tools", got)
	}
	first.http.CloseClientConnections()
	first.http.Close()
	_ = first.Close()
	second := newRouter(t, cfg, group("alpha", a.URL, true))
	target.Store(&second.URL)
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
	if err != nil {
		t.Fatalf("call after the restart: %v", err)
	}
	if res.IsError || resultText(res) != "engine alpha running" {
		t.Fatalf("call after the restart: %q", resultText(res))
	}
	if got := len(localSessions(second)); got != 1 {
		t.Fatalf("the new router holds %d sessions", got)
	}
}

// Concurrent first requests for one id on a router that does not hold it
// rebuild it once.
func TestConcurrentFirstUseRebuildsOnce(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	var inits atomic.Int64
	c.b.server.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "initialize" {
				inits.Add(1)
				time.Sleep(20 * time.Millisecond) // widen the window
			}
			return next(ctx, method, req)
		}
	})
	id := openRaw(t, c.a.URL, "")
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}`, 10+i)
			codes[i], _, _ = rawRequest(t, http.MethodPost, c.b.URL, id, "", body)
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Errorf("request %d: %d", i, code)
		}
	}
	if n := inits.Load(); n != 1 {
		t.Fatalf("B ran %d initializes, want 1", n)
	}
	if n := len(localSessions(c.b)); n != 1 {
		t.Fatalf("B holds %d sessions", n)
	}
}

// Ids that were not sealed for this request are all answered as an
// unknown session, and reach no session.
func TestSessionIDRefused(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	other := newRouter(t, Config{SessionKeys: [][]byte{sessionKey(t)}}, c.groups...)
	good := openRaw(t, c.a.URL, "")
	foreign := openRaw(t, other.URL, "")
	_, _, unknown := rawRequest(t, http.MethodPost, c.b.URL, "no-such-session", "", rawList)
	if unknown != "session not found\n" {
		t.Fatalf("unknown session answered %q", unknown)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	flip := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(b)
	}
	random := make([]byte, len(raw))
	_, _ = rand.Read(random)
	random[0] = sealVersion
	now := time.Now()
	expired := c.a.sealer.seal(&sessionClaims{issued: now.Add(-2 * time.Hour), expires: now.Add(-time.Hour), params: []byte(`{"protocolVersion":""}`)}, "")
	tooOld := c.a.sealer.seal(&sessionClaims{issued: now.Add(-DefaultSessionMaxAge - time.Minute), expires: now.Add(time.Hour), params: []byte(`{"protocolVersion":""}`)}, "")
	forKey := c.a.sealer.seal(&sessionClaims{issued: now, expires: now.Add(time.Hour), params: []byte(`{"protocolVersion":""}`)}, "team-a")
	notObject := c.a.sealer.seal(&sessionClaims{issued: now, expires: now.Add(time.Hour), params: []byte(`[1]`)}, "")
	cases := map[string]string{
		"random text":          "Zm9vYmFy",
		"random bytes":         base64.RawURLEncoding.EncodeToString(random),
		"flipped version":      flip(0),
		"flipped nonce":        flip(5),
		"flipped ciphertext":   flip(40),
		"flipped tag":          flip(len(raw) - 1),
		"truncated":            good[:len(good)-4],
		"padded":               good + "=",
		"another session key":  foreign,
		"expired":              expired,
		"older than max age":   tooOld,
		"sealed for a key":     forKey,
		"params not an object": notObject,
		"too long":             good + strings.Repeat("A", maxSealedID),
	}
	for name, id := range cases {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			body := ""
			if method == http.MethodPost {
				body = rawList
			}
			code, sid, got := rawRequest(t, method, c.b.URL, id, "", body)
			if code != http.StatusNotFound || got != unknown || sid != "" {
				t.Errorf("%s, %s: %d %q %q, want 404 %q", name, method, code, sid, got, unknown)
			}
		}
	}
	if n := len(localSessions(c.b)); n != 0 {
		t.Fatalf("refused ids made %d sessions on B", n)
	}
	// The refused DELETEs ended nothing.
	if code, _, _ := rawRequest(t, http.MethodPost, c.b.URL, good, "", rawList); code != http.StatusOK {
		t.Fatalf("the good id after the refusals: %d", code)
	}
}

// With keys, a session opened with one key on router A is refused on
// router B with another key or none, and its owner continues it there.
func TestSessionKeyAcrossRouters(t *testing.T) {
	kf := newKeyFile(t, map[string][]string{"team-a": {"alpha-*"}}, "team-a", "ops")
	c := newCluster(t, Config{}, kf.auth)
	id := openRaw(t, c.a.URL, kf.secrets["team-a"])
	keysOff := openRaw(t, newRouter(t, Config{SessionKeys: c.a.cfg.SessionKeys}, c.groups...).URL, "")
	for _, tc := range []struct{ name, id, key string }{
		{"another key", id, kf.secrets["ops"]},
		{"no key", id, ""},
		{"an id sealed with keys off, used with a key", keysOff, kf.secrets["ops"]},
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			body := ""
			if method == http.MethodPost {
				body = rawList
			}
			if code, _, got := rawRequest(t, method, c.b.URL, tc.id, tc.key, body); code != http.StatusNotFound || got != "session not found\n" {
				t.Errorf("%s, %s: %d %q", tc.name, method, code, got)
			}
		}
	}
	if n := len(localSessions(c.b)); n != 0 {
		t.Fatalf("refused requests made %d sessions on B", n)
	}
	code, _, body := rawRequest(t, http.MethodPost, c.b.URL, id, kf.secrets["team-a"], rawList)
	if code != http.StatusOK || !strings.Contains(body, "alpha__engine_status") || strings.Contains(body, "beta__") {
		t.Fatalf("team-a on B: %d %s", code, body)
	}
}

// The idle timeout and eviction drop only the local copy; the sealed
// id's lifetime ends the session everywhere.
func TestLocalCopyReapedAndEvicted(t *testing.T) {
	t.Run("evicted", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		r := newRouter(t, Config{MaxSessions: 2}, group("alpha", a.URL, true))
		ids := []string{openRaw(t, r.URL, ""), openRaw(t, r.URL, ""), openRaw(t, r.URL, "")}
		eventually(t, "the least recently used session evicted", func() bool { return len(localSessions(r)) == 2 })
		for i, id := range ids {
			if code, _, _ := rawRequest(t, http.MethodPost, r.URL, id, "", rawList); code != http.StatusOK {
				t.Fatalf("session %d after eviction: %d", i, code)
			}
		}
		eventually(t, "two local sessions", func() bool { return len(localSessions(r)) == 2 })
	})
	t.Run("in use is not evicted", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		r := newRouter(t, Config{MaxSessions: 1}, group("alpha", a.URL, true))
		id := openRaw(t, r.URL, "")
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", legacy)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET stream: %v %v", err, resp)
		}
		defer resp.Body.Close()
		code, _, body := rawRequest(t, http.MethodPost, r.URL, "", "", rawInitialize)
		if code != http.StatusOK || !strings.Contains(body, "every MCP session this router holds is in use") {
			t.Fatalf("initialize with the only session streaming: %d %s", code, body)
		}
		if n := len(localSessions(r)); n != 1 {
			t.Fatalf("%d local sessions", n)
		}
	})
	t.Run("expired", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		r := newRouter(t, Config{SessionMaxAge: 1500 * time.Millisecond}, group("alpha", a.URL, true))
		id := openRaw(t, r.URL, "")
		eventually(t, "the local copy closed at expiry", func() bool { return len(localSessions(r)) == 0 })
		if code, _, _ := rawRequest(t, http.MethodPost, r.URL, id, "", rawList); code != http.StatusNotFound {
			t.Fatalf("expired id: %d", code)
		}
	})
}

// Two routers over the same upstreams answer tools/list with the same
// bytes, in both eras.
func TestToolsListIdenticalAcrossRouters(t *testing.T) {
	c := newCluster(t, Config{}, nil)
	list := func(r *router) string {
		id := openRaw(t, r.URL, "")
		code, _, body := rawRequest(t, http.MethodPost, r.URL, id, "", rawList)
		if code != http.StatusOK {
			t.Fatalf("tools/list: %d %s", code, body)
		}
		return body
	}
	stateless := func(r *router) string {
		code, _, body := modernPost(t, r.URL, 3, "tools/list", nil)
		if code != http.StatusOK {
			t.Fatalf("2026 tools/list: %d %s", code, body)
		}
		return body
	}
	a, b := list(c.a), list(c.b)
	if a != b || !strings.Contains(a, "beta__set_latency") {
		t.Fatalf("tools/list differs between routers:\nA %s\nB %s", a, b)
	}
	if a2 := list(c.a); a2 != a {
		t.Fatalf("tools/list differs between two answers of A:\n%s\n%s", a, a2)
	}
	if a, b := stateless(c.a), stateless(c.b); a != b || !strings.Contains(a, "beta__set_latency") {
		t.Fatalf("2026 tools/list differs between routers:\nA %s\nB %s", a, b)
	}
}

// A 2026-07-28 request that carries a session header anyway is served
// statelessly, as before: the session layer never sees it.
func TestModernRequestIgnoresSessionHeader(t *testing.T) {
	r := newRouter(t, Config{})
	code, sid, body := modernPost(t, r.URL, 1, "server/discover", map[string]string{"Mcp-Session-Id": "not-a-sealed-id"})
	if code != http.StatusOK || sid != "" || !strings.Contains(body, `"result"`) {
		t.Fatalf("2026 request with a session header: %d %q %s", code, sid, body)
	}
}
