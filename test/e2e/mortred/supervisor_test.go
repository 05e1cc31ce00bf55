package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// supervisorModels is the catalog of the shared stack. Each lifecycle test
// owns one model so the tests can run side by side.
var supervisorModels = []stack.Model{
	{ID: "TM"}, // read-only REST checks, mortredctl, the TLS edge
	{ID: "CRASH"},
	{ID: "GRACE", Keys: map[string]any{"worker_nums": 2}},
	// Its model config is refused by the testmodel factory: it exits at once.
	{ID: "BROKEN", ModelKeys: map[string]any{"no_such_key": true}, Policy: map[string]any{"autostart": false}},
	{ID: "DISABLED", Policy: map[string]any{"enabled": false}},
}

// TestSupervisor runs one supervisor stack (gateway + model servers) and
// checks the REST API, the children's environment, mortredctl, the TLS edge
// and the lifecycle (crash, failed, graceful restart), then stops the
// supervisor and looks for leftovers.
func TestSupervisor(t *testing.T) {
	t.Parallel()
	// The gateway drains for 1.5 s when it stops (SIGTERMLeavesNoChild).
	conf := stack.WriteConf(t, supervisorModels, map[string]any{"drain_ms": 1500})
	sup := stack.StartSupervisor(t, conf, stack.NewTokens())
	for _, id := range []string{"TM", "CRASH", "GRACE"} {
		sup.WaitReady(t, id, 60*time.Second)
	}

	t.Run("ChildEnvironment", func(t *testing.T) { testChildEnvironment(t, sup) })
	t.Run("REST", func(t *testing.T) { testREST(t, sup) })
	t.Run("UI", func(t *testing.T) { testUIServed(t, sup) })
	t.Run("Ctl", func(t *testing.T) { testCtl(t, sup) })
	t.Run("lifecycle", func(t *testing.T) {
		t.Run("CrashBackoffRestart", func(t *testing.T) { t.Parallel(); testCrashRestart(t, sup) })
		t.Run("FailedAfterLimit", func(t *testing.T) { t.Parallel(); testFailedAfterLimit(t, sup) })
		t.Run("GracefulRestartWaitsForJobs", func(t *testing.T) { t.Parallel(); testGracefulRestart(t, sup) })
		t.Run("TLSEdge", func(t *testing.T) { t.Parallel(); testTLSEdge(t, sup) })
	})
	t.Run("LogFiles", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(conf.LogDir(), "TM.log"))
		if err != nil || !bytes.Contains(data, []byte("[supervisor] started pid")) {
			t.Fatalf("log file: %v %q", err, data)
		}
	})
	t.Run("SIGTERMLeavesNoChild", func(t *testing.T) { testNoOrphans(t, sup) })
}

func readProc(t *testing.T, pid int, what string) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, what))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

func testChildEnvironment(t *testing.T, sup *stack.Supervisor) {
	tk := sup.Tokens
	for _, id := range []string{"gateway", "TM", "CRASH", "GRACE"} {
		st := sup.Server(t, id)
		cmdline := readProc(t, st.PID, "cmdline")
		environ := readProc(t, st.PID, "environ")
		for _, arg := range cmdline {
			for _, secret := range []string{tk.API, tk.Metrics, tk.Model} {
				if strings.Contains(arg, secret) {
					t.Errorf("%s (pid %d) has a token on its command line: %q", id, st.PID, cmdline)
				}
			}
		}
		if !slices.Contains(environ, "MORTRED_AUTH_TOKEN="+tk.Model) {
			t.Errorf("%s (pid %d) lacks MORTRED_AUTH_TOKEN in its environment", id, st.PID)
		}
		hasAPI := slices.Contains(environ, "MORTRED_API_TOKEN="+tk.API)
		hasMetrics := slices.Contains(environ, "MORTRED_METRICS_TOKEN="+tk.Metrics)
		if id == "gateway" && (!hasAPI || !hasMetrics) {
			t.Errorf("the gateway lacks its inference or metrics token")
		}
		if id != "gateway" && (hasAPI || hasMetrics) {
			t.Errorf("model server %s holds the management or metrics token", id)
		}
		// Its own process group, so a stop takes whatever it spawned.
		if pgid, err := syscall.Getpgid(st.PID); err != nil || pgid != st.PID {
			t.Errorf("%s: pgid %d (%v), want its own group %d", id, pgid, err, st.PID)
		}
	}
}

