package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

const (
	gwToken    = "gw-inference-token-0123456789"
	gwMetrics  = "gw-metrics-token-0123456789"
	gwModelTok = "gw-model-token-0123456789"
	// Also in the gateway's environment, but MORTRED_GATEWAY_AUTH_TOKEN wins.
	gwAPIToken = "gw-api-token-not-for-inference"
)

// gatewayRig is a gateway process in front of real model-server processes
// (and one raw TCP listener that resets its connections).
type gatewayRig struct {
	conf   *stack.Conf
	url    string
	models map[string]*testproc.Proc
	gw     *testproc.Proc
}

func (g *gatewayRig) do(t *testing.T, r stack.Req) stack.Reply {
	t.Helper()
	r.URL = g.url + r.URL
	rep, err := stack.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	return rep
}

func envelopeOf(t *testing.T, rep stack.Reply) stack.Response {
	t.Helper()
	var env stack.Response
	if err := rep.JSON(&env); err != nil {
		t.Fatal(err)
	}
	return env
}

func wantEnvelope(t *testing.T, rep stack.Reply, code, status int) stack.Response {
	t.Helper()
	if rep.Code != code {
		t.Fatalf("HTTP %d, want %d: %s", rep.Code, code, rep)
	}
	env := envelopeOf(t, rep)
	if env.Status != status {
		t.Fatalf("status %d, want %d: %s", env.Status, status, rep)
	}
	return env
}

// startModel runs one model server from the generated catalog with token.
func startModel(t *testing.T, conf *stack.Conf, id, token string) *testproc.Proc {
	t.Helper()
	p := stack.Start(t, testproc.Bin(t, "mortred-server"), []string{"--config", conf.ServerFile(id)},
		stack.BaseEnv("MORTRED_AUTH_TOKEN="+token))
	url := fmt.Sprintf("http://127.0.0.1:%d/ready", conf.Models[id].Port)
	testproc.Eventually(t, 60*time.Second, id+" ready", func() error {
		select {
		case <-p.Done():
			t.Fatalf("model server %s exited: %s", id, p.Output())
		default:
		}
		r, err := stack.Do(stack.Req{URL: url})
		if err != nil || r.Code != 200 {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	return p
}

// resetListener stands in for a model server that breaks: it reads each
// request and then resets the connection, after sending nothing, half a
// status line, or the headers and part of the body, by path.
func resetListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				switch {
				case strings.HasSuffix(req.URL.Path, "/halfstatus"):
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Le")
				case strings.HasSuffix(req.URL.Path, "/result"):
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"status\":0,\"partial")
				}
				time.Sleep(50 * time.Millisecond)
				_ = c.(*net.TCPConn).SetLinger(0) // close sends RST
			}()
		}
	}()
	return l
}

func TestGateway(t *testing.T) {
	t.Parallel()
	reset := resetListener(t)
	models := []stack.Model{
		{ID: "TM", Keys: map[string]any{"request_size_limit": 1, "max_request_items": 2}},
		{ID: "NOASYNC", Keys: map[string]any{"async_enabled": false}},
		{ID: "QUEUE", Keys: map[string]any{"worker_nums": 1, "max_queue_depth": 1}},
		{ID: "DEADLINE", Keys: map[string]any{"worker_nums": 1, "model_run_timeout": 2500}},
		{ID: "WRONGTOK"},
		{ID: "STOPPED"},
		{ID: "RESET", Port: reset.Addr().(*net.TCPAddr).Port},
	}
	conf := stack.WriteConf(t, models, map[string]any{"request_size_limit_mb": 4})
	rig := &gatewayRig{conf: conf, url: conf.GatewayURL(), models: map[string]*testproc.Proc{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range models {
		if m.ID == "RESET" {
			continue
		}
		tok := gwModelTok
		if m.ID == "WRONGTOK" {
			tok = "a-token-the-gateway-does-not-have"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := startModel(t, conf, m.ID, tok)
			mu.Lock()
			rig.models[m.ID] = p
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rig.gw = stack.Start(t, testproc.Bin(t, "mortred-gateway"), []string{"--config", conf.File}, stack.BaseEnv(
		"MORTRED_GATEWAY_AUTH_TOKEN="+gwToken, "MORTRED_API_TOKEN="+gwAPIToken,
		"MORTRED_METRICS_TOKEN="+gwMetrics, "MORTRED_AUTH_TOKEN="+gwModelTok))
	testproc.Eventually(t, 30*time.Second, "gateway /healthz", func() error {
		r, err := stack.Do(stack.Req{URL: rig.url + "/healthz"})
		if err != nil || r.Code != 200 {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})

	t.Run("group", func(t *testing.T) {
		t.Run("Routes", func(t *testing.T) { t.Parallel(); testGatewayRoutes(t, rig) })
		t.Run("Jobs", func(t *testing.T) { t.Parallel(); testGatewayJobs(t, rig) })
		t.Run("Tokens", func(t *testing.T) { t.Parallel(); testGatewayTokens(t, rig) })
		t.Run("PassThrough", func(t *testing.T) { t.Parallel(); testGatewayPassThrough(t, rig) })
		t.Run("QueueFull429", func(t *testing.T) { t.Parallel(); testGatewayQueueFull(t, rig) })
		t.Run("Deadline68And504", func(t *testing.T) { t.Parallel(); testGatewayDeadline(t, rig) })
		t.Run("Stopped503", func(t *testing.T) { t.Parallel(); testGatewayStopped(t, rig) })
		t.Run("Reset502", func(t *testing.T) { t.Parallel(); testGatewayReset(t, rig) })
		t.Run("ClientHangUp", func(t *testing.T) { t.Parallel(); testGatewayHangUp(t, rig) })
		t.Run("StreamedBodyOverLimit", func(t *testing.T) { t.Parallel(); testGatewayChunkedLimit(t, rig) })
	})
	t.Run("Metrics", func(t *testing.T) {
		rep := rig.do(t, stack.Req{URL: "/metrics", Token: gwMetrics})
		if rep.Code != 200 {
			t.Fatalf("GET /metrics with the metrics token: %s", rep)
		}
		for _, want := range []string{
			`mortred_gateway_requests_total{model="TM",status="200"}`,
			`mortred_gateway_upstream_errors_total{kind="refused",model="STOPPED"}`,
			`mortred_gateway_upstream_errors_total{kind="transport",model="RESET"}`,
			`mortred_gateway_upstream_errors_total{kind="mid_response",model="RESET"}`,
			`mortred_gateway_unauthorized_total`,
		} {
			if !bytes.Contains(rep.Body, []byte(want)) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func testGatewayRoutes(t *testing.T, g *gatewayRig) {
	t.Run("healthz is public", func(t *testing.T) {
		if rep := g.do(t, stack.Req{URL: "/healthz"}); rep.Code != 200 {
			t.Fatal(rep)
		}
	})
	t.Run("infer by catalog id", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: stack.Envelope("r-1", "", stack.DarkPNG, stack.LightPNG)})
		env := wantEnvelope(t, rep, 200, 0)
		if rep.Header.Get("X-Mortred-Model") != "TM" || env.TaskID != "r-1" || len(env.Results) != 2 {
			t.Fatalf("%v %s", rep.Header, rep)
		}
		if !bytes.Contains(env.Results[0].Data, []byte(`"dark"`)) || !bytes.Contains(env.Results[1].Data, []byte(`"light"`)) {
			t.Fatalf("results %s", rep)
		}
	})
	t.Run("legacy server_uri", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: g.conf.Models["TM"].URI(), Token: gwToken, Body: stack.Envelope("legacy", "", stack.LightPNG)})
		wantEnvelope(t, rep, 200, 0)
		if rep.Header.Get("X-Mortred-Model") != "TM" {
			t.Fatalf("X-Mortred-Model %q", rep.Header.Get("X-Mortred-Model"))
		}
	})
	t.Run("GET on infer paths is 405", func(t *testing.T) {
		for _, p := range []string{"/v1/models/TM/infer", g.conf.Models["TM"].URI()} {
			rep := g.do(t, stack.Req{URL: p, Token: gwToken})
			wantEnvelope(t, rep, 405, 62)
			if rep.Header.Get("Allow") != "POST" {
				t.Fatalf("%s: Allow %q", p, rep.Header.Get("Allow"))
			}
		}
	})
	t.Run("unknown id and path are the 404 envelope", func(t *testing.T) {
		for _, p := range []string{"/v1/models/NOPE/infer", "/v1/models/NOPE/jobs", "/mortred_ai_server_v1/classification/nope", "/welcome"} {
			wantEnvelope(t, g.do(t, stack.Req{URL: p, Token: gwToken, Body: stack.Envelope("x", "", stack.DarkPNG)}), 404, 63)
		}
	})
}

type jobAnswer struct {
	JobID     string `json:"job_id"`
	State     string `json:"state"`
	PollURL   string `json:"poll_url"`
	ResultURL string `json:"result_url"`
}

func testGatewayJobs(t *testing.T, g *gatewayRig) {
	rep := g.do(t, stack.Req{URL: "/v1/models/TM/jobs", Token: gwToken, Body: stack.Envelope("job-1", `{"delay_ms":3000}`, stack.LightPNG)})
	if rep.Code != 202 {
		t.Fatalf("POST jobs: %s", rep)
	}
	var j jobAnswer
	if err := rep.JSON(&j); err != nil {
		t.Fatal(err)
	}
	prefix := "/v1/models/TM/jobs/" + j.JobID
	if j.JobID == "" || j.State != "pending" || j.PollURL != prefix || j.ResultURL != prefix+"/result" {
		t.Fatalf("job URLs not rewritten onto the catalog prefix: %s", rep)
	}
	if loc := rep.Header.Get("Location"); loc != prefix {
		t.Fatalf("Location %q, want %q", loc, prefix)
	}
	if rep.Header.Get("X-Mortred-Model") != "TM" {
		t.Fatalf("X-Mortred-Model %q", rep.Header.Get("X-Mortred-Model"))
	}
	// Still running: the result is 409 and a 1 ms wait comes back unfinished
	// (the query reaches the model server; without it the wait is 30 s).
	if rep := g.do(t, stack.Req{URL: j.ResultURL, Token: gwToken}); rep.Code != 409 {
		t.Fatalf("result before done: %s", rep)
	}
	start := time.Now()
	rep = g.do(t, stack.Req{URL: j.PollURL + "/wait?timeout=1", Token: gwToken})
	var st jobAnswer
	if err := rep.JSON(&st); err != nil || rep.Code != 200 || st.State == "done" || time.Since(start) > 2500*time.Millisecond {
		t.Fatalf("wait?timeout=1 after %s: %s", time.Since(start), rep)
	}
	rep = g.do(t, stack.Req{URL: j.PollURL, Token: gwToken})
	if err := rep.JSON(&st); err != nil || rep.Code != 200 || st.JobID != j.JobID {
		t.Fatalf("GET job: %s", rep)
	}
	rep = g.do(t, stack.Req{URL: j.PollURL + "/wait?timeout=60000", Token: gwToken})
	if err := rep.JSON(&st); err != nil || rep.Code != 200 || st.State != "done" {
		t.Fatalf("wait: %s", rep)
	}
	rep = g.do(t, stack.Req{URL: j.ResultURL, Token: gwToken})
	env := wantEnvelope(t, rep, 200, 0)
	if env.TaskID != "job-1" || len(env.Results) != 1 || !bytes.Contains(env.Results[0].Data, []byte(`"light"`)) {
		t.Fatalf("result: %s", rep)
	}
	// Repeatable.
	wantEnvelope(t, g.do(t, stack.Req{URL: j.ResultURL, Token: gwToken}), 200, 0)

	t.Run("unknown job passes the model's 404", func(t *testing.T) {
		for _, p := range []string{"/v1/models/TM/jobs/job-nope", "/v1/models/TM/jobs/job-nope/wait", "/v1/models/TM/jobs/job-nope/result"} {
			rep := g.do(t, stack.Req{URL: p, Token: gwToken})
			if rep.Code != 404 || rep.Header.Get("X-Mortred-Model") != "TM" {
				t.Fatalf("%s: %s", p, rep)
			}
		}
	})
	t.Run("async off passes the model's 404", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/NOASYNC/jobs", Token: gwToken, Body: stack.Envelope("x", "", stack.DarkPNG)})
		env := wantEnvelope(t, rep, 404, 63)
		if rep.Header.Get("X-Mortred-Model") != "NOASYNC" || len(env.Errors) == 0 || !strings.Contains(env.Errors[0].Message, "async") {
			t.Fatalf("%s", rep)
		}
	})
	t.Run("wrong methods on job routes are 405", func(t *testing.T) {
		for _, c := range []struct{ method, path, allow string }{
			{"GET", "/v1/models/TM/jobs", "POST"},
			{"POST", "/v1/models/TM/jobs/x", "GET"},
			{"DELETE", "/v1/models/TM/jobs/x/result", "GET"},
		} {
			rep := g.do(t, stack.Req{Method: c.method, URL: c.path, Token: gwToken})
			wantEnvelope(t, rep, 405, 62)
			if rep.Header.Get("Allow") != c.allow {
				t.Fatalf("%s %s: Allow %q", c.method, c.path, rep.Header.Get("Allow"))
			}
		}
	})
}

func testGatewayTokens(t *testing.T, g *gatewayRig) {
	routes := []struct{ method, path string }{
		{"POST", "/v1/models/TM/infer"},
		{"POST", "/v1/models/TM/jobs"},
		{"GET", "/v1/models/TM/jobs/j"},
		{"GET", "/v1/models/TM/jobs/j/wait"},
		{"GET", "/v1/models/TM/jobs/j/result"},
		{"POST", g.conf.Models["TM"].URI()},
		{"GET", "/v1/models/NOPE/infer"},
		{"GET", "/nope"},
		{"GET", "/metrics"},
	}
	for _, r := range routes {
		// The API token is refused because MORTRED_GATEWAY_AUTH_TOKEN takes
		// precedence; the metrics token opens /metrics only; the inference
		// token never opens /metrics.
		bad := []string{"", "wrong", gwAPIToken, gwModelTok, gwMetrics}
		if r.path == "/metrics" {
			bad = []string{"", "wrong", gwAPIToken, gwModelTok, gwToken}
		}
		for _, tok := range bad {
			var body []byte
			if r.method == "POST" {
				body = stack.Envelope("x", "", stack.DarkPNG)
			}
			rep := g.do(t, stack.Req{Method: r.method, URL: r.path, Token: tok, Body: body})
			if rep.Code != 401 || rep.Header.Get("WWW-Authenticate") != `Bearer realm="Mortred"` {
				t.Errorf("%s %s with token %q: %s", r.method, r.path, tok, rep)
				continue
			}
			wantEnvelope(t, rep, 401, 401)
		}
	}
	if rep := g.do(t, stack.Req{URL: "/metrics", Token: gwMetrics}); rep.Code != 200 || !bytes.Contains(rep.Body, []byte("mortred_gateway_unauthorized_total")) {
		t.Fatalf("metrics with the metrics token: %s", rep)
	}
	// A lowercase scheme is still a Bearer token.
	rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Body: stack.Envelope("x", "", stack.DarkPNG), Header: map[string]string{"Authorization": "bearer " + gwToken}})
	wantEnvelope(t, rep, 200, 0)
}

func testGatewayPassThrough(t *testing.T, g *gatewayRig) {
	t.Run("401 from the model", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/WRONGTOK/infer", Token: gwToken, Body: stack.Envelope("x", "", stack.DarkPNG)})
		env := wantEnvelope(t, rep, 401, 401)
		if rep.Header.Get("X-Mortred-Model") != "WRONGTOK" || rep.Header.Get("WWW-Authenticate") == "" || len(env.Errors) == 0 {
			t.Fatalf("not the model's own 401: %v %s", rep.Header, rep)
		}
	})
	t.Run("413 body over the model's limit", func(t *testing.T) {
		big := bytes.Repeat([]byte("A"), 2<<20) // over TM's 1 MB, under the gateway's 4 MB
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: stack.Envelope("big", "", string(big))})
		wantEnvelope(t, rep, 413, 61)
		if rep.Header.Get("X-Mortred-Model") != "TM" {
			t.Fatal("413 did not come from the model")
		}
	})
	t.Run("413 too many items", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: stack.Envelope("many", "", stack.DarkPNG, stack.DarkPNG, stack.DarkPNG)})
		wantEnvelope(t, rep, 413, 67)
	})
	t.Run("413 over the gateway's own limit", func(t *testing.T) {
		big := bytes.Repeat([]byte("A"), 5<<20)
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: stack.Envelope("huge", "", string(big))})
		wantEnvelope(t, rep, 413, 61)
	})
	t.Run("415", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, CType: "text/plain", Body: stack.Envelope("x", "", stack.DarkPNG)})
		wantEnvelope(t, rep, 415, 60)
	})
	t.Run("422", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: []byte(`{"req_id":"legacy","img_data":"abc"}`)})
		env := wantEnvelope(t, rep, 422, 66)
		if len(env.Errors) == 0 || env.Errors[0].Pointer != "/img_data" {
			t.Fatalf("%s", rep)
		}
		rep = g.do(t, stack.Req{URL: "/v1/models/TM/infer", Token: gwToken, Body: stack.Envelope("x", `{"nope":1}`, stack.DarkPNG)})
		env = wantEnvelope(t, rep, 422, 66)
		if len(env.Errors) == 0 || env.Errors[0].Pointer != "/params/nope" {
			t.Fatalf("%s", rep)
		}
	})
}

func testGatewayQueueFull(t *testing.T, g *gatewayRig) {
	// One worker and a queue of one: of four slow requests at once, at most
	// two are admitted before the first finishes.
	const n = 4
	reps := make([]stack.Reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = stack.Do(stack.Req{URL: g.url + "/v1/models/QUEUE/infer", Token: gwToken,
				Body: stack.Envelope("q"+strconv.Itoa(i), `{"delay_ms":2000}`, stack.DarkPNG)})
		}()
	}
	wg.Wait()
	ok, full := 0, 0
	for i, rep := range reps {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch rep.Code {
		case 200:
			ok++
		case 429:
			full++
			env := wantEnvelope(t, rep, 429, 429)
			ra, err := strconv.Atoi(rep.Header.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 60 || rep.Header.Get("X-Mortred-Model") != "QUEUE" || len(env.Errors) == 0 {
				t.Fatalf("429 without the model's Retry-After: %v %s", rep.Header, rep)
			}
		default:
			t.Fatalf("unexpected %s", rep)
		}
	}
	if ok < 1 || full < 1 {
		t.Fatalf("%d answered, %d refused; want both", ok, full)
	}
}

func testGatewayDeadline(t *testing.T, g *gatewayRig) {
	// model_run_timeout 2500 ms, one worker, no batching.
	rep := g.do(t, stack.Req{URL: "/v1/models/DEADLINE/infer", Token: gwToken, Body: stack.Envelope("partial", `{"delay_ms":1500}`, stack.DarkPNG, stack.LightPNG)})
	env := wantEnvelope(t, rep, 200, 68)
	if !env.Partial || len(env.Results) != 2 || env.Results[0].Status != 0 || env.Results[1].Status != 4 || string(env.Results[1].Data) != "null" {
		t.Fatalf("partial: %s", rep)
	}
	rep = g.do(t, stack.Req{URL: "/v1/models/DEADLINE/infer", Token: gwToken, Body: stack.Envelope("late", `{"delay_ms":3000}`, stack.DarkPNG)})
	env = wantEnvelope(t, rep, 504, 4)
	if env.Partial || len(env.Results) != 1 || env.Results[0].Status != 4 {
		t.Fatalf("timeout: %s", rep)
	}
}

func testGatewayStopped(t *testing.T, g *gatewayRig) {
	wantEnvelope(t, g.do(t, stack.Req{URL: "/v1/models/STOPPED/infer", Token: gwToken, Body: stack.Envelope("x", "", stack.DarkPNG)}), 200, 0)
	p := g.models["STOPPED"]
	p.Stop(15 * time.Second)
	if code, _ := p.ExitCode(0); code != 0 {
		t.Fatalf("model server exit %d on SIGTERM: %s", code, p.Output())
	}
	for _, r := range []stack.Req{
		{URL: "/v1/models/STOPPED/infer", Body: stack.Envelope("x", "", stack.DarkPNG)},
		{URL: g.conf.Models["STOPPED"].URI(), Body: stack.Envelope("x", "", stack.DarkPNG)},
		{URL: "/v1/models/STOPPED/jobs/j"},
	} {
		r.Token = gwToken
		rep := g.do(t, r)
		env := wantEnvelope(t, rep, 503, 65)
		if rep.Header.Get("Retry-After") == "" || len(env.Errors) == 0 || !strings.Contains(env.Errors[0].Message, "mortredctl start STOPPED") {
			t.Fatalf("%s: %v %s", r.URL, rep.Header, rep)
		}
	}
}

func testGatewayReset(t *testing.T, g *gatewayRig) {
	t.Run("before any byte", func(t *testing.T) {
		rep := g.do(t, stack.Req{URL: "/v1/models/RESET/infer", Token: gwToken, Body: stack.Envelope("x", "", stack.DarkPNG)})
		env := wantEnvelope(t, rep, 502, 500)
		if len(env.Errors) == 0 || !strings.Contains(env.Errors[0].Message, "RESET") {
			t.Fatalf("%s", rep)
		}
	})
	t.Run("inside the status line", func(t *testing.T) {
		wantEnvelope(t, g.do(t, stack.Req{URL: "/v1/models/RESET/jobs/halfstatus", Token: gwToken}), 502, 500)
	})
	t.Run("inside the body", func(t *testing.T) {
		// Headers are already out: the client must see a broken answer,
		// never a short one that looks complete.
		rep, err := stack.Do(stack.Req{URL: g.url + "/v1/models/RESET/jobs/j/result", Token: gwToken})
		if err == nil {
			t.Fatalf("a reset mid-body reached the client as a complete answer: %s", rep)
		}
		if rep.Code != 0 && rep.Code != 200 {
			t.Fatalf("code %d", rep.Code)
		}
		var env map[string]any
		if json.Unmarshal(rep.Body, &env) == nil {
			t.Fatalf("the truncated body parses as JSON: %q", rep.Body)
		}
	})
}

