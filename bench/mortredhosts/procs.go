package mortredhosts

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// The deployment's secrets: the same on every host, so a job forwarded
// from one gateway to another is accepted there.
const (
	apiToken     = "bench-api-token-0123456789"
	metricsToken = "bench-metrics-token-0123456789"
	modelToken   = "bench-model-token-0123456789"
)

// keepEnv are the MORTRED* variables a child may inherit from the run
// (scripts/bench.sh exports them); every other one is emptied, which the
// binaries read as unset, so a developer's shell cannot move a port.
var keepEnv = map[string]bool{"MORTRED_ORT_LIB": true, "MORTRED_MODEL_DIR": true}

// childEnv is what harness.Start adds to its own environment for a mortred
// process: the tokens, extra, every other MORTRED* variable and the HTTP
// proxy variables emptied (a request for a namespace's address must never
// go to a proxy off the machine).
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "MORTRED") && !keepEnv[k]) || isProxyVar(k) {
			env = append(env, k+"=")
		}
	}
	env = append(env, "MORTRED_API_TOKEN="+apiToken, "MORTRED_METRICS_TOKEN="+metricsToken, "MORTRED_AUTH_TOKEN="+modelToken)
	return append(env, extra...)
}

func isProxyVar(k string) bool {
	switch strings.ToUpper(k) {
	case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY":
		return true
	}
	return false
}

// ctlEnv is mortredctl's whole environment: the run's without MORTRED*
// and proxy variables, then extra.
func ctlEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MORTRED") || isProxyVar(k) {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "MORTRED_API_TOKEN="+apiToken), extra...)
}

// ctlRun is one mortredctl command and what it printed.
type ctlRun struct {
	command        string
	stdout, stderr string
	took           time.Duration
}

// ctl runs mortredctl with args, at most timeout, and fails on a non-zero
// exit with what it printed.
func ctl(ctx context.Context, binDir string, timeout time.Duration, env []string, args ...string) (ctlRun, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bin := filepath.Join(binDir, "mortredctl")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	r := ctlRun{command: "mortredctl " + strings.Join(args, " "), stdout: out.String(), stderr: errb.String(), took: time.Since(t0)}
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", r.command, err, strings.TrimSpace(r.stderr+" "+r.stdout))
	}
	return r, nil
}

// client is for checks and the supervisors' APIs: never through a proxy.
var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}

// reply is a finished exchange.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

// do sends one request with the Bearer token (and a JSON body when body
// is not nil) through c.
func do(ctx context.Context, c *http.Client, method, url, token string, body []byte) (reply, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: b}, err
}