// apiCase is one REST request and the answer it must get.
type apiCase struct {
	method, path string
	code         int
	contains     string
}

func testREST(t *testing.T, sup *stack.Supervisor) {
	base := sup.Conf.APIURL()
	tm := sup.Server(t, "TM")
	cases := []apiCase{
		{"GET", "/api/v1/catalog", 200, `{"servers":[{"id":"BROKEN","name":"BROKEN","category":"classification","uri":"/mortred_ai_server_v1/classification/broken","port":`},
		{"GET", "/api/v1/status", 200, `"gateway":{"id":"gateway","state":"running"`},
		{"GET", "/api/v1/servers/TM", 200, `"uri":"/mortred_ai_server_v1/classification/tm"`},
		{"GET", "/api/v1/servers/gateway", 200, `"id":"gateway"`},
		{"GET", "/api/v1/servers/NOPE", 404, `"error":"no server \"NOPE\"; GET /api/v1/catalog lists them"`},
		{"POST", "/api/v1/servers/TM/explode", 400, `"ok":false,"error":"unknown action: use start, stop, restart, graceful_restart, rollout or rollback: \"explode\""`},
		{"POST", "/api/v1/servers/NOPE/start", 404, `"ok":false`},
		{"POST", "/api/v1/servers/NOPE/stop", 404, `no server`},
		{"POST", "/api/v1/servers/DISABLED/start", 500, `{"ok":false,"error":"DISABLED is disabled in`},
		{"POST", "/api/v1/servers/DISABLED/restart", 500, `"ok":false`},
		{"POST", "/api/v1/servers/DISABLED/graceful_restart", 500, `"ok":false`},
		{"POST", "/api/v1/servers/TM/start", 200, `{"ok":true}`}, // already running: a no-op
		{"GET", "/api/v1/servers/TM/logs", 200, `"offset":0,`},
		{"GET", "/api/v1/servers/TM/logs?offset=0&limit=1", 200, `"offset":0,"total":`},
		{"GET", "/api/v1/servers/TM/logs?limit=0", 400, `limit must be an integer from 1 to 1000`},
		{"GET", "/api/v1/servers/TM/logs?limit=-3", 400, `limit must be`},
		{"GET", "/api/v1/servers/TM/logs?limit=ten", 400, `limit must be`},
		{"GET", "/api/v1/servers/TM/logs?offset=-1", 400, `offset must be a non-negative integer`},
		{"GET", "/api/v1/servers/TM/logs?offset=x", 400, `offset must be`},
		{"GET", "/api/v1/servers/TM/logs?limit=100000", 200, `"lines":[`},
		{"GET", "/api/v1/servers/NOPE/logs", 404, `no server`},
		{"GET", "/api/v1/metrics", 200, `mortred_supervisor_state{server="TM"} 2`},
		{"GET", "/api/v1/metrics", 200, "go_goroutines "},
		{"GET", "/api/v1/nope", 404, `no such API route`},
		{"DELETE", "/api/v1/catalog", 404, `no such API route`},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			rep, err := stack.Do(stack.Req{Method: c.method, URL: base + c.path, Token: sup.Tokens.API})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Code != c.code || !bytes.Contains(rep.Body, []byte(c.contains)) {
				t.Fatalf("got %s; want %d containing %s", rep, c.code, c.contains)
			}
			if ct := rep.Header.Get("Content-Type"); c.path != "/api/v1/metrics" && !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("Content-Type %q", ct)
			}
			// Every route but health needs the token, before anything else
			// happens: without it or with a wrong one, 401 and no action.
			for _, tok := range []string{"", "wrong", sup.Tokens.Metrics, sup.Tokens.Model} {
				rep, err := stack.Do(stack.Req{Method: c.method, URL: base + c.path, Token: tok})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Code != 401 || rep.Header.Get("WWW-Authenticate") != `Bearer realm="Mortred"` || !bytes.Contains(rep.Body, []byte("MORTRED_API_TOKEN")) {
					t.Fatalf("token %q: %s", tok, rep)
				}
			}
		})
	}
	t.Run("health is public", func(t *testing.T) {
		rep, err := stack.Do(stack.Req{URL: base + "/api/v1/health"})
		if err != nil || rep.Code != 200 || strings.TrimSpace(string(rep.Body)) != `{"ok":true}` {
			t.Fatalf("%v %v", rep, err)
		}
	})
	t.Run("unauthenticated actions do nothing", func(t *testing.T) {
		for _, a := range []string{"stop", "restart", "graceful_restart"} {
			rep, _ := stack.Do(stack.Req{Method: "POST", URL: base + "/api/v1/servers/TM/" + a, Token: "wrong"})
			if rep.Code != 401 {
				t.Fatalf("%s: %s", a, rep)
			}
		}
		if st := sup.Server(t, "TM"); st.PID != tm.PID || st.State != "running" {
			t.Fatalf("TM changed: %+v, was pid %d", st, tm.PID)
		}
	})
	t.Run("lowercase bearer scheme", func(t *testing.T) {
		rep, err := stack.Do(stack.Req{URL: base + "/api/v1/catalog", Header: map[string]string{"Authorization": "bearer " + sup.Tokens.API}})
		if err != nil || rep.Code != 200 {
			t.Fatalf("%v %v", rep, err)
		}
	})
	t.Run("status fields", func(t *testing.T) {
		if tm.State != "running" || !tm.Ready || tm.PID <= 0 || tm.RestartCount != 0 || tm.StartedAtMS <= 0 ||
			tm.Port != sup.Conf.Models["TM"].Port || tm.Category != "classification" || !tm.Enabled || tm.Error != "" {
			t.Fatalf("%+v", tm)
		}
		if d := sup.Server(t, "DISABLED"); d.Enabled || d.State != "stopped" || d.PID != 0 {
			t.Fatalf("DISABLED: %+v", d)
		}
	})
	t.Run("log paging", func(t *testing.T) {
		var page struct {
			Offset int64    `json:"offset"`
			Total  int64    `json:"total"`
			Lines  []string `json:"lines"`
		}
		rep, _ := sup.API("GET", "/api/v1/servers/TM/logs?offset=0&limit=1")
		if err := rep.JSON(&page); err != nil || len(page.Lines) != 1 || !strings.HasPrefix(page.Lines[0], "[supervisor] started pid ") || page.Total < 2 {
			t.Fatalf("first page: %s", rep)
		}
		total := page.Total
		rep, _ = sup.API("GET", "/api/v1/servers/TM/logs?offset=1&limit=1")
		if err := rep.JSON(&page); err != nil || page.Offset != 1 || len(page.Lines) != 1 {
			t.Fatalf("offset 1: %s", rep)
		}
		rep, _ = sup.API("GET", "/api/v1/servers/TM/logs?offset=99999999")
		if err := rep.JSON(&page); err != nil || page.Offset < total || len(page.Lines) != 0 {
			t.Fatalf("past the end: %s", rep)
		}
		rep, _ = sup.API("GET", "/api/v1/servers/TM/logs?limit=100000")
		if err := rep.JSON(&page); err != nil || len(page.Lines) > 1000 || int64(len(page.Lines)) < total {
			t.Fatalf("large limit: %s", rep)
		}
	})
	t.Run("metrics names", func(t *testing.T) {
		rep, _ := sup.API("GET", "/api/v1/metrics")
		for _, want := range []string{
			`mortred_supervisor_state{server="gateway"} 2`,
			`mortred_supervisor_state{server="DISABLED"} 0`,
			`mortred_supervisor_ready{server="TM"} 1`,
			`mortred_supervisor_ready{server="BROKEN"} 0`,
			`mortred_supervisor_restarts_total{server="TM"} 0`,
		} {
			if !bytes.Contains(rep.Body, []byte(want)) {
				t.Errorf("metrics lack %s:\n%s", want, rep.Body)
			}
		}
	})
}

