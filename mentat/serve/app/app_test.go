package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/serve"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testproc.IgnoreRSTAvoidance) }

// startApp runs the whole router on loopback with no daemons: every route
// is mounted, nothing is routable.
func startApp(t *testing.T) string { return startAppWith(t, nil) }

// startAppWith runs the router configured from env (the process
// environment the binary would read).
func startAppWith(t *testing.T, env map[string]string) string { return runApp(t, env).base }

// running is a router a test may stop itself: stop starts the stop, as
// SIGTERM does, and finished is closed once Run has returned err.
type running struct {
	base     string
	stop     context.CancelFunc
	finished chan struct{}
	err      error
}

// runApp is startAppWith, with the router's stop in the test's hands. A
// stop drains for 10 ms unless env sets SERVE_DRAIN_S.
func runApp(t *testing.T, env map[string]string) *running {
	t.Helper()
	cfg, err := serve.LoadConfig(envconf.Map(env))
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr, cfg.Daemons, cfg.AnnouncePort, cfg.AnnounceAddr = "127.0.0.1:0", []string{}, 0, ""
	if _, set := env["SERVE_DRAIN_S"]; !set {
		cfg.Drain = 10 * time.Millisecond // no balancer to wait for
	}
	a, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Server.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{base: "http://" + a.Server.Addr().String(), stop: cancel, finished: make(chan struct{})}
	go func() {
		r.err = a.Run(ctx)
		close(r.finished)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.finished:
		case <-time.After(20 * time.Second):
			t.Error("router did not stop")
		}
	})
	return r
}

func get(t *testing.T, method, url, accept, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// mcpDo sends method to base's /mcp as a client of protocol version
// would, with session's id when it is not empty, and returns the answer
// with its body unread.
func mcpDo(t *testing.T, base, method, session, version, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Accept", "application/json, text/event-stream")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s /mcp: %v", method, err)
	}
	return resp
}

func TestRoutesAreMounted(t *testing.T) {
	base := startApp(t)
	resp, body := get(t, "GET", base+"/", "text/html,application/xhtml+xml", "")
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "stats.json") {
		t.Fatalf("GET / for a browser: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	resp, body = get(t, "GET", base+"/", "", "")
	var doc map[string]any
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc["uptime_s"] == nil || doc["groups"] == nil {
		t.Fatalf("GET / for a script: %d %s", resp.StatusCode, body)
	}
	for path, want := range map[string]string{
		"/stats.json":        `"models"`,
		"/stats/series.json": `"interval_s":2,"window_s":900,"t":[`,
		"/status.json":       `"uptime_s"`,
		"/v1/models":         `"data"`,
		"/healthz":           "ok",
		"/livez":             `{"live":true}`,
		"/readyz":            `{"ready":true}`,
		"/metrics":           "mentat_serve_probes_total",
	} {
		if resp, body := get(t, "GET", base+path, "", ""); resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %.200s", path, resp.StatusCode, body)
		}
	}
	// POSTs route by model: nothing serves "m", so 404 listing what does.
	if resp, body := get(t, "POST", base+"/v1/chat/completions", "", `{"model":"m"}`); resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("POST unknown model: %d %s", resp.StatusCode, body)
	}
	// The router answers input_tokens itself, with the same refusals.
	if resp, body := get(t, "POST", base+"/v1/responses/input_tokens", "", `{"model":"m","input":"hi"}`); resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("POST input_tokens: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, "GET", base+"/nope", "", ""); resp.StatusCode != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("GET /nope: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, "PUT", base+"/v1/chat/completions", "", ""); resp.StatusCode != 405 || resp.Header.Get("Allow") == "" || !strings.Contains(body, `"error"`) {
		t.Errorf("PUT: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// /mcp is the MCP endpoint, not the proxy: a foreign page is refused.
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(`{}`))
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 403 {
		t.Errorf("/mcp with a foreign Origin: %d", r.StatusCode)
	}
}

