package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// keyEntry is one [[key]] of a test key file; secret is kept beside it.
type keyEntry struct {
	id, secret string
	extra      string // TOML lines: models, rpm, ipm, max_concurrent, disabled
}

func newKey(t testing.TB, id, extra string) keyEntry {
	t.Helper()
	secret, _, err := keys.NewSecret(keys.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	return keyEntry{id: id, secret: secret, extra: extra}
}

// writeKeys writes a key file of entries (0600, as mortredctl keys new
// creates it).
func writeKeys(t testing.TB, path string, entries ...keyEntry) {
	t.Helper()
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "[[key]]\nid = %q\nhash = %q\n%s\n", e.id, keys.HashSecret(e.secret), e.extra)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tenantModel answers like a model server that speaks the gateway's
// headers: it reports the tenant it was sent, and counts items by path:
// /a and /b answer X-Mortred-Items 2, /hostile answers bogus accounting
// headers, /slow waits for release, /jobs... answers a job.
type tenantModel struct {
	*httptest.Server
	release chan struct{}
	mu      sync.Mutex
	tenants []string // X-Mortred-Tenant values seen, "-" for none
}

func newTenantModel(t *testing.T) *tenantModel {
	t.Helper()
	m := &tenantModel{release: make(chan struct{})}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tenant := "-"
		if vv, ok := r.Header[envelope.HeaderTenant]; ok {
			tenant = strings.Join(vv, "|")
		}
		m.mu.Lock()
		m.tenants = append(m.tenants, tenant)
		m.mu.Unlock()
		h := w.Header()
		h.Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/hostile":
			h[envelope.HeaderItems] = []string{"-7"}
			h[envelope.HeaderTenant] = []string{"someone-else"}
			h.Set("X-Ratelimit-Remaining-Images", "999999")
		case r.URL.Path == "/slow":
			select {
			case <-m.release:
			case <-r.Context().Done():
				return
			}
			h.Set(envelope.HeaderItems, "1")
		case r.URL.Path == "/jobs":
			h.Set(envelope.HeaderItems, "3")
			h.Set("Location", "/jobs/j1")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"job_id":"j1","state":"pending","poll_url":"/jobs/j1","result_url":"/jobs/j1/result"}`)
			return
		case strings.HasPrefix(r.URL.Path, "/jobs/"):
			h.Set(envelope.HeaderItems, "5") // a read charges nothing, whatever it says
		default:
			h.Set(envelope.HeaderItems, "2")
		}
		_, _ = fmt.Fprintf(w, `{"status":0,"tenant":%q}`, tenant)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *tenantModel) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tenants)
}

func (m *tenantModel) lastTenant() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.tenants) == 0 {
		return ""
	}
	return m.tenants[len(m.tenants)-1]
}

func (m *tenantModel) upstreams() []Upstream {
	addr := strings.TrimPrefix(m.URL, "http://")
	return []Upstream{
		{ID: "A", URI: "/a", Addr: addr},
		{ID: "B1", URI: "/b", Addr: addr},
		{ID: "HOSTILE", URI: "/hostile", Addr: addr},
		{ID: "SLOW", URI: "/slow", Addr: addr},
	}
}

// keysGateway is an in-process gateway with a key file, its store running.
func keysGateway(t *testing.T, cfg Config, logw io.Writer, m *tenantModel, entries ...keyEntry) (*testServer, *Gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.toml")
	writeKeys(t, path, entries...)
	cfg.KeysFile = path
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewTextHandler(logw, nil))
	}
	gw, g, _ := newGatewayLog(t, cfg, log, m.upstreams()...)
	if g.Keys() == nil {
		t.Fatal("keys_file set, no key store")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Keys().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return gw, g, path
}

func call(t *testing.T, method, url, secret string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"images":["x","y"]}`))
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func wantStatus(t *testing.T, what string, resp *http.Response, body []byte, code int, status envelope.Status) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s: HTTP %d, want %d: %s", what, resp.StatusCode, code, body)
	}
	if code >= 400 {
		var env gatewayEnvelope
		if err := json.Unmarshal(body, &env); err != nil || env.Status != status || env.StatusStr != envelope.Text(status) {
			t.Fatalf("%s: envelope %s, want status %d", what, body, status)
		}
	}
}