func testUIServed(t *testing.T, sup *stack.Supervisor) {
	rep, err := stack.Do(stack.Req{URL: sup.Conf.APIURL() + "/"})
	if err != nil || rep.Code != 200 || !strings.HasPrefix(rep.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(rep.Header.Get("Content-Security-Policy"), "connect-src 'self'") || !bytes.Contains(rep.Body, []byte("mortred supervisor")) {
		t.Fatalf("GET /: %v %v", rep, err)
	}
	// No external assets: the page loads nothing from another origin.
	for _, ext := range []string{"http://", "https://", "//cdn"} {
		if bytes.Contains(rep.Body, []byte(`src="`+ext)) || bytes.Contains(rep.Body, []byte(`href="`+ext)) {
			t.Errorf("the page references %s", ext)
		}
	}
	if rep, _ := stack.Do(stack.Req{URL: sup.Conf.APIURL() + "/nope"}); rep.Code != 404 {
		t.Fatalf("GET /nope: %s", rep)
	}
	// The smoke-test relay reaches the gateway, which checks the token itself.
	relay := sup.Conf.APIURL() + "/gateway/v1/models/TM/infer"
	rep, err = stack.Do(stack.Req{URL: relay, Token: sup.Tokens.API, Body: stack.Envelope("ui", "", stack.LightPNG)})
	if err != nil || rep.Code != 200 || rep.Header.Get("X-Mortred-Model") != "TM" || !bytes.Contains(rep.Body, []byte(`"light"`)) {
		t.Fatalf("relay: %v %v", rep, err)
	}
	if rep, _ := stack.Do(stack.Req{URL: relay, Token: "wrong", Body: stack.Envelope("ui", "", stack.LightPNG)}); rep.Code != 401 {
		t.Fatalf("relay with a wrong token: %s", rep)
	}
}

// inferOK polls an inference through the gateway until it answers 200.
func inferOK(t *testing.T, sup *stack.Supervisor, id string) {
	t.Helper()
	testproc.Eventually(t, 30*time.Second, "inference on "+id, func() error {
		rep, err := stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + "/v1/models/" + id + "/infer", Token: sup.Tokens.API, Body: stack.Envelope("x", "", stack.DarkPNG)})
		if err != nil || rep.Code != 200 {
			return fmt.Errorf("%v %v", rep, err)
		}
		return nil
	})
}

