package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// httpClient is the tests' well-behaved client (sentinels, readiness).
var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: 5 * time.Second},
}

// frontend is a router or gateway under attack, as a client reaches it.
type frontend struct {
	name string
	proc *testproc.Proc // nil for the in-process reference
	addr string         // host:port
	// target is the request-target of an inference POST for model.
	target func(model string) string
	// auth is the header lines (each ending in CRLF) a request needs.
	auth string
	// body is the JSON body of a request for model carrying marker.
	body func(model, marker string) string
	// forwardable is a client header the frontend passes to its
	// upstream, unless a Connection header names it.
	forwardable string
}

// post sends a well-formed request for model carrying marker with the
// well-behaved client and returns its status.
func (f *frontend) post(model, marker string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+f.target(model), strings.NewReader(f.body(model, marker)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if name, v, ok := strings.Cut(strings.TrimSuffix(f.auth, "\r\n"), ": "); ok {
		req.Header.Set(name, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// cleanEnv is the environment without any variable a router, daemon,
// agent or gateway reads, plus extra: a developer's shell must not change
// what a test means.
func cleanEnv(extra ...string) []string {
	return testproc.CleanEnv([]string{"MENTAT_", "SERVE_", "POLL_", "PROBE_", "SERVING_", "MCP_", "TOOLS_", "ALLOWED_", "DISCOVER_", "LOG_LEVEL", "MORTRED"}, extra...)
}

func start(t testing.TB, name string, env []string, argv ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Name: name, Env: env, Grace: 5 * time.Second}, argv...)
}

// routerBody is a chat completion for model, marked.
func routerBody(model, marker string) string {
	return fmt.Sprintf(`{"model":%q,"marker":%q,"messages":[{"role":"user","content":"hi"}]}`, model, marker)
}

// startRouter runs a mentatd daemon, one mentatd agent per model (its
// announced OpenAI endpoint the model's upstream, its actor a sleep, so
// the group has a running actor), and mentatd-serve with routerEnv on
// top of them; it returns once every model routes.
func startRouter(t testing.TB, ups map[string]*upstream, routerEnv ...string) *frontend {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	dport := testproc.FreePort(t)
	daemonAddr := "127.0.0.1:" + strconv.Itoa(dport)
	d := start(t, "mentatd daemon", cleanEnv("MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT="+strconv.Itoa(dport),
		"MENTAT_ANNOUNCE_IFACES=lo", "MENTAT_ANNOUNCE_PORT=0", "MENTAT_AGENT_TIMEOUT_S=6", "MENTAT_PEER_POLL_S=1"),
		testproc.Bin(t, "mentatd"), "daemon")
	d.WaitOutput(t, 30*time.Second, `event=http_listening`)
	models := make([]string, 0, len(ups))
	for m := range ups {
		models = append(models, m)
	}
	slices.Sort(models)
	for i, m := range models {
		g := "g" + strconv.Itoa(i)
		start(t, "agent "+g, cleanEnv("MENTAT_DAEMON="+daemonAddr, "MENTAT_GROUP="+g, "MENTAT_CONTAINER="+g,
			"MENTAT_OPENAI_API=http://"+ups[m].Addr()+"/v1", "MENTAT_MODEL_PROVIDER=vllm"),
			testproc.Bin(t, "mentatd"), "agent", "--", sleep, "3600")
	}
	port := testproc.FreePort(t)
	env := cleanEnv(append([]string{"SERVE_PORT=" + strconv.Itoa(port), "MENTAT_DAEMONS=" + daemonAddr, "MENTAT_ANNOUNCE_PORT=0",
		"DISCOVER_PEERS=0", "POLL_INTERVAL_S=1", "PROBE_INTERVAL_S=1", "PROBE_TIMEOUT_S=2", "LOG_LEVEL=debug"}, routerEnv...)...)
	p := start(t, "mentatd-serve", env, testproc.Bin(t, "mentatd-serve"))
	f := &frontend{name: "router", proc: p, addr: "127.0.0.1:" + strconv.Itoa(port),
		target: func(string) string { return "/v1/chat/completions" }, body: routerBody, forwardable: "Accept"}
	testproc.Eventually(t, 60*time.Second, "router lists "+strings.Join(models, ","), func() error {
		if p.Exited() {
			t.Fatalf("router exited:\n%s", p.Output())
		}
		var l struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := testproc.GetJSON(httpClient, "http://"+f.addr+"/v1/models", &l); err != nil {
			return err
		}
		var have []string
		for _, d := range l.Data {
			have = append(have, d.ID)
		}
		for _, m := range models {
			if !slices.Contains(have, m) {
				return fmt.Errorf("/v1/models lists %v", have)
			}
		}
		return nil
	})
	return f
}

// startGateway writes a control-plane directory whose catalog points each
// model id at its upstream, runs mortred-gateway on it (gateway overrides
// [gateway] keys, env is added to the environment), and waits for its
// /healthz.
func startGateway(t testing.TB, ups map[string]*upstream, gateway map[string]any, env ...string) *frontend {
	t.Helper()
	var models []stack.Model
	for id, u := range ups {
		_, p, _ := net.SplitHostPort(u.Addr())
		port, _ := strconv.Atoi(p)
		models = append(models, stack.Model{ID: id, Port: port})
	}
	conf := stack.WriteConf(t, models, gateway)
	tk := stack.NewTokens()
	p := start(t, "mortred-gateway", cleanEnv(append(tk.Env(), env...)...), testproc.Bin(t, "mortred-gateway"), "--config", conf.File)
	f := &frontend{name: "gateway", proc: p, addr: strings.TrimPrefix(conf.GatewayURL(), "http://"),
		target: func(id string) string { return "/v1/models/" + id + "/infer" },
		auth:   "Authorization: Bearer " + tk.API + "\r\n",
		body: func(_, marker string) string {
			return fmt.Sprintf(`{"req_id":%q,"images":["aGk="]}`, marker)
		},
		forwardable: "X-Request-Id"}
	testproc.Eventually(t, 30*time.Second, "gateway /healthz", func() error {
		if p.Exited() {
			t.Fatalf("gateway exited:\n%s", p.Output())
		}
		resp, err := httpClient.Get(conf.GatewayURL() + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return f
}

// startReference serves the cases with net/http itself, in process: a
// handler that reads the body (413 past a declared 64 MiB, 400 when it
// cannot be read) and answers 200. It checks the case table's statuses
// against the standard library the frontends are meant to match.
func startReference(t testing.TB) *frontend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The head limit is the frontends' documented default.
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if r.ContentLength > 64<<20 {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okBody)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		srv.Close()
	})
	return &frontend{name: "net/http", addr: ln.Addr().String(),
		target: func(string) string { return "/v1/chat/completions" }, body: routerBody, forwardable: "Accept"}
}

// marker is the marker a body recorded upstream carries ("" if none).
func marker(s seen) string {
	var v struct {
		Marker string `json:"marker"`
		ReqID  string `json:"req_id"`
	}
	if s.err != nil || json.Unmarshal(s.body, &v) != nil {
		return ""
	}
	if v.Marker != "" {
		return v.Marker
	}
	return v.ReqID
}

// hasMarker reports whether s carries m.
func hasMarker(m string) func(seen) bool {
	return func(s seen) bool { return s.err == nil && marker(s) == m && bytes.Contains(s.body, []byte(m)) }
}
