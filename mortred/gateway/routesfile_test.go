package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/prometheus/client_golang/prometheus"
)

// instanceModel is a fake model server standing for one instance of a
// model: every answer names it (served_by), it knows the jobs it was
// given, and it counts what it was asked. A request whose X-Request-Id is
// "404" gets a 404, whatever it asks.
type instanceModel struct {
	name, addr string
	jobs       map[string]bool
	// hold, when not nil, keeps the first inference request until it is
	// closed, after sending on entered; later ones answer at once.
	hold    chan struct{}
	entered chan struct{}
	held    atomic.Bool
	// jobGets counts GETs of jobs, posts every POST.
	jobGets, posts atomic.Int64
}

func newInstanceModel(t *testing.T, name string, jobs ...string) *instanceModel {
	t.Helper()
	return startInstanceModel(t, &instanceModel{name: name, jobs: setOf(jobs)})
}

func setOf(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}

func startInstanceModel(t *testing.T, m *instanceModel) *instanceModel {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	m.addr = strings.TrimPrefix(srv.URL, "http://")
	return m
}

func (m *instanceModel) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ready" {
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+modelTok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if r.Method == http.MethodPost {
		m.posts.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	answer := func(code int, v map[string]string) {
		v["served_by"] = m.name
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	job, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/jobs/"), "/")
	switch {
	case r.Header.Get("X-Request-Id") == "404":
		answer(http.StatusNotFound, map[string]string{"status_str": "not found"})
	case r.Method == http.MethodPost && r.URL.Path == "/jobs":
		w.Header().Set("Location", "/jobs/"+m.name+"-job")
		answer(http.StatusAccepted, map[string]string{"job_id": m.name + "-job", "poll_url": "/jobs/" + m.name + "-job"})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/jobs/"):
		m.jobGets.Add(1)
		if !m.jobs[job] {
			answer(http.StatusNotFound, map[string]string{"status_str": "no such job"})
			return
		}
		answer(http.StatusOK, map[string]string{"job_id": job, "state": "done", "poll_url": "/jobs/" + job,
			"path": r.URL.Path, "query": r.URL.RawQuery})
	default:
		if m.hold != nil && !m.held.Swap(true) {
			m.entered <- struct{}{}
			<-m.hold
		}
		answer(http.StatusOK, map[string]string{"path": r.URL.Path})
	}
}

// closedAddr is a loopback address that refuses connections.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// writeRoutes replaces the routes file at path as the supervisor does: a
// temporary file, then a rename.
func writeRoutes(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// routesGateway serves a gateway whose routes file holds content ("" writes
// no file); it returns the file's path.
func routesGateway(t *testing.T, cfg Config, content string, logw io.Writer, ups ...Upstream) (*testServer, *Gateway, *prometheus.Registry, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "routes.json")
	if content != "" {
		writeRoutes(t, path, content)
	}
	cfg.RoutesFile = path
	log := slog.New(slog.DiscardHandler)
	if logw != nil {
		log = slog.New(slog.NewTextHandler(logw, nil))
	}
	gw, g, reg := newGatewayLog(t, cfg, log, ups...)
	return gw, g, reg, path
}

// served asks POST /v1/models/ID/infer and returns the instance that
// served it and the answer's X-Mortred-Version.
func served(t *testing.T, gw *testServer, id string) (by, version string) {
	t.Helper()
	resp, body := do(t, "POST", gw.URL+"/v1/models/"+id+"/infer", tok, strings.NewReader(`{}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("infer %s: %d %s", id, resp.StatusCode, body)
	}
	var ans map[string]string
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatalf("infer %s: %v %s", id, err, body)
	}
	return ans["served_by"], resp.Header.Get(headerVersion)
}

func TestRoutesFileAtStart(t *testing.T) {
	oldA, newA, b := newInstanceModel(t, "A-v1"), newInstanceModel(t, "A-v2"), newInstanceModel(t, "B")
	var logs testproc.Buffer
	gw, _, _, _ := routesGateway(t, Config{}, fmt.Sprintf(`{"generation":7,"models":{
		"A":{"addr":%q,"version":"v2","instance":2,"draining":[{"addr":%q,"version":"v1","instance":1}]},
		"NOT_HERE":{"addr":"127.0.0.1:9","version":"v9","instance":9}}}`, newA.addr, oldA.addr), &logs,
		Upstream{ID: "A", URI: "/a", Addr: oldA.addr, Token: modelTok},
		Upstream{ID: "B", URI: "/b", Addr: b.addr, Token: modelTok})

	if by, v := served(t, gw, "A"); by != "A-v2" || v != "v2" {
		t.Errorf("A: served by %s, version %q; want the routes file's instance A-v2, v2", by, v)
	}
	if by, v := served(t, gw, "B"); by != "B" || v != "" {
		t.Errorf("B (not in the file): served by %s, version %q; want its catalog address, no version", by, v)
	}
	if n := oldA.posts.Load(); n != 0 {
		t.Errorf("the catalog address of A got %d requests; the routes file moved A", n)
	}
	out := logs.String()
	if !strings.Contains(out, "gateway_routes_unknown_model") || !strings.Contains(out, "NOT_HERE") {
		t.Errorf("no warning for a model not in the catalog:\n%s", out)
	}
	if !strings.Contains(out, "gateway_routes_loaded") || !strings.Contains(out, "generation=7") || !strings.Contains(out, "models=1") {
		t.Errorf("no gateway_routes_loaded with generation 7 and 1 model:\n%s", out)
	}
}

func TestRoutesFileAbsent(t *testing.T) {
	m := newInstanceModel(t, "A")
	up := Upstream{ID: "A", URI: "/a", Addr: m.addr, Token: modelTok}
	// No variable: the catalog.
	gw, _, _ := newGateway(t, up)
	if by, _ := served(t, gw, "A"); by != "A" {
		t.Errorf("without a routes file: served by %s", by)
	}
	// A path where no file exists: the catalog too.
	gw, _, _, _ = routesGateway(t, Config{}, "", nil, up)
	if by, v := served(t, gw, "A"); by != "A" || v != "" {
		t.Errorf("routes file absent: served by %s, version %q", by, v)
	}
}

func TestRoutesFileBadAtStart(t *testing.T) {
	up := Upstream{ID: "A", URI: "/a", Addr: "127.0.0.1:9001"}
	for _, c := range []struct{ name, content, want string }{
		{"not JSON", `{"models":`, "not a routes object"},
		{"unknown field", `{"generation":1,"models":{},"mode":"fast"}`, `unknown field "mode"`},
		{"unknown field of a model", `{"models":{"A":{"addr":"127.0.0.1:1","weight":2}}}`, `unknown field "weight"`},
		{"draining inside draining", `{"models":{"A":{"addr":"127.0.0.1:1","draining":[{"addr":"127.0.0.1:2","draining":[]}]}}}`, `unknown field "draining"`},
		{"no port", `{"models":{"A":{"addr":"127.0.0.1"}}}`, "not host:port"},
		{"port zero", `{"models":{"A":{"addr":"127.0.0.1:0"}}}`, "port"},
		{"bad draining addr", `{"models":{"A":{"addr":"127.0.0.1:1","draining":[{"addr":"x/y:80"}]}}}`, "draining[0]"},
		{"same addr twice", `{"models":{"A":{"addr":"127.0.0.1:1","draining":[{"addr":"127.0.0.1:1"}]}}}`, "listed twice"},
		{"negative instance", `{"models":{"A":{"addr":"127.0.0.1:1","instance":-1}}}`, "negative"},
		{"version with a newline", `{"models":{"A":{"addr":"127.0.0.1:1","version":"v1\nX-Evil: 1"}}}`, "printable ASCII"},
		{"two objects", `{"models":{}} {}`, "data after"},
		{"null", `null`, "not a routes object"},
		{"empty", ``, "not a routes object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "routes.json")
			writeRoutes(t, path, c.content)
			_, err := New(Config{Token: tok, MetricsToken: mtok, Upstreams: []Upstream{up}, RoutesFile: path}, slog.New(slog.DiscardHandler), nil)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v; want an error naming %s and %q", err, path, c.want)
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		dir := t.TempDir() // a directory: exists, cannot be read as a file
		_, err := New(Config{Token: tok, MetricsToken: mtok, Upstreams: []Upstream{up}, RoutesFile: dir}, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("New = %v; want an error naming %s", err, dir)
		}
	})
}

// TestReloadRoutesInFlight: a request in flight to the old instance when
// the route switches finishes there; the next one goes to the new one.
func TestReloadRoutesInFlight(t *testing.T) {
	oldA := startInstanceModel(t, &instanceModel{name: "A-v1", hold: make(chan struct{}), entered: make(chan struct{}, 1)})
	newA := newInstanceModel(t, "A-v2")
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(oldA.hold) }) })
	var logs testproc.Buffer
	gw, g, reg, path := routesGateway(t, Config{}, "", &logs, Upstream{ID: "A", URI: "/a", Addr: oldA.addr, Token: modelTok})

	type result struct {
		code int
		body []byte
	}
	inFlight := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/models/A/infer", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inFlight <- result{code: -1, body: []byte(err.Error())}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inFlight <- result{resp.StatusCode, b}
	}()
	select {
	case <-oldA.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the old instance")
	}

	writeRoutes(t, path, fmt.Sprintf(`{"generation":2,"models":{"A":{"addr":%q,"version":"v2","instance":2,"draining":[{"addr":%q,"version":"v1","instance":1}]}}}`, newA.addr, oldA.addr))
	if err := g.ReloadRoutes(); err != nil {
		t.Fatal(err)
	}
	if by, v := served(t, gw, "A"); by != "A-v2" || v != "v2" {
		t.Errorf("after the switch: served by %s, version %q; want A-v2, v2", by, v)
	}
	release.Do(func() { close(oldA.hold) })
	res := <-inFlight
	if res.code != http.StatusOK || !strings.Contains(string(res.body), `"served_by":"A-v1"`) {
		t.Errorf("the request in flight at the switch: %d %s; want 200 from A-v1", res.code, res.body)
	}
	if n := oldA.posts.Load(); n != 1 {
		t.Errorf("the old instance got %d requests, want 1 (the one in flight)", n)
	}
	if ok := counter(t, reg, "mortred_gateway_routes_reloads_total", "ok"); ok != 1 {
		t.Errorf("reloads ok = %v, want 1", ok)
	}

	// A file that no longer lists the model: back to the catalog address.
	writeRoutes(t, path, `{"generation":3,"models":{}}`)
	if err := g.ReloadRoutes(); err != nil {
		t.Fatal(err)
	}
	if by, v := served(t, gw, "A"); by != "A-v1" || v != "" {
		t.Errorf("model dropped from the file: served by %s, version %q; want the catalog address (A-v1), no version", by, v)
	}
	if !strings.Contains(logs.String(), "generation=3") {
		t.Errorf("no gateway_routes_loaded for generation 3:\n%s", logs.String())
	}
}

// TestReloadRoutesBadFileKeepsRoutes: a reload that fails keeps the routes
// in force, logs the reason and counts an error.
func TestReloadRoutesBadFileKeepsRoutes(t *testing.T) {
	oldA, newA := newInstanceModel(t, "A-v1"), newInstanceModel(t, "A-v2")
	var logs testproc.Buffer
	gw, g, reg, path := routesGateway(t, Config{}, fmt.Sprintf(`{"generation":4,"models":{"A":{"addr":%q,"version":"v2","instance":2}}}`, newA.addr), &logs,
		Upstream{ID: "A", URI: "/a", Addr: oldA.addr, Token: modelTok})
	for _, bad := range []string{
		`{"generation":5,"models":{"A":{"addr":"127.0.0.1"}}}`,
		`{"generation":5,"models":{"A":{"addr":"127.0.0.1:1"}},"extra":true}`,
		`{"generation":5,`,
	} {
		writeRoutes(t, path, bad)
		err := g.ReloadRoutes()
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("ReloadRoutes(%s) = %v; want an error naming the file", bad, err)
		}
		if by, v := served(t, gw, "A"); by != "A-v2" || v != "v2" {
			t.Errorf("after a failed reload: served by %s, version %q; want the routes in force (A-v2)", by, v)
		}
	}
	if n := counter(t, reg, "mortred_gateway_routes_reloads_total", "error"); n != 3 {
		t.Errorf("reloads error = %v, want 3", n)
	}
	if n := counter(t, reg, "mortred_gateway_routes_reloads_total", "ok"); n != 0 {
		t.Errorf("reloads ok = %v, want 0", n)
	}
	if out := logs.String(); !strings.Contains(out, "gateway_routes_reload_failed") || !strings.Contains(out, "not host:port") {
		t.Errorf("no gateway_routes_reload_failed with the reason:\n%s", out)
	}
}

// TestJobsOfDrainingInstances: a job GET the active instance answers 404
// for is asked of the draining instances in order; POST /jobs and
// inference never go to them.
func TestJobsOfDrainingInstances(t *testing.T) {
	active := newInstanceModel(t, "v3", "a")
	d1 := newInstanceModel(t, "v2", "b", "both")
	d2 := newInstanceModel(t, "v1", "c", "both")
	gone := closedAddr(t) // a draining instance already stopped
	gw, _, _, _ := routesGateway(t, Config{HostID: "h1"}, fmt.Sprintf(`{"generation":9,"models":{"M":{"addr":%q,"version":"v3","instance":3,"draining":[
		{"addr":%q,"version":"v2.5","instance":25},{"addr":%q,"version":"v2","instance":2},{"addr":%q,"version":"v1","instance":1}]}}}`,
		active.addr, gone, d1.addr, d2.addr), nil,
		Upstream{ID: "M", URI: "/m", Addr: d2.addr, Token: modelTok})

	get := func(path string) (*http.Response, map[string]string) {
		t.Helper()
		resp, body := do(t, "GET", gw.URL+"/v1/models/M/jobs/"+path, tok, nil)
		var ans map[string]string
		if err := json.Unmarshal(body, &ans); err != nil {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
		}
		return resp, ans
	}
	for _, c := range []struct {
		path, code, by, version, wantPath, query string
	}{
		{"h1.a", "200", "v3", "v3", "/jobs/a", ""},
		{"h1.b", "200", "v2", "v2", "/jobs/b", ""},
		{"h1.c/wait?timeout=5", "200", "v1", "v1", "/jobs/c/wait", "timeout=5"},
		{"h1.c/result", "200", "v1", "v1", "/jobs/c/result", ""},
		{"h1.both", "200", "v2", "v2", "/jobs/both", ""}, // the first draining instance that knows it
		{"h1.nope", "404", "v3", "v3", "", ""},           // nobody knows it: the active instance's 404
		{"h1.nope/result", "404", "v3", "v3", "", ""},
	} {
		resp, ans := get(c.path)
		if fmt.Sprint(resp.StatusCode) != c.code || ans["served_by"] != c.by || resp.Header.Get(headerVersion) != c.version ||
			ans["path"] != c.wantPath || ans["query"] != c.query {
			t.Errorf("GET %s: %d %v, version %q; want %s from %s, version %s, path %q query %q",
				c.path, resp.StatusCode, ans, resp.Header.Get(headerVersion), c.code, c.by, c.version, c.wantPath, c.query)
		}
		job, _, _ := strings.Cut(strings.TrimPrefix(c.path, "h1."), "/")
		if c.code == "200" && !strings.HasSuffix(c.path, "/result") && (ans["poll_url"] != "/v1/models/M/jobs/h1."+job || ans["job_id"] != "h1."+job) {
			t.Errorf("GET %s: poll_url %q, job_id %q not rewritten onto the gateway", c.path, ans["poll_url"], ans["job_id"])
		}
	}
	before1, before2 := d1.jobGets.Load(), d2.jobGets.Load()
	get("h1.a")
	if d1.jobGets.Load() != before1 || d2.jobGets.Load() != before2 {
		t.Error("a job the active instance knows was also asked of draining instances")
	}

	// POST /jobs and inference go to the active instance only, even when
	// it answers 404 (X-Request-Id 404 makes it).
	for _, c := range []struct{ path, body string }{
		{"/v1/models/M/jobs", `{}`}, {"/v1/models/M/jobs", ""}, {"/v1/models/M/infer", `{}`}, {"/v1/models/M/infer", ""}, {"/m", `{}`},
	} {
		path := c.path
		req, _ := http.NewRequest("POST", gw.URL+path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Request-Id", "404")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(body), `"served_by":"v3"`) {
			t.Errorf("POST %s: %d %s; want the active instance's 404", path, resp.StatusCode, body)
		}
	}
	resp, body := do(t, "POST", gw.URL+"/v1/models/M/jobs", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 202 || resp.Header.Get("Location") != "/v1/models/M/jobs/h1.v3-job" || resp.Header.Get(headerVersion) != "v3" {
		t.Errorf("POST /jobs: %d %v %s; want 202 from the active instance", resp.StatusCode, resp.Header, body)
	}
	if n1, n2 := d1.posts.Load(), d2.posts.Load(); n1 != 0 || n2 != 0 {
		t.Errorf("draining instances got POSTs: %d, %d; want none", n1, n2)
	}
}

func TestReadyzVersion(t *testing.T) {
	newM, n := newInstanceModel(t, "M-v2"), newInstanceModel(t, "N")
	catalogM := closedAddr(t) // ready only if /readyz asks the routed address
	gw, g, _, path := routesGateway(t, Config{}, fmt.Sprintf(`{"generation":1,"models":{"M":{"addr":%q,"version":"v2","instance":2}}}`, newM.addr), nil,
		Upstream{ID: "M", URI: "/m", Addr: catalogM, Token: modelTok},
		Upstream{ID: "N", URI: "/n", Addr: n.addr, Token: modelTok})

	ready := func(id string) (readyModel, string) {
		t.Helper()
		resp, body := do(t, "GET", gw.URL+"/readyz?model="+id, "", nil)
		var ans readyAnswer
		if err := json.Unmarshal(body, &ans); err != nil || len(ans.Models) != 1 {
			t.Fatalf("/readyz?model=%s: %d %v %s", id, resp.StatusCode, err, body)
		}
		return ans.Models[0], string(body)
	}
	if m, body := ready("M"); !m.Ready || m.Version == nil || *m.Version != "v2" || m.Instance == nil || *m.Instance != 2 {
		t.Errorf("/readyz?model=M: %s; want ready (its routed address), version v2, instance 2", body)
	}
	if m, body := ready("N"); !m.Ready || strings.Contains(body, `"version"`) || strings.Contains(body, `"instance"`) {
		t.Errorf("/readyz?model=N: %+v %s; want ready, no version or instance (not in the routes file)", m, body)
	}

	// The supervisor's rollback to the catalog instance: instance 0 shows.
	writeRoutes(t, path, fmt.Sprintf(`{"generation":2,"models":{"M":{"addr":%q,"version":"","instance":0,"draining":[{"addr":%q,"version":"v2","instance":2}]}}}`, catalogM, newM.addr))
	if err := g.ReloadRoutes(); err != nil {
		t.Fatal(err)
	}
	if m, body := ready("M"); m.Ready || !strings.Contains(body, `"instance":0`) || !strings.Contains(body, `"version":""`) {
		t.Errorf("/readyz?model=M after the switch back: %s; want instance 0, version \"\", not ready (nothing listens)", body)
	}
}

func TestParseRoutes(t *testing.T) {
	f, err := parseRoutes([]byte(`{"generation":7,"models":{"PPOCR_CLS":{"addr":"127.0.0.1:41234","version":"v2","instance":2,"draining":[{"addr":"127.0.0.1:9002","version":"v1","instance":1}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	e := f.Models["PPOCR_CLS"]
	if f.Generation != 7 || e.Addr != "127.0.0.1:41234" || e.Version != "v2" || e.Instance != 2 ||
		len(e.Draining) != 1 || e.Draining[0] != (instanceEntry{Addr: "127.0.0.1:9002", Version: "v1", Instance: 1}) {
		t.Fatalf("parsed %+v", f)
	}
	for _, ok := range []string{
		`{}`, `{"models":null}`, " {\"models\":{}}\n",
		`{"models":{"A":{"addr":"localhost:80"}}}`,
		`{"models":{"A":{"addr":"[::1]:8080","version":"1.2.0 (beta)"}}}`,
	} {
		if _, err := parseRoutes([]byte(ok)); err != nil {
			t.Errorf("parseRoutes(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"models":{"A":{"addr":"127.0.0.1:65536"}}}`,
		`{"models":{"A":{"addr":"127.0.0.1:08080"}}}`,
		`{"models":{"A":{"addr":":8080"}}}`,
		`{"models":{"A":{"addr":"[fe80::1%eth0]:80"}}}`,
		`{"models":{"A":{"addr":"-x:80"}}}`,
		`{"models":{"A":{"addr":"a b:80"}}}`,
		`{"models":{"A":{"addr":"127.0.0.1:1","version":" v1"}}}`,
		`{"generation":"7","models":{}}`,
		`[]`,
	} {
		if _, err := parseRoutes([]byte(bad)); err == nil {
			t.Errorf("parseRoutes(%s) accepted", bad)
		}
	}
	var many []string
	for i := 0; i <= maxDraining; i++ {
		many = append(many, fmt.Sprintf(`{"addr":"127.0.0.1:%d"}`, 2000+i))
	}
	if _, err := parseRoutes([]byte(`{"models":{"A":{"addr":"127.0.0.1:1","draining":[` + strings.Join(many, ",") + `]}}}`)); err == nil {
		t.Errorf("%d draining instances accepted, over the limit of %d", len(many), maxDraining)
	}
}

func TestFromConfigRoutesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mortred.toml")
	if err := os.WriteFile(p, []byte("[gateway]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := config.LoadControlPlane(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"", "/run/mortred/routes.json"} {
		env := map[string]string{EnvAPIToken: "t", EnvMetricsToken: "m"}
		if want != "" {
			env[EnvRoutesFile] = want
		}
		s, err := FromConfig(cp, &config.Catalog{}, envconf.Map(env))
		if err != nil {
			t.Fatal(err)
		}
		if s.Config.RoutesFile != want {
			t.Errorf("%s=%q: RoutesFile %q", EnvRoutesFile, want, s.Config.RoutesFile)
		}
	}
}