// want200 is do that wants a 200.
func want200(ctx context.Context, c *http.Client, method, url, token string, body []byte) (reply, error) {
	r, err := do(ctx, c, method, url, token, body)
	if err == nil && r.code != http.StatusOK {
		err = fmt.Errorf("%s %s: HTTP %d %s", method, url, r.code, trim(r.body))
	}
	return r, err
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// serverStatus is the part of GET /api/v1/servers/{id} the benchmark reads.
type serverStatus struct {
	State    string `json:"state"`
	PID      int    `json:"pid"`
	Ready    bool   `json:"ready"`
	Version  string `json:"version"`
	Instance int    `json:"instance"`
}

// supervisor is a running mortred-supervisor and where its API is.
type supervisor struct {
	proc  *harness.Proc
	plane plane
}

// startSupervisor runs mortred-supervisor on p (argv before it, e.g.
// `ip netns exec NS`, runs it on another host) and waits until its API
// answers, the gateway and every model in ids are running and ready.
// On an error the supervisor is stopped.
func startSupervisor(ctx context.Context, logDir, name, binDir string, wrap []string, p plane, env []string, ids ...string) (*supervisor, error) {
	argv := append(append(append([]string(nil), wrap...), filepath.Join(binDir, "mortred-supervisor")), "--config", p.file)
	proc, err := harness.Start(logDir, harness.Spec{Name: name, Bin: argv[0], Args: argv[1:], Env: env})
	if err != nil {
		return nil, err
	}
	s := &supervisor{proc: proc, plane: p}
	if err := s.waitReady(ctx, 120*time.Second, append([]string{"gateway"}, ids...)...); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// status is one process's status ("gateway" or a catalog id).
func (s *supervisor) status(ctx context.Context, id string) (serverStatus, error) {
	var st serverStatus
	r, err := want200(ctx, client, "GET", "http://"+s.plane.apiAddr()+"/api/v1/servers/"+id, apiToken, nil)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(r.body, &st)
}

// waitReady waits until every id is running and ready.
func (s *supervisor) waitReady(ctx context.Context, timeout time.Duration, ids ...string) error {
	for _, id := range ids {
		err := harness.Eventually(ctx, timeout, s.proc.Name+": "+id+" running and ready", func() error {
			st, err := s.status(ctx, id)
			if err != nil {
				return err
			}
			if st.State != "running" || !st.Ready || st.PID <= 0 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		}, s.proc)
		if err != nil {
			return fmt.Errorf("%w (logs in %s)", err, filepath.Join(s.plane.dir, "logs"))
		}
	}
	return nil
}

// stop stops the supervisor, which stops its gateway and model servers
// first; any of them still running afterwards (a supervisor killed after
// its grace) is killed.
func (s *supervisor) stop() {
	kids := descendants(s.proc.PID())
	s.proc.Stop()
	reap(kids, 15*time.Second)
}

// descendants lists pid's children, theirs, and so on.
func descendants(pid int) []int {
	var out []int
	for _, c := range harness.Children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// reap waits up to timeout for pids to end, then sends SIGKILL to those
// still running that are still mortred's (a pid is not reused for
// something else behind our back) and waits for them to go.
func reap(pids []int, timeout time.Duration) {
	alive := func() []int {
		var out []int
		for _, p := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if err == nil && bytes.Contains(b, []byte("mortred")) && !zombie(p) {
				out = append(out, p)
			}
		}
		return out
	}
	deadline := time.Now().Add(timeout)
	for len(alive()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range alive() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(alive()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// zombie reports whether pid has ended and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// edge is a running Nginx from mortredctl init-edge.
type edge struct {
	proc *harness.Proc
	// worker is the Nginx worker's pid (the master only forks it).
	worker int
	dir    string
	port   int
	// init is the init-edge command and site the benchmark ran.
	init, site string
	client     *http.Client
}

// startEdge writes the edge with `mortredctl init-edge --mode lan --out
// dir --listen port args...`, checks it with nginx -t and runs it in the
// foreground pinned to cpus ("" = no pin). On an error nothing is left
// running.
func startEdge(ctx context.Context, logDir, name, binDir, dir, cpus string, port int, args ...string) (*edge, error) {
	initArgs := append([]string{"init-edge", "--mode", "lan", "--out", dir, "--listen", fmt.Sprint(port), "--server-name", "localhost"}, args...)
	r, err := ctl(ctx, binDir, 30*time.Second, ctlEnv(), initArgs...)
	if err != nil {
		return nil, err
	}
	site, err := os.ReadFile(filepath.Join(dir, "mortred-edge.conf"))
	if err != nil {
		return nil, err
	}
	bin, err := harness.LookNginx()
	if err != nil {
		return nil, err
	}
	conf, errLog := filepath.Join(dir, "nginx.conf"), filepath.Join(dir, "error.log")
	if out, err := exec.CommandContext(ctx, bin, "-t", "-p", dir, "-c", conf, "-e", errLog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t on %s: %v: %s", conf, err, out)
	}
	proc, err := harness.Start(logDir, harness.Spec{Name: name, Bin: bin, CPUs: cpus,
		Args: []string{"-p", dir, "-c", conf, "-e", errLog, "-g", "daemon off;"}})
	if err != nil {
		return nil, err
	}
	e := &edge{proc: proc, dir: dir, port: port, init: r.command, site: string(site)}
	if err := harness.WaitListening(ctx, 10*time.Second, name, fmt.Sprintf("127.0.0.1:%d", port), proc); err != nil {
		proc.Stop()
		return nil, err
	}
	if err := harness.Eventually(ctx, 10*time.Second, name+" worker", func() error {
		if kids := harness.Children(proc.PID()); len(kids) > 0 {
			e.worker = kids[0]
			return nil
		}
		return errors.New("no worker process yet")
	}, proc); err != nil {
		proc.Stop()
		return nil, err
	}
	if e.client, err = trusting(filepath.Join(dir, "cert.pem")); err != nil {
		proc.Stop()
		return nil, err
	}
	return e, nil
}

// url is the edge's https URL for path.
func (e *edge) url(path string) string { return fmt.Sprintf("https://127.0.0.1:%d%s", e.port, path) }

func (e *edge) stop() {
	e.proc.Stop()
	e.client.CloseIdleConnections()
}

// trusting is an HTTPS client that trusts the certificate in certFile,
// and only it.
func trusting(certFile string) (*http.Client, error) {
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", certFile)
	}
	tr := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 16}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}
