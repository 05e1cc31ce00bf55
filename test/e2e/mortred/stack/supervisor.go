package stack

import (
	"fmt"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// Tokens are the three secrets of a deployment, as init-trust writes them.
type Tokens struct {
	API, Metrics, Model string
}

// NewTokens returns fixed, distinct test tokens.
func NewTokens() Tokens {
	return Tokens{API: "e2e-api-token-0123456789", Metrics: "e2e-metrics-token-0123456789", Model: "e2e-model-token-0123456789"}
}

// Env is the environment of a supervisor (or gateway) with these tokens.
func (tk Tokens) Env(extra ...string) []string {
	return BaseEnv(append([]string{
		"MORTRED_API_TOKEN=" + tk.API,
		"MORTRED_METRICS_TOKEN=" + tk.Metrics,
		"MORTRED_AUTH_TOKEN=" + tk.Model,
	}, extra...)...)
}

// Supervisor is a running mortred-supervisor with its children.
type Supervisor struct {
	*testproc.Proc
	Conf   *Conf
	Tokens Tokens
}

// StartSupervisor runs mortred-supervisor on conf and waits until its API
// answers and the gateway is ready. The server and gateway binaries are
// found beside the supervisor's (testbin builds them into one directory).
func StartSupervisor(t testing.TB, conf *Conf, tk Tokens) *Supervisor {
	t.Helper()
	return StartSupervisorWith(t, conf, tk, nil)
}

// StartSupervisorWith is StartSupervisor with the command run through
// wrap (e.g. `ip netns exec NS`, for a host of its own) and extra
// environment variables.
func StartSupervisorWith(t testing.TB, conf *Conf, tk Tokens, wrap []string, env ...string) *Supervisor {
	t.Helper()
	testproc.Bin(t, "mortred-server")
	testproc.Bin(t, "mortred-gateway")
	argv := append(append(append([]string(nil), wrap...), testproc.Bin(t, "mortred-supervisor")), "--config", conf.File)
	p := Start(t, argv[0], argv[1:], tk.Env(env...))
	s := &Supervisor{Proc: p, Conf: conf, Tokens: tk}
	testproc.Eventually(t, 60*time.Second, "supervisor health", func() error {
		select {
		case <-p.Done():
			t.Fatalf("supervisor exited: %s", p.Output())
		default:
		}
		r, err := Do(Req{URL: conf.APIURL() + "/api/v1/health"})
		if err != nil || r.Code != 200 {
			return fmt.Errorf("%v %v", r, err)
		}
		return nil
	})
	s.WaitReady(t, "gateway", 60*time.Second)
	return s
}

// Status is one process in /api/v1/status.
type Status struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	PID            int    `json:"pid"`
	Ready          bool   `json:"ready"`
	RestartCount   int    `json:"restart_count"`
	LastExitStatus string `json:"last_exit_status"`
	StartedAtMS    int64  `json:"started_at_ms"`
	Error          string `json:"error"`
	Enabled        bool   `json:"enabled"`
	URI            string `json:"uri"`
	Port           int    `json:"port"`
	Category       string `json:"category"`
}

// API calls the management API with the management token.
func (s *Supervisor) API(method, path string) (Reply, error) {
	return Do(Req{Method: method, URL: s.Conf.APIURL() + path, Token: s.Tokens.API})
}

// Server returns one process's status ("gateway" or a catalog id).
func (s *Supervisor) Server(t testing.TB, id string) Status {
	t.Helper()
	var st Status
	if id == "gateway" {
		var all struct {
			Gateway Status `json:"gateway"`
		}
		r, err := s.API("GET", "/api/v1/status")
		if err != nil || r.Code != 200 {
			t.Fatalf("GET /api/v1/status: %v %v", r, err)
		}
		if err := r.JSON(&all); err != nil {
			t.Fatal(err)
		}
		return all.Gateway
	}
	r, err := s.API("GET", "/api/v1/servers/"+id)
	if err != nil || r.Code != 200 {
		t.Fatalf("GET /api/v1/servers/%s: %v %v", id, r, err)
	}
	if err := r.JSON(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// WaitFor polls a process's status until ok accepts it.
func (s *Supervisor) WaitFor(t testing.TB, id string, timeout time.Duration, what string, ok func(Status) bool) Status {
	t.Helper()
	var last Status
	testproc.Eventually(t, timeout, id+" "+what, func() error {
		last = s.Server(t, id)
		if ok(last) {
			return nil
		}
		return fmt.Errorf("status %+v", last)
	})
	return last
}

// WaitReady waits for state running and ready.
func (s *Supervisor) WaitReady(t testing.TB, id string, timeout time.Duration) Status {
	t.Helper()
	return s.WaitFor(t, id, timeout, "running and ready", func(st Status) bool { return st.State == "running" && st.Ready && st.PID > 0 })
}