// TestEdgeLimitsFromEnvironment: the SERVE_* edge variables reach the
// router's listener: a head over SERVE_MAX_HEADER_BYTES gets 431, and
// with SERVE_MAX_CONNECTIONS=1 a second client is not served while the
// first holds its connection.
func TestEdgeLimitsFromEnvironment(t *testing.T) {
	base := startAppWith(t, map[string]string{"SERVE_MAX_HEADER_BYTES": "2048", "SERVE_MAX_CONNECTIONS": "1"})
	addr := strings.TrimPrefix(base, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		return c
	}
	first := dial()
	fmt.Fprintf(first, "GET /healthz HTTP/1.1\r\nHost: r\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 16<<10))
	if resp, _ := testproc.ReadResponse(t, bufio.NewReader(first)); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
	held := dial()
	io.WriteString(held, "GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")
	br := bufio.NewReader(held)
	if resp, _ := testproc.ReadResponse(t, br); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	second := dial()
	io.WriteString(second, "GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, _ := second.Read(make([]byte, 1)); n != 0 {
		t.Fatal("second connection served over SERVE_MAX_CONNECTIONS=1")
	}
	held.Close()
	_ = second.SetReadDeadline(time.Now().Add(15 * time.Second))
	if resp, _ := testproc.ReadResponse(t, bufio.NewReader(second)); resp.StatusCode != 200 {
		t.Fatalf("status %d after a slot freed", resp.StatusCode)
	}
}

// TestKeysOn: with SERVE_KEYS_FILE, the open pages stay open and every
// other request needs a key: 401 in OpenAI's shape without one, the routes
// as before with one. A key file that cannot be parsed stops New.
func TestKeysOn(t *testing.T) {
	dir := t.TempDir()
	secret, hash, err := keys.NewSecret(keys.Router)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "keys.toml")
	os.WriteFile(path, []byte(fmt.Sprintf("[[key]]\nid = \"k\"\nhash = %q\n", hash)), 0o600)
	base := startAppWith(t, map[string]string{"SERVE_KEYS_FILE": path})
	for _, p := range []string{"/", "/status.json", "/stats.json", "/stats/series.json", "/metrics", "/healthz", "/livez", "/readyz"} {
		if resp, _ := get(t, "GET", base+p, "", ""); resp.StatusCode != 200 {
			t.Errorf("GET %s without a key: %d", p, resp.StatusCode)
		}
	}
	for _, c := range [][2]string{{"GET", "/v1/models"}, {"GET", "/v1/models/x"}, {"POST", "/v1/chat/completions"}, {"POST", "/tokenize"},
		{"POST", "/v1/responses/input_tokens"}, {"POST", "/mcp"}, {"GET", "/nope"}, {"POST", "/healthz"}} {
		resp, body := get(t, c[0], base+c[1], "", `{"model":"m"}`)
		if resp.StatusCode != 401 || !strings.Contains(body, `"code":"invalid_api_key"`) || !strings.Contains(body, `"type":"invalid_request_error"`) ||
			resp.Header.Get("Www-Authenticate") == "" {
			t.Errorf("%s %s without a key: %d %v %s", c[0], c[1], resp.StatusCode, resp.Header, body)
		}
	}
	req, _ := http.NewRequest("GET", base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models with the key: %d", resp.StatusCode)
	}

	os.WriteFile(path, []byte("[[key]]\nid = \"k\"\nhash = \"short\"\n"), 0o600)
	cfg, _ := serve.LoadConfig(envconf.Map(map[string]string{"SERVE_KEYS_FILE": path}))
	cfg.HTTPAddr, cfg.Daemons, cfg.AnnouncePort, cfg.AnnounceAddr = "127.0.0.1:0", []string{}, 0, ""
	if _, err := New(cfg, logx.Discard()); err == nil || !strings.Contains(err.Error(), path+":1") {
		t.Fatalf("New with a broken key file: %v", err)
	}
}