func testCrashRestart(t *testing.T, sup *stack.Supervisor) {
	before := sup.WaitReady(t, "CRASH", 30*time.Second)
	inferOK(t, sup, "CRASH")
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after := sup.WaitFor(t, "CRASH", 60*time.Second, "restarted", func(s stack.Status) bool {
		return s.PID != 0 && s.PID != before.PID && s.State == "running" && s.Ready
	})
	if after.RestartCount != 1 || after.LastExitStatus != "killed by signal killed" {
		t.Fatalf("after the crash: %+v", after)
	}
	if testproc.Alive(before.PID) {
		t.Fatalf("old pid %d still alive", before.PID)
	}
	inferOK(t, sup, "CRASH")
	rep, _ := sup.API("GET", "/api/v1/servers/CRASH/logs?limit=1000")
	if !bytes.Contains(rep.Body, []byte("[supervisor] process exited: killed by signal killed")) ||
		!bytes.Contains(rep.Body, []byte(fmt.Sprintf("[supervisor] started pid %d", after.PID))) {
		t.Fatalf("logs: %s", rep)
	}
	rep, _ = sup.API("GET", "/api/v1/metrics")
	if !bytes.Contains(rep.Body, []byte(`mortred_supervisor_restarts_total{server="CRASH"} 1`)) {
		t.Fatalf("restart not counted:\n%s", rep.Body)
	}
}

