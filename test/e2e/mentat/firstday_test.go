package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// The errors a first user of mentat meets, from the real binaries: each
// says what to do next.

// exitsWith starts argv with env, which must exit 1 by itself, and checks
// its output holds every want.
func exitsWith(t *testing.T, name string, env []string, argv []string, want ...string) {
	t.Helper()
	p := testproc.Start(t, testproc.Options{Name: name, Env: env}, argv...)
	code, ok := p.ExitCode(deadline)
	if !ok || code != 1 {
		t.Fatalf("%s: exit code %d (exited %v), want 1\n%s", name, code, ok, p.Output())
	}
	for _, w := range want {
		if !strings.Contains(p.Output(), w) {
			t.Errorf("%s: output lacks %q:\n%s", name, w, p.Output())
		}
	}
}

func TestFirstDayPortsInUse(t *testing.T) {
	tcp, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	busy := itoa(tcp.Addr().(*net.TCPAddr).Port)
	udp, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	busyUDP := itoa(udp.LocalAddr().(*net.UDPAddr).Port)

	exitsWith(t, "router-tcp", baseEnv("SERVE_PORT="+busy, "MENTAT_ANNOUNCE_PORT=0"), []string{testproc.Bin(t, "mentatd-serve")},
		"address already in use", "another router (mentatd-serve or mentatd serve) probably runs here; stop it, or set SERVE_PORT to a free port")
	exitsWith(t, "router-udp", baseEnv("SERVE_PORT="+itoa(testproc.FreePort(t)), "MENTAT_ANNOUNCE_PORT="+busyUDP), []string{testproc.Bin(t, "mentatd-serve")},
		"address already in use", "set MENTAT_ANNOUNCE_PORT to a free port (and the daemons' MENTAT_ANNOUNCE_PORT to match), or to 0")
	exitsWith(t, "daemon", baseEnv("MENTAT_HTTP_PORT="+busy, "MENTAT_ANNOUNCE_PORT=0"), []string{testproc.Bin(t, "mentatd"), "daemon"},
		"address already in use", "another mentatd daemon probably runs here; stop it, or set MENTAT_HTTP_PORT to a free port")
}

// A router started before (or without) its daemon says so in
// /status.json, its log, /stats.json (the status page) and the 404 a
// request gets.
func TestFirstDayNoDaemon(t *testing.T) {
	nothing := "127.0.0.1:" + itoa(testproc.FreePort(t))
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+nothing)
	hint := "no mentatd daemon listens there; start one (mentatd daemon) or set MENTAT_DAEMONS to the daemons' HTTP addresses"
	var err string
	eventually(t, "the daemon's error in /status.json", func() bool {
		if e := r.status(t).Daemons[nothing].Error; e != nil {
			err = *e
		}
		return err != ""
	})
	if err != "GET /status: connection refused: "+hint {
		t.Fatalf("/status.json daemon error %q", err)
	}
	r.WaitOutput(t, deadline, `event=daemon_unreachable daemon=`+regexp.QuoteMeta(nothing)+` .*`+regexp.QuoteMeta(hint))

	var stats struct {
		Discovery string `json:"discovery"`
	}
	if e := testproc.GetJSON(client, r.url+"/stats.json", &stats); e != nil || stats.Discovery != "no mentatd daemon is reachable ("+nothing+": GET /status: connection refused: "+hint+")" {
		t.Fatalf("/stats.json discovery %q (%v)", stats.Discovery, e)
	}
	status, body := r.chat(t, "my-model")
	if status != http.StatusNotFound || !strings.Contains(body, `model \"my-model\" is not served by this cluster; available models: none; no mentatd daemon is reachable (`+nothing) {
		t.Fatalf("chat with no daemon: %d %s", status, body)
	}

	// The agent, too.
	a := start(t, "agent", baseEnv("MENTAT_DAEMON="+nothing, "MENTAT_GROUP=g"), testproc.Bin(t, "mentatd"), "agent")
	a.WaitOutput(t, deadline, `event=register_failed .*connection refused.* hint="no mentatd daemon listens there: start one \(mentatd daemon\) on this node, or set MENTAT_DAEMON to its address"`)
}

// An engine still loading (its actor runs, its API does not answer yet):
// a request for the group's name gets 503 with the reason and the next
// step; any other name gets 404 naming the group that is coming up. Once
// the engine answers, a wrong name gets 404 listing the models.
func TestFirstDayModelLoadingAndWrongName(t *testing.T) {
	d := startDaemon(t, "daemon")
	gate := filepath.Join(t.TempDir(), "loaded")
	e := &engine{group: "llama", model: "llama", wrap: func(argv []string) []string {
		// The actor runs; the engine starts only once the test says so.
		return append([]string{"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`, gate}, argv...)
	}}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)
	r.waitGroup(t, "llama", "probe failing while loading", func(g groupStatus) bool {
		return g.ActorsRunning == 1 && strings.HasPrefix(g.why(), "endpoint probe failed: ")
	})
	status, body := r.chat(t, "llama")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `served by group \"llama\", which is not routable now: endpoint probe failed: http://127.0.0.1:`+itoa(e.port)+`/v1: connection refused`) ||
		!strings.Contains(body, `connection refused (an engine still loading answers like this until it serves /models; retry then; see /status.json)`) {
		t.Fatalf("chat while loading: %d %s", status, body)
	}
	status, body = r.chat(t, "Llama")
	if status != http.StatusNotFound || !strings.Contains(body, `not routable yet, with models unknown until their engine answers /models: group \"llama\" (endpoint probe failed: `) {
		t.Fatalf("other name while loading: %d %s", status, body)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitModels(t, "llama")
	r.chatOK(t, "llama")
	status, body = r.chat(t, "Llama")
	var refusal struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		}
	}
	if json.Unmarshal([]byte(body), &refusal) != nil || status != http.StatusNotFound ||
		refusal.Error.Message != `model "Llama" is not served by this cluster; available models: llama` ||
		refusal.Error.Code != "model_not_found" || refusal.Error.Type != "invalid_request_error" {
		t.Fatalf("wrong name: %d %s", status, body)
	}
}