// TestKeysScopes: each key reaches the models of its scope (200), not the
// others (403, envelope status 403), on the catalog routes, the legacy
// route and the job routes; unknown and disabled keys are 401; the
// operator token reaches every model. The model server sees the key's id
// as X-Mortred-Tenant, never a client's own, and none for the operator.
func TestKeysScopes(t *testing.T) {
	m := newTenantModel(t)
	a := newKey(t, "team-a", `models = ["A"]`)
	b := newKey(t, "team-b", `models = ["B*"]`)
	off := newKey(t, "retired", "disabled = true")
	gw, _, _ := keysGateway(t, Config{}, nil, m, a, b, off)
	spoof := map[string]string{envelope.HeaderTenant: "team-b"}

	for _, c := range []struct {
		what, method, path, secret string
		code                       int
		status                     envelope.Status
		tenant                     string
	}{
		{"a on A", "POST", "/v1/models/A/infer", a.secret, 200, 0, "team-a"},
		{"a on A, legacy", "POST", "/a", a.secret, 200, 0, "team-a"},
		{"a on A, job submit", "POST", "/v1/models/A/jobs", a.secret, 202, 0, "team-a"},
		{"a on A, job read", "GET", "/v1/models/A/jobs/j1/result", a.secret, 200, 0, "team-a"},
		{"a on B1", "POST", "/v1/models/B1/infer", a.secret, 403, envelope.StatusForbidden, ""},
		{"a on B1, legacy", "POST", "/b", a.secret, 403, envelope.StatusForbidden, ""},
		{"a on B1, job read", "GET", "/v1/models/B1/jobs/j1", a.secret, 403, envelope.StatusForbidden, ""},
		{"b on B1", "POST", "/v1/models/B1/infer", b.secret, 200, 0, "team-b"},
		{"b on A", "POST", "/v1/models/A/infer", b.secret, 403, envelope.StatusForbidden, ""},
		{"a on an unknown model", "POST", "/v1/models/NOPE/infer", a.secret, 404, envelope.StatusNotFound, ""},
		{"unknown key", "POST", "/v1/models/A/infer", "sk-mortred-not-a-key-of-this-file", 401, envelope.StatusUnauthorized, ""},
		{"no key", "POST", "/v1/models/A/infer", "", 401, envelope.StatusUnauthorized, ""},
		{"disabled key", "POST", "/v1/models/A/infer", off.secret, 401, envelope.StatusUnauthorized, ""},
		{"metrics token", "POST", "/v1/models/A/infer", mtok, 401, envelope.StatusUnauthorized, ""},
		{"operator on A", "POST", "/v1/models/A/infer", tok, 200, 0, "-"},
		{"operator on B1", "POST", "/b", tok, 200, 0, "-"},
		{"operator job read", "GET", "/v1/models/B1/jobs/j1/wait", tok, 200, 0, "-"},
	} {
		before := m.calls()
		resp, body := call(t, c.method, gw.URL+c.path, c.secret, spoof)
		wantStatus(t, c.what, resp, body, c.code, c.status)
		switch {
		case c.code == 401 && resp.Header.Get("WWW-Authenticate") == "":
			t.Errorf("%s: 401 without WWW-Authenticate", c.what)
		case c.tenant != "" && m.lastTenant() != c.tenant:
			t.Errorf("%s: the model server saw tenant %q, want %q", c.what, m.lastTenant(), c.tenant)
		case c.tenant == "" && m.calls() != before:
			t.Errorf("%s: refused, but the model server was called", c.what)
		}
		if resp.Header.Get(envelope.HeaderItems) != "" || resp.Header.Get(envelope.HeaderTenant) != "" {
			t.Errorf("%s: accounting headers reached the client: %v", c.what, resp.Header)
		}
	}
}

