package e2e

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// TestFirstDayErrors: the errors a newcomer meets on the first day say
// what to do next — a wrong or missing token names the header and the
// variable, a model still loading answers 503 with Retry-After and how to
// watch it, and a port in use (supervisor, gateway, model) names the key
// that moves it. Real binaries, real sockets.
func TestFirstDayErrors(t *testing.T) {
	t.Parallel()
	taken := hold(t)
	conf := stack.WriteConf(t, []stack.Model{
		{ID: "SLOW", Keys: map[string]any{"worker_nums": 1}, ModelKeys: map[string]any{"load_delay_ms": 120000}},
		{ID: "TAKEN", Port: port(taken)},
	}, nil)
	sup := stack.StartSupervisor(t, conf, stack.NewTokens())
	gw := sup.Conf.GatewayURL()
	body := stack.Envelope("first-day", "", stack.DarkPNG)
	contains := func(t *testing.T, what string, r stack.Reply, code int, wants ...string) {
		t.Helper()
		if r.Code != code {
			t.Fatalf("%s: %s, want %d", what, r, code)
		}
		for _, w := range wants {
			if !strings.Contains(string(r.Body), w) {
				t.Errorf("%s: body lacks %q: %s", what, w, r)
			}
		}
	}

	t.Run("bad token", func(t *testing.T) {
		r, err := stack.Do(stack.Req{URL: gw + "/v1/models/SLOW/infer", Token: "not-the-token", Body: body})
		if err != nil {
			t.Fatal(err)
		}
		contains(t, "gateway inference", r, 401, "send Authorization: Bearer $MORTRED_API_TOKEN", "mortredctl init-trust")
		r, _ = stack.Do(stack.Req{URL: gw + "/metrics", Token: sup.Tokens.API})
		contains(t, "gateway metrics with the inference token", r, 401, "Authorization: Bearer $MORTRED_METRICS_TOKEN, not the inference token")
		r, _ = stack.Do(stack.Req{URL: sup.Conf.APIURL() + "/api/v1/status"})
		contains(t, "supervisor API", r, 401, "send Authorization: Bearer $MORTRED_API_TOKEN")
		slow := sup.Conf.Models["SLOW"]
		r, _ = stack.Do(stack.Req{URL: "http://127.0.0.1:" + strconv.Itoa(slow.Port) + slow.URI(), Token: sup.Tokens.API, Body: body})
		contains(t, "model server with the gateway's token", r, 401, "send Authorization: Bearer $MORTRED_AUTH_TOKEN", "through the gateway with $MORTRED_API_TOKEN")
		if run := ctl(t, sup, []string{"MORTRED_API_TOKEN=not-the-token"}, "status"); run.code != 1 || !strings.Contains(run.stderr, "refused the token (401): check --token / MORTRED_API_TOKEN") {
			t.Errorf("mortredctl with a wrong token: %s", run)
		}
	})

	t.Run("model still loading", func(t *testing.T) {
		// SLOW listens at once and loads for two minutes.
		sup.WaitFor(t, "SLOW", 60*time.Second, "listening, not ready", func(s stack.Status) bool { return s.State == "starting" && s.PID > 0 })
		testproc.Eventually(t, 30*time.Second, "SLOW answers while loading", func() error {
			r, err := stack.Do(stack.Req{URL: gw + "/v1/models/SLOW/infer", Token: sup.Tokens.API, Body: body})
			if err != nil {
				return err
			}
			if r.Code == 503 && strings.Contains(string(r.Body), "connection refused") {
				return errString("not listening yet: " + r.String())
			}
			contains(t, "gateway on a loading model", r, 503, "model SLOW is still loading: retry after Retry-After", "`mortredctl status` shows READY yes")
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After: %v", r.Header)
			}
			return nil
		})
	})

	t.Run("model port in use", func(t *testing.T) {
		st := sup.WaitFor(t, "TAKEN", 60*time.Second, "backoff after a failed listen", func(s stack.Status) bool {
			return s.RestartCount >= 1 && s.Error != ""
		})
		for _, w := range []string{"exited (exit status 1): listen on 127.0.0.1:" + strconv.Itoa(port(taken)) + ": the port is already in use by another process",
			"stop it, or set port in [TAKEN] of " + conf.ServerFile("TAKEN")} {
			if !strings.Contains(st.Error, w) {
				t.Errorf("note lacks %q: %q", w, st.Error)
			}
		}
	})
}

// TestPortInUseSaysWhichKey: the gateway's port held by another process
// shows in the gateway's status note, and a second supervisor on the same
// file exits saying its API port is taken and which key moves it.
func TestPortInUseSaysWhichKey(t *testing.T) {
	t.Parallel()
	taken := hold(t)
	conf := stack.WriteConf(t, []stack.Model{{ID: "IDLE", Policy: map[string]any{"autostart": false}}}, map[string]any{"port": port(taken)})
	tk := stack.NewTokens()
	testproc.Bin(t, "mortred-gateway") // found beside the supervisor
	testproc.Bin(t, "mortred-server")
	first := stack.Start(t, testproc.Bin(t, "mortred-supervisor"), []string{"--config", conf.File}, tk.Env())
	sup := &stack.Supervisor{Proc: first, Conf: conf, Tokens: tk}
	testproc.Eventually(t, 60*time.Second, "the supervisor's API", func() error {
		if first.Exited() {
			t.Fatalf("supervisor exited: %s", first.Output())
		}
		_, err := sup.API("GET", "/api/v1/status")
		return err
	})
	st := sup.WaitFor(t, "gateway", 60*time.Second, "backoff after a failed listen", func(s stack.Status) bool { return s.RestartCount >= 1 && s.Error != "" })
	if !strings.Contains(st.Error, "the port is already in use by another process") || !strings.Contains(st.Error, "set port in [gateway] of "+conf.File) {
		t.Errorf("gateway note: %q", st.Error)
	}

	second := stack.Start(t, testproc.Bin(t, "mortred-supervisor"), []string{"--config", conf.File}, tk.Env())
	if code, ok := second.ExitCode(30 * time.Second); !ok || code != 1 {
		t.Fatalf("second supervisor: exit %d (exited %v)\n%s", code, ok, second.Output())
	}
	out := second.Output()
	for _, w := range []string{"mortred-supervisor: listen on 127.0.0.1:" + strconv.Itoa(conf.APIPort) + ": the port is already in use",
		"set api_port in [supervisor] of " + conf.File, "is another mortred-supervisor running?"} {
		if !strings.Contains(out, w) {
			t.Errorf("second supervisor's error lacks %q:\n%s", w, out)
		}
	}
}

// hold listens on a free loopback port until the test ends, as another
// program would.
func hold(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }
