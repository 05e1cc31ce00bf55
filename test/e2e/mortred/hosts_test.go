package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testnet"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// The edge's timeouts in this test: a request Nginx sent to a host whose
// link is cut fails after edgeReadTimeout; a host that failed twice is left
// out for edgeFailTimeout.
const (
	edgeReadTimeout = 15 * time.Second
	edgeFailTimeout = 10 * time.Second
)

// TestSeveralHosts: two hosts, each a network namespace on one LAN with its
// own supervisor, gateway and PPOCR_CLS (real ONNX Runtime), behind real
// Nginx configured by `mortredctl init-edge --gateways`. Requests spread
// over both; a job submitted on one host is found through the other, and
// only by its own tenant; when host 2's link is cut, only the requests
// Nginx had sent there fail, everything after the edge's health window is
// served by host 1, and host 2's jobs answer 503 naming it; when host 1
// is then killed outright, only what it was serving fails.
func TestSeveralHosts(t *testing.T) {
	needTool(t, nginxBin, "nginx-light")
	lan := testnet.NewLAN(t, 220+os.Getpid()%30)
	h1, h2 := lan.AddHost(), lan.AddHost()
	lib := orttest.Lib(t)
	repo, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tk := stack.NewTokens()

	// Two tenants' keys, one file for both hosts.
	alice, aliceHash, err := keys.NewSecret(keys.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	bob, bobHash, err := keys.NewSecret(keys.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "keys.toml")
	if err := os.WriteFile(keyFile, []byte(fmt.Sprintf("[[key]]\nid = \"alice\"\nhash = %q\n\n[[key]]\nid = \"bob\"\nhash = %q\n", aliceHash, bobHash)), 0o600); err != nil {
		t.Fatal(err)
	}

	peers := map[string]string{"h1": h1.Addr + ":8080", "h2": h2.Addr + ":8080"}
	model := stack.Model{ID: "PPOCR_CLS", Keys: map[string]any{
		"model_config_file_path": filepath.Join(repo, "conf", "models", "ppocr_cls.toml"), "worker_nums": 1, "intra_op_threads": 1,
	}}
	start := func(h *testnet.Host, id string) *stack.Supervisor {
		conf := stack.WriteConfAt(t, h.Addr, []stack.Model{model}, map[string]any{"host_id": id, "peers": peers, "keys_file": keyFile})
		return stack.StartSupervisorWith(t, conf, tk, h.Command(), "MORTRED_ORT_LIB="+lib)
	}
	var sup1, sup2 *stack.Supervisor
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sup1 = start(h1, "h1") }()
	go func() { defer wg.Done(); sup2 = start(h2, "h2") }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	sup1.WaitReady(t, "PPOCR_CLS", 90*time.Second)
	sup2.WaitReady(t, "PPOCR_CLS", 90*time.Second)

	// The edge, from the gateways' own /readyz.
	cert, key := opensslCert(t, dir)
	edge, port := filepath.Join(dir, "edge"), testproc.FreePort(t)
	r := ctl(t, sup1, nil, "init-edge", "--mode", "files", "--cert", cert, "--key", key, "--out", edge, "--listen", fmt.Sprint(port),
		"--server-name", "localhost", "--gateways", peers["h1"]+","+peers["h2"],
		"--read-timeout", edgeReadTimeout.String(), "--fail-timeout", edgeFailTimeout.String())
	if r.code != 0 || !strings.Contains(r.stdout, "host h1") || !strings.Contains(r.stdout, "host h2") {
		t.Fatalf("init-edge: %s", r)
	}
	site, err := os.ReadFile(filepath.Join(edge, "mortred-edge.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"least_conn;", "server " + peers["h1"] + " max_fails=2 fail_timeout=10s;", "server " + peers["h2"] + " max_fails=2 fail_timeout=10s;", "keepalive_timeout 5s;"} {
		if !bytes.Contains(site, []byte(want)) {
			t.Fatalf("edge config lacks %q:\n%s", want, site)
		}
	}
	startNginx(t, edge)
	client := trustingClient(t, cert, 2*time.Minute)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	send := func(url, method, token string, body []byte) (stack.Reply, error) {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			return stack.Reply{}, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		c := client
		if !strings.HasPrefix(url, "https:") {
			c = stack.Client
		}
		resp, err := c.Do(req)
		if err != nil {
			return stack.Reply{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return stack.Reply{Code: resp.StatusCode, Header: resp.Header, Body: b}, err
	}
	image := stack.Envelope("", "", stack.LightPNG)
	infer := base + "/v1/models/PPOCR_CLS/infer"
	testproc.Eventually(t, 30*time.Second, "an inference through the edge", func() error {
		rep, err := send(infer, "POST", alice, image)
		if err != nil || rep.Code != 200 {
			return fmt.Errorf("%v %v", rep, err)
		}
		return nil
	})

	// Requests spread over both hosts, and give the same answer on both.
	sync1, err := send("http://"+peers["h1"]+"/v1/models/PPOCR_CLS/infer", "POST", alice, image)
	if err != nil || sync1.Code != 200 {
		t.Fatalf("sync on h1: %v %v", sync1, err)
	}
	want := resultsOf(t, sync1.Body)
	load := runLoad(t, 4, 60, 30*time.Second, 0, func() (stack.Reply, error) { return send(infer, "POST", alice, image) })
	byHost := map[string]int{}
	for _, o := range load {
		if o.err != nil || o.rep.Code != 200 || resultsOf(t, o.rep.Body) != want {
			t.Fatalf("request through the edge: %v %v", o.rep, o.err)
		}
		byHost[o.rep.Header.Get("X-Mortred-Host")]++
	}
	if byHost["h1"] == 0 || byHost["h2"] == 0 || byHost["h1"]+byHost["h2"] != len(load) {
		t.Fatalf("answers by host %v: want both hosts", byHost)
	}
	t.Logf("%d requests through the edge: %v", len(load), byHost)

	// A job submitted on h1 is found through h2, by its own tenant only.
	sub, err := send("http://"+peers["h1"]+"/v1/models/PPOCR_CLS/jobs", "POST", alice, image)
	var job struct{ JobID, PollURL, ResultURL string }
	if err != nil || sub.Code != 202 || json.Unmarshal(sub.Body, &jobJSON{&job}) != nil || !strings.HasPrefix(job.JobID, "h1.") ||
		job.ResultURL != "/v1/models/PPOCR_CLS/jobs/"+job.JobID+"/result" {
		t.Fatalf("job on h1: %v %v", sub, err)
	}
	wait, err := send("http://"+peers["h2"]+job.PollURL+"/wait?timeout=30000", "GET", alice, nil)
	if err != nil || wait.Code != 200 || !bytes.Contains(wait.Body, []byte(`"state":"done"`)) || wait.Header.Get("X-Mortred-Host") != "h1" {
		t.Fatalf("waiting through h2: %v %v", wait, err)
	}
	res, err := send("http://"+peers["h2"]+job.ResultURL, "GET", alice, nil)
	if err != nil || res.Code != 200 || resultsOf(t, res.Body) != want {
		t.Fatalf("the job's result through h2: %v %v; want the sync answer's results %s", res, err, want)
	}
	for _, c := range []struct {
		what, url, token string
		code             int
	}{
		{"another tenant's job", "http://" + peers["h2"] + job.ResultURL, bob, 404},
		{"the operator", "http://" + peers["h2"] + job.ResultURL, tk.API, 200},
		{"a made-up host", "http://" + peers["h2"] + "/v1/models/PPOCR_CLS/jobs/h9." + strings.TrimPrefix(job.JobID, "h1."), alice, 404},
		{"a made-up job on h1", "http://" + peers["h2"] + "/v1/models/PPOCR_CLS/jobs/h1.job-000000000000000000000000", alice, 404},
		{"a bad key, never forwarded", "http://" + peers["h2"] + job.ResultURL, "sk-mortred-nope", 401},
		{"through the edge", base + job.ResultURL, alice, 200},
	} {
		rep, err := send(c.url, "GET", c.token, nil)
		if err != nil || rep.Code != c.code {
			t.Errorf("%s: %v %v; want %d", c.what, rep, err, c.code)
		}
	}
	// Jobs submitted and fetched through the edge land anywhere.
	for i := range 6 {
		sub, err := send(base+"/v1/models/PPOCR_CLS/jobs", "POST", alice, image)
		var j struct{ JobID, PollURL, ResultURL string }
		if err != nil || sub.Code != 202 || json.Unmarshal(sub.Body, &jobJSON{&j}) != nil {
			t.Fatalf("job %d through the edge: %v %v", i, sub, err)
		}
		if w, err := send(base+j.PollURL+"/wait?timeout=30000", "GET", alice, nil); err != nil || w.Code != 200 || !bytes.Contains(w.Body, []byte(`"state":"done"`)) {
			t.Fatalf("job %s through the edge: %v %v", j.JobID, w, err)
		}
		if res, err := send(base+j.ResultURL, "GET", alice, nil); err != nil || res.Code != 200 || resultsOf(t, res.Body) != want {
			t.Fatalf("job %s's result through the edge: %v %v", j.JobID, res, err)
		}
	}

	// A job of h2's, done before its link is cut.
	sub2, err := send("http://"+peers["h2"]+"/v1/models/PPOCR_CLS/jobs", "POST", alice, image)
	var job2 struct{ JobID, PollURL, ResultURL string }
	if err != nil || sub2.Code != 202 || json.Unmarshal(sub2.Body, &jobJSON{&job2}) != nil || !strings.HasPrefix(job2.JobID, "h2.") {
		t.Fatalf("job on h2: %v %v", sub2, err)
	}

	// Cut h2's link under load.
	var cut time.Time
	var during []outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		during = runLoad(t, 4, 10000, edgeReadTimeout+edgeFailTimeout+12*time.Second, 20*time.Millisecond, func() (stack.Reply, error) { return send(infer, "POST", alice, image) })
	}()
	time.Sleep(2 * time.Second)
	cut = time.Now()
	h2.Cut()
	<-done
	window := cut.Add(edgeReadTimeout + 2*time.Second)
	var failed, after, afterH1 int
	for _, o := range during {
		ok := o.err == nil && o.rep.Code == 200 && resultsOf(t, o.rep.Body) == want
		switch {
		case !ok && o.err == nil && o.rep.Code/100 == 2:
			t.Errorf("a 2xx answer that is not the model's: %v", o.rep)
		case !ok && o.start.Before(cut.Add(-time.Second)):
			t.Errorf("a request sent %v before the cut failed: %v %v", cut.Sub(o.start), o.rep, o.err)
		case !ok && o.start.After(window):
			t.Errorf("a request sent %v after the cut, after the edge's health window, failed: %v %v", o.start.Sub(cut), o.rep, o.err)
		case !ok:
			failed++
		}
		if o.start.After(window) {
			after++
			if ok && o.rep.Header.Get("X-Mortred-Host") == "h1" {
				afterH1++
			}
		}
	}
	t.Logf("link cut: %d requests, %d failed (sent to h2 before the edge left it out), %d after the window, %d of them served by h1",
		len(during), failed, after, afterH1)
	if after == 0 || afterH1 != after {
		t.Fatalf("after the health window %d requests, %d served by h1; want all", after, afterH1)
	}

	// h2's job, polled through h1: a 503 naming h2, not a 404.
	rep, err := send("http://"+peers["h1"]+job2.PollURL, "GET", alice, nil)
	if err != nil || rep.Code != 503 || !bytes.Contains(rep.Body, []byte("host h2")) || rep.Header.Get("Retry-After") == "" {
		t.Fatalf("h2's job while h2 is cut off: %v %v; want 503 naming host h2", rep, err)
	}

	// h2 comes back; then host 1 dies at once (SIGKILL of its supervisor:
	// its children die with it). Only what h1 was serving fails.
	h2.Restore()
	testproc.Eventually(t, 2*edgeFailTimeout+10*time.Second, "the edge serving from h2 again", func() error {
		rep, err := send(infer, "POST", alice, image)
		if err != nil || rep.Code != 200 || rep.Header.Get("X-Mortred-Host") != "h2" {
			return fmt.Errorf("%v %v", rep, err)
		}
		return nil
	})
	var killed time.Time
	done = make(chan struct{})
	go func() {
		defer close(done)
		during = runLoad(t, 4, 10000, 12*time.Second, 20*time.Millisecond, func() (stack.Reply, error) { return send(infer, "POST", alice, image) })
	}()
	time.Sleep(2 * time.Second)
	killed = time.Now()
	if err := sup1.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	failed, after, afterH2 := 0, 0, 0
	for _, o := range during {
		ok := o.err == nil && o.rep.Code == 200 && resultsOf(t, o.rep.Body) == want
		switch {
		case !ok && o.err == nil && o.rep.Code/100 == 2:
			t.Errorf("a 2xx answer that is not the model's: %v", o.rep)
		case !ok && (o.start.Before(killed.Add(-time.Second)) || o.start.After(killed.Add(time.Second))):
			t.Errorf("a request sent %v from the kill failed: %v %v", o.start.Sub(killed), o.rep, o.err)
		case !ok:
			failed++
		}
		if o.start.After(killed.Add(time.Second)) {
			after++
			if ok && o.rep.Header.Get("X-Mortred-Host") == "h2" {
				afterH2++
			}
		}
	}
	t.Logf("host 1 killed: %d requests, %d failed (in flight on h1), %d after, %d of them served by h2", len(during), failed, after, afterH2)
	if after == 0 || afterH2 != after {
		t.Fatalf("after host 1 died %d requests, %d served by h2; want all", after, afterH2)
	}
}

// jobJSON decodes a job answer's snake_case fields into a struct of
// JobID, PollURL and ResultURL.
type jobJSON struct {
	v *struct{ JobID, PollURL, ResultURL string }
}

func (j *jobJSON) UnmarshalJSON(b []byte) error {
	var raw struct {
		JobID     string `json:"job_id"`
		PollURL   string `json:"poll_url"`
		ResultURL string `json:"result_url"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	j.v.JobID, j.v.PollURL, j.v.ResultURL = raw.JobID, raw.PollURL, raw.ResultURL
	return nil
}

// resultsOf is an answer's results array as compact JSON ("" if none):
// what must be equal between hosts, and between a job and a sync call.
func resultsOf(t *testing.T, body []byte) string {
	t.Helper()
	var env struct {
		Results json.RawMessage `json:"results"`
	}
	if json.Unmarshal(body, &env) != nil || len(env.Results) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, env.Results); err != nil {
		return ""
	}
	return b.String()
}

// outcome is one request of runLoad.
type outcome struct {
	start time.Time
	rep   stack.Reply
	err   error
}

// runLoad sends with workers in parallel, each pausing between its
// requests, until n requests were sent or d has passed, and returns every
// outcome.
func runLoad(t *testing.T, workers, n int, d, pause time.Duration, call func() (stack.Reply, error)) []outcome {
	t.Helper()
	return runLoadUntil(workers, n, d, pause, nil, call)
}

// runLoadUntil is runLoad that also ends when stop is closed.
func runLoadUntil(workers, n int, d, pause time.Duration, stop <-chan struct{}, call func() (stack.Reply, error)) []outcome {
	var mu sync.Mutex
	var out []outcome
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				if len(out) >= n {
					mu.Unlock()
					return
				}
				i := len(out)
				out = append(out, outcome{start: time.Now()})
				mu.Unlock()
				rep, err := call()
				mu.Lock()
				out[i].rep, out[i].err = rep, err
				mu.Unlock()
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	return out
}