func testGatewayHangUp(t *testing.T, g *gatewayRig) {
	// The client gives up while the model still works: counted as a hang-up,
	// never as an upstream error.
	req, _ := http.NewRequest("POST", g.url+"/v1/models/NOASYNC/infer", bytes.NewReader(stack.Envelope("gone", `{"delay_ms":2000}`, stack.DarkPNG)))
	req.Header.Set("Authorization", "Bearer "+gwToken)
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: tr, Timeout: 300 * time.Millisecond}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d before the model could", resp.StatusCode)
	}
	testproc.Eventually(t, 30*time.Second, "hang-up counted", func() error {
		rep := g.do(t, stack.Req{URL: "/metrics", Token: gwMetrics})
		if !bytes.Contains(rep.Body, []byte(`mortred_gateway_client_closed_total{model="NOASYNC"} 1`)) {
			return fmt.Errorf("not counted yet")
		}
		if bytes.Contains(rep.Body, []byte(`mortred_gateway_upstream_errors_total{kind="transport",model="NOASYNC"}`)) ||
			bytes.Contains(rep.Body, []byte(`mortred_gateway_requests_total{model="NOASYNC",status="502"}`)) {
			t.Fatalf("a hang-up was counted as an upstream failure:\n%s", rep.Body)
		}
		return nil
	})
}

func testGatewayChunkedLimit(t *testing.T, g *gatewayRig) {
	// No Content-Length: the limit (4 MB) is enforced while streaming to a
	// model whose own limit (16 MB) is higher.
	body := io.MultiReader(strings.NewReader(`{"req_id":"chunked","images":["`), io.LimitReader(neverEnding('A'), 5<<20), strings.NewReader(`"]}`))
	req, _ := http.NewRequest("POST", g.url+"/v1/models/NOASYNC/infer", body)
	req.Header.Set("Authorization", "Bearer "+gwToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := stack.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !bytes.Contains(data, []byte(`"status":61`)) {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