func testFailedAfterLimit(t *testing.T, sup *stack.Supervisor) {
	if st := sup.Server(t, "BROKEN"); st.State != "stopped" {
		t.Fatalf("BROKEN should wait for a start (autostart = false): %+v", st)
	}
	rep, err := sup.API("POST", "/api/v1/servers/BROKEN/start")
	if err != nil || rep.Code != 200 {
		t.Fatalf("start: %v %v", rep, err)
	}
	// Backoff 0.5+1+2+4+8 s between six quick exits. While it waits, the
	// note quotes the child's own last error line (mortred-server's
	// "mortred-server: <error>", its program name cut).
	reason := regexp.MustCompile(`^exited \(exit status 1\): loading model \S+/BROKEN\.toml \(type testmodel\) instance 0: testmodel: \S+/BROKEN\.toml: unknown keys \[no_such_key\]; restarting in \d`)
	var backoffNote string
	st := sup.WaitFor(t, "BROKEN", 90*time.Second, "failed", func(s stack.Status) bool {
		if s.State == "backoff" && backoffNote == "" {
			backoffNote = s.Error
		}
		return s.State == "failed"
	})
	if !reason.MatchString(backoffNote) {
		t.Errorf("backoff note %q does not match %s", backoffNote, reason)
	}
	if st.RestartCount != 5 || st.PID != 0 || st.Ready || st.LastExitStatus != "exit status 1" ||
		!strings.Contains(st.Error, "exited 6 times in a row (last: exit status 1): loading model ") ||
		!strings.Contains(st.Error, "unknown keys [no_such_key]; giving up — fix the cause, then start it again") {
		t.Fatalf("failed status: %+v", st)
	}
	// mortredctl status shows the same note (the UI shows the same field).
	if r := ctl(t, sup, nil, "status"); r.code != 0 || !strings.Contains(r.stdout, "unknown keys [no_such_key]; giving up") {
		t.Errorf("mortredctl status lacks the reason: %s", r)
	}
	// The child's own reason is in its log.
	rep, _ = sup.API("GET", "/api/v1/servers/BROKEN/logs?limit=1000")
	if !bytes.Contains(rep.Body, []byte("no_such_key")) || bytes.Count(rep.Body, []byte("[supervisor] started pid")) != 6 {
		t.Fatalf("logs: %s", rep)
	}
	rep, _ = sup.API("GET", "/api/v1/metrics")
	for _, want := range []string{`mortred_supervisor_state{server="BROKEN"} 4`, `mortred_supervisor_restarts_total{server="BROKEN"} 5`} {
		if !bytes.Contains(rep.Body, []byte(want)) {
			t.Fatalf("metrics lack %s", want)
		}
	}
	// Through the gateway a failed model is unavailable, not an error page.
	rep, _ = stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + "/v1/models/BROKEN/infer", Token: sup.Tokens.API, Body: stack.Envelope("x", "", stack.DarkPNG)})
	if rep.Code != 503 {
		t.Fatalf("gateway on a failed model: %s", rep)
	}
}

func testGracefulRestart(t *testing.T, sup *stack.Supervisor) {
	gw := sup.Conf.GatewayURL() + "/v1/models/GRACE"
	before := sup.WaitReady(t, "GRACE", 30*time.Second)
	submit := func(delay int) jobAnswer {
		rep, err := stack.Do(stack.Req{URL: gw + "/jobs", Token: sup.Tokens.API, Body: stack.Envelope(fmt.Sprint("grace-", delay), fmt.Sprintf(`{"delay_ms":%d}`, delay), stack.DarkPNG)})
		var j jobAnswer
		if err != nil || rep.Code != 202 || rep.JSON(&j) != nil {
			t.Fatalf("submit: %v %v", rep, err)
		}
		return j
	}
	// Two workers: the short job finishes while the long one still runs.
	short, long := submit(800), submit(3000)
	longDone := make(chan string, 1)
	go func() {
		rep, err := stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + long.PollURL + "/wait?timeout=60000", Token: sup.Tokens.API})
		var st jobAnswer
		if err != nil || rep.JSON(&st) != nil {
			longDone <- fmt.Sprintf("wait failed: %v %v", rep, err)
			return
		}
		longDone <- st.State
	}()
	type result struct {
		rep stack.Reply
		err error
		at  time.Time
	}
	restarted := make(chan result, 1)
	go func() {
		rep, err := sup.API("POST", "/api/v1/servers/GRACE/graceful_restart")
		restarted <- result{rep, err, time.Now()}
	}()

	// The short job's result is retrievable while the supervisor waits.
	rep, _ := stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + short.PollURL + "/wait?timeout=60000", Token: sup.Tokens.API})
	var st jobAnswer
	if rep.JSON(&st) != nil || st.State != "done" {
		t.Fatalf("short job: %s", rep)
	}
	wantEnvelope(t, mustDo(t, stack.Req{URL: sup.Conf.GatewayURL() + short.ResultURL, Token: sup.Tokens.API}), 200, 0)
	select {
	case r := <-restarted:
		t.Fatalf("graceful_restart returned while a job was still running: %v %v", r.rep, r.err)
	default:
	}
	var state string
	select {
	case state = <-longDone:
	case <-time.After(90 * time.Second):
		t.Fatal("the long job never finished")
	}
	longAt := time.Now()
	if state != "done" {
		t.Fatalf("the long job ended %q: graceful_restart did not wait for it", state)
	}
	var r result
	select {
	case r = <-restarted:
	case <-time.After(3 * time.Minute):
		t.Fatal("graceful_restart did not return")
	}
	if r.err != nil || r.rep.Code != 200 || strings.TrimSpace(string(r.rep.Body)) != `{"ok":true}` {
		t.Fatalf("graceful_restart: %v %v", r.rep, r.err)
	}
	if r.at.Before(longAt.Add(-time.Second)) {
		t.Fatalf("graceful_restart returned %s before the long job ended", longAt.Sub(r.at))
	}
	after := sup.WaitReady(t, "GRACE", 60*time.Second)
	if after.PID == before.PID || after.RestartCount != 0 {
		t.Fatalf("not restarted (or counted as a crash): before %+v after %+v", before, after)
	}
	// The ledger is in memory: the new process does not know the old jobs.
	if rep := mustDo(t, stack.Req{URL: sup.Conf.GatewayURL() + short.ResultURL, Token: sup.Tokens.API}); rep.Code != 404 {
		t.Fatalf("old job after the restart: %s", rep)
	}
}