// usageOf reads one key's usage from GET /stats.json.
func usageOf(t *testing.T, gw *testServer, id string) keys.Usage {
	t.Helper()
	resp, body := call(t, "GET", gw.URL+"/stats.json", mtok, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("/stats.json: %d %s", resp.StatusCode, body)
	}
	var doc struct {
		Keys   []keys.Usage        `json:"keys"`
		Series keys.SeriesSnapshot `json:"series"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("/stats.json: %v: %s", err, body)
	}
	for _, u := range doc.Keys {
		if u.ID == id {
			return u
		}
	}
	t.Fatalf("/stats.json has no key %q: %s", id, body)
	return keys.Usage{}
}

// TestKeysCharge: images are charged from the model server's
// X-Mortred-Items on submissions only; a hostile model server's bogus
// count charges nothing, and its rate-limit and tenant headers do not reach
// the client; the answer carries the key's own x-ratelimit-* headers.
func TestKeysCharge(t *testing.T) {
	m := newTenantModel(t)
	k := newKey(t, "meter", "ipm = 1000\nrpm = 1000")
	gw, _, _ := keysGateway(t, Config{}, nil, m, k)
	for _, p := range []string{"/v1/models/A/infer", "/a", "/v1/models/A/jobs"} { // 2 + 2 + 3
		resp, body := call(t, "POST", gw.URL+p, k.secret, nil)
		if resp.StatusCode/100 != 2 || resp.Header.Get("X-Ratelimit-Limit-Images") != "1000" || resp.Header.Get("X-Ratelimit-Limit-Requests") != "1000" {
			t.Fatalf("%s: %d %v %s", p, resp.StatusCode, resp.Header, body)
		}
	}
	call(t, "GET", gw.URL+"/v1/models/A/jobs/j1", k.secret, nil) // says 5: not charged
	resp, _ := call(t, "POST", gw.URL+"/v1/models/HOSTILE/infer", k.secret, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining-Images") == "999999" || resp.Header.Get(envelope.HeaderTenant) != "" {
		t.Fatalf("hostile model's headers passed: %v", resp.Header)
	}
	u := usageOf(t, gw, "meter")
	if u.Images != 7 || u.Requests["200"] != 4 || u.Requests["202"] != 1 || u.Unit != keys.Images {
		t.Fatalf("usage %+v, want 7 images, 4×200 and 1×202", u)
	}
}

// TestKeysMaxConcurrent: a key's second request while its first is in
// flight is 429 with Retry-After; once the first ended, it is admitted.
func TestKeysMaxConcurrent(t *testing.T) {
	m := newTenantModel(t)
	k := newKey(t, "single", "max_concurrent = 1")
	gw, _, _ := keysGateway(t, Config{}, nil, m, k)
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/models/SLOW/infer", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+k.secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	testproc.Until(t, 10*time.Second, "the first request in flight", func() bool { return usageOf(t, gw, "single").InFlight == 1 })
	resp, body := call(t, "POST", gw.URL+"/v1/models/A/infer", k.secret, nil)
	wantStatus(t, "second in flight", resp, body, 429, envelope.StatusRateLimited)
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
		t.Fatalf("429 without Retry-After / retry-after-ms: %v", resp.Header)
	}
	close(m.release)
	if code := <-first; code != 200 {
		t.Fatalf("first request: %d", code)
	}
	resp, body = call(t, "POST", gw.URL+"/v1/models/A/infer", k.secret, nil)
	wantStatus(t, "after the first ended", resp, body, 200, 0)
	if u := usageOf(t, gw, "single"); u.Rejections[string(keys.Concurrency)] != 1 || u.InFlight != 0 {
		t.Fatalf("usage %+v", u)
	}
}

// TestStatsJSONKeysOff: without a key file /stats.json answers no keys and
// an empty series, to the metrics token only.
func TestStatsJSONKeysOff(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "A", URI: "/a", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	resp, body := call(t, "GET", gw.URL+"/stats.json", tok, nil)
	wantStatus(t, "inference token", resp, body, 401, envelope.StatusUnauthorized)
	resp, body = call(t, "GET", gw.URL+"/stats.json", mtok, nil)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"keys":[],"series":{"times":[],"keys":{}}}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp, _ := call(t, "GET", gw.URL+"/stats.json?since=soon", mtok, nil); resp.StatusCode != 422 {
		t.Fatalf("since=soon: %d", resp.StatusCode)
	}
}

// TestCORS: a listed origin's preflight is answered before any key is
// asked for, an unlisted one's is refused, and answers to the listed
// origin expose the rate-limit headers.
func TestCORS(t *testing.T) {
	m := newTenantModel(t)
	k := newKey(t, "web", "rpm = 100")
	gw, _, _ := keysGateway(t, Config{CORSOrigins: []string{"https://app.example"}}, nil, m, k)
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, gw.URL+"/v1/models/A/infer", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := preflight("https://app.example"); resp.StatusCode/100 != 2 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("listed preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := preflight("https://evil.example"); resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("unlisted preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ := call(t, "POST", gw.URL+"/v1/models/A/infer", k.secret, map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Ratelimit-Remaining-Requests") {
		t.Fatalf("answer to a listed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = call(t, "POST", gw.URL+"/v1/models/A/infer", "", map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != 401 {
		t.Fatalf("no key from a listed origin: %d", resp.StatusCode)
	}
}

// TestKeysFileAtStart: a key file that does not parse stops New with the
// file, the line and the reason; the gateway's log never holds a secret.
func TestKeysFileAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "keys.toml")
	if err := os.WriteFile(bad, []byte("[[key]]\nid = \"ok\"\nhash = \""+strings.Repeat("a", 64)+"\"\n\n[[key]]\nid = \"x\"\nhash = \"short\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Token: tok, MetricsToken: mtok, KeysFile: bad}, slog.New(slog.DiscardHandler), nil)
	if err == nil || !strings.Contains(err.Error(), bad+":5:") {
		t.Fatalf("New with a bad key file: %v, want %s:5: and the reason", err, bad)
	}
	if _, err := New(Config{Token: tok, MetricsToken: mtok, KeysFile: filepath.Join(dir, "none.toml")}, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Fatal("New with a missing key file started")
	}
}

// TestSecretsNotLogged: a gateway with keys, used with good, bad and
// operator secrets and reloaded with a broken file, logs none of them.
func TestSecretsNotLogged(t *testing.T) {
	var logs testproc.Buffer
	m := newTenantModel(t)
	k := newKey(t, "logged", "rpm = 2")
	gw, g, path := keysGateway(t, Config{}, &logs, m, k)
	wrong := "sk-mortred-" + strings.Repeat("Z", 43)
	for _, s := range []string{k.secret, k.secret, k.secret, wrong, tok} {
		call(t, "POST", gw.URL+"/v1/models/A/infer", s, nil)
	}
	if err := os.WriteFile(path, []byte("[[key]]\nid = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.Keys().Reload(); err == nil {
		t.Fatal("a broken key file reloaded")
	}
	if resp, _ := call(t, "POST", gw.URL+"/v1/models/A/infer", tok, nil); resp.StatusCode != 200 {
		t.Fatalf("operator after a failed reload: %d", resp.StatusCode)
	}
	out := logs.String()
	for _, s := range []string{k.secret, wrong, tok, keys.HashSecret(k.secret)} {
		if strings.Contains(out, s) {
			t.Fatalf("the log holds a secret or its hash:\n%s", out)
		}
	}
	if !strings.Contains(out, "keys_reload_failed") {
		t.Fatalf("no keys_reload_failed in the log:\n%s", out)
	}
}