func mustDo(t *testing.T, r stack.Req) stack.Reply {
	t.Helper()
	rep, err := stack.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func testNoOrphans(t *testing.T, sup *stack.Supervisor) {
	var pids []int
	for _, id := range []string{"gateway", "TM", "CRASH", "GRACE"} {
		st := sup.Server(t, id)
		if st.PID <= 0 {
			t.Fatalf("%s not running: %+v", id, st)
		}
		pids = append(pids, st.PID)
	}
	gw := sup.Conf.GatewayURL()
	infer := func(params string) (stack.Reply, error) {
		return stack.Do(stack.Req{Method: "POST", URL: gw + "/v1/models/TM/infer", Token: sup.Tokens.API, CType: "application/json",
			Body: stack.Envelope("stop", params, stack.LightPNG)})
	}
	// A request in flight when the SIGTERM comes.
	type result struct {
		rep stack.Reply
		err error
	}
	inflight := make(chan result, 1)
	go func() {
		rep, err := infer(`{"delay_ms":2500}`)
		inflight <- result{rep, err}
	}()
	// Sent before the signal; one that arrived only during the drain
	// would be served all the same.
	time.Sleep(300 * time.Millisecond)
	if err := sup.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The gateway stops first: while it drains, /readyz says so and new
	// requests are still served (the models have not been told to stop).
	testproc.Eventually(t, 1200*time.Millisecond, "/readyz 503 draining", func() error {
		r, err := stack.Do(stack.Req{URL: gw + "/readyz"})
		if err != nil || r.Code != 503 || !bytes.Contains(r.Body, []byte(`"draining":true`)) {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	if r, err := infer(""); err != nil || r.Code != 200 {
		t.Errorf("a request while the gateway drains: %v %v; want it served", r, err)
	}
	code, ok := sup.ExitCode(60 * time.Second)
	if !ok || code != 0 {
		t.Fatalf("supervisor exit %d (exited: %v): %s", code, ok, sup.Output())
	}
	if r := <-inflight; r.err != nil || r.rep.Code != 200 {
		t.Errorf("the request in flight at SIGTERM: %v %v; want it served", r.rep, r.err)
	}
	for _, pid := range pids {
		if testproc.Alive(pid) {
			t.Errorf("child pid %d outlived the supervisor", pid)
		}
		if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
			t.Errorf("process group %d still has members (%v)", pid, err)
		}
	}
	if _, err := stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + "/healthz"}); err == nil {
		t.Error("the gateway still answers")
	}
}
