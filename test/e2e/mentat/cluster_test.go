package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func itoa(n int) string { return strconv.Itoa(n) }

// client is shared by the tests; no request in them may hang a test.
var client = &http.Client{Timeout: 30 * time.Second}

// daemon is a running `mentatd daemon`.
type daemon struct {
	*testproc.Proc
	addr string // host:port of its HTTP server
}

// daemonEnv is a fast daemon on 127.0.0.1 that ranks only lo and never
// broadcasts (MENTAT_ANNOUNCE_PORT=0); tests that want announcements add a
// unicast MENTAT_ANNOUNCE_ADDR to a loopback port.
func daemonEnv(port int, extra ...string) []string {
	return baseEnv(append([]string{"MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT=" + itoa(port),
		"MENTAT_ANNOUNCE_IFACES=lo", "MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S=0.3",
		"MENTAT_PEER_POLL_S=0.3", "MENTAT_AGENT_TIMEOUT_S=6"}, extra...)...)
}

func startDaemon(t *testing.T, name string, extra ...string) *daemon {
	t.Helper()
	port := testproc.FreePort(t)
	d := &daemon{addr: "127.0.0.1:" + itoa(port)}
	d.Proc = start(t, name, daemonEnv(port, extra...), testproc.Bin(t, "mentatd"), "daemon")
	eventually(t, name+" /status", func() bool {
		var s map[string]any
		return testproc.GetJSON(client, "http://"+d.addr+"/status", &s) == nil
	})
	return d
}

// snapshot is the part of the daemon's /status the tests read.
type snapshot struct {
	NodeIP string `json:"node_ip"`
	Groups map[string]struct {
		Actors map[string]struct {
			State string `json:"state"`
			PID   int    `json:"pid"`
		} `json:"actors"`
	} `json:"groups"`
}

// actorPID returns the pid of the running actor of group on daemon addr
// (0 while there is none).
func actorPID(t *testing.T, addr, group string) int {
	t.Helper()
	var s snapshot
	if err := testproc.GetJSON(client, "http://"+addr+"/status", &s); err != nil {
		t.Fatalf("daemon %s /status: %v", addr, err)
	}
	for _, a := range s.Groups[group].Actors {
		if a.State == "running" {
			return a.PID
		}
	}
	return 0
}

// engine describes one model container: an agent and, unless noCommand,
// the enginesim it runs as its actor.
type engine struct {
	group, model string
	port         int      // the OpenAI port
	apiPort      int      // the port announced, when not port (a test's front in between)
	mcpPort      int      // 0: no management MCP
	urlForm      bool     // announce http://127.0.0.1:port/v1 instead of port/v1
	host         string   // enginesim --host (default 127.0.0.1)
	noCommand    bool     // register without running anything
	itl          string   // enginesim --itl (default 5ms)
	args         []string // more enginesim flags
	wrap         func(argv []string) []string
	agent        *testproc.Proc
}

// startAgent starts e's agent against the daemon at daemonAddr.
func startAgent(t *testing.T, daemonAddr string, e *engine) {
	t.Helper()
	if e.port == 0 {
		e.port = testproc.FreePort(t)
	}
	if e.host == "" {
		e.host = "127.0.0.1"
	}
	if e.itl == "" {
		e.itl = "5ms"
	}
	announced := e.port
	if e.apiPort != 0 {
		announced = e.apiPort
	}
	openai := itoa(announced) + "/v1"
	if e.urlForm {
		openai = "http://127.0.0.1:" + itoa(announced) + "/v1"
	}
	env := baseEnv("MENTAT_DAEMON="+daemonAddr, "MENTAT_GROUP="+e.group, "MENTAT_CONTAINER=c-"+e.group,
		"MENTAT_OPENAI_API="+openai, "MENTAT_MODEL_PROVIDER=vLLM", "MENTAT_BIND_CHECK_S=0.2")
	argv := []string{testproc.Bin(t, "mentatd"), "agent"}
	if !e.noCommand {
		eng := []string{testproc.Bin(t, "enginesim"), "--model", e.model, "--host", e.host, "--port", itoa(e.port),
			"--ttft", "20ms", "--itl", e.itl}
		eng = append(eng, e.args...)
		if e.mcpPort != 0 {
			eng = append(eng, "--mcp-port", itoa(e.mcpPort))
			env = append(env, "MENTAT_MCP_API="+itoa(e.mcpPort)+"/mcp")
		}
		if e.wrap != nil {
			eng = e.wrap(eng)
		}
		argv = append(append(argv, "--"), eng...)
	}
	e.agent = start(t, "agent-"+e.group, env, argv...)
}

// router is a running mentatd-serve (or `mentatd serve`).
type router struct {
	*testproc.Proc
	url string
	// engine is the one engine behind a flow-control test's router.
	engine *engine
}

// routerEnv is a fast router on port; tests add MENTAT_DAEMONS and, for
// announcements, MENTAT_ANNOUNCE_PORT. Its stop drains for 0.2 s, not 5:
// no balancer waits for its /readyz (a test that wants a drain sets
// SERVE_DRAIN_S in extra, which wins).
func routerEnv(port int, extra ...string) []string {
	return baseEnv(append([]string{"SERVE_PORT=" + itoa(port), "MENTAT_ANNOUNCE_PORT=0",
		"POLL_INTERVAL_S=0.5", "PROBE_INTERVAL_S=0.3", "PROBE_TIMEOUT_S=1", "TOOLS_TTL_S=1", "SERVE_DRAIN_S=0.2"}, extra...)...)
}

func startRouter(t *testing.T, name string, port int, extra ...string) *router {
	t.Helper()
	return startRouterCmd(t, name, []string{testproc.Bin(t, "mentatd-serve")}, port, extra...)
}

// startRouterCmd starts the router as argv (mentatd-serve, or mentatd serve).
func startRouterCmd(t *testing.T, name string, argv []string, port int, extra ...string) *router {
	t.Helper()
	if port == 0 {
		port = testproc.FreePort(t)
	}
	r := &router{url: "http://127.0.0.1:" + itoa(port)}
	r.Proc = start(t, name, routerEnv(port, extra...), argv...)
	eventually(t, name+" /status.json", func() bool {
		var s statusDoc
		return !r.Exited() && testproc.GetJSON(client, r.url+"/status.json", &s) == nil
	})
	return r
}

// statusDoc is the router's /status.json as mentat-wire.md gives it.
type statusDoc struct {
	UptimeS int64 `json:"uptime_s"`
	Daemons map[string]struct {
		Connected bool    `json:"connected"`
		Error     *string `json:"error"`
		NodeID    string  `json:"node_id"`
		Seed      bool    `json:"seed"`
	} `json:"daemons"`
	Groups map[string]groupStatus `json:"groups"`
	Models map[string]struct {
		Group string `json:"group"`
		URL   string `json:"url"`
	} `json:"models"`
}

type groupStatus struct {
	Daemon           string   `json:"daemon"`
	AgentsAlive      int      `json:"agents_alive"`
	ActorsRunning    int      `json:"actors_running"`
	OpenAI           *string  `json:"openai"`
	OpenAICandidates []string `json:"openai_candidates"`
	OpenAINote       *string  `json:"openai_note"`
	Provider         string   `json:"provider"`
	MCP              *string  `json:"mcp"`
	Healthy          bool     `json:"healthy"`
	Models           []string `json:"models"`
	WhyNot           *string  `json:"why_not"`
}

func (g groupStatus) why() string {
	if g.WhyNot == nil {
		return ""
	}
	return *g.WhyNot
}

func (g groupStatus) openai() string {
	if g.OpenAI == nil {
		return ""
	}
	return *g.OpenAI
}

func (r *router) status(t *testing.T) statusDoc {
	t.Helper()
	var s statusDoc
	if err := testproc.GetJSON(client, r.url+"/status.json", &s); err != nil {
		t.Fatalf("router /status.json: %v", err)
	}
	return s
}

// models is what the router routes right now (GET /v1/models).
func (r *router) models(t *testing.T) []string {
	t.Helper()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := testproc.GetJSON(client, r.url+"/v1/models", &list); err != nil {
		t.Fatalf("router /v1/models: %v", err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// waitModels waits until /v1/models lists exactly want.
func (r *router) waitModels(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	eventually(t, fmt.Sprintf("router to route exactly %v", want), func() bool {
		got = r.models(t)
		return slices.Equal(got, want)
	})
}

// waitGroup waits until cond holds for the group's /status.json entry and
// returns that entry.
func (r *router) waitGroup(t *testing.T, group, what string, cond func(groupStatus) bool) groupStatus {
	t.Helper()
	var g groupStatus
	var ok bool
	eventually(t, "group "+group+": "+what, func() bool {
		g, ok = r.status(t).Groups[group]
		return ok && cond(g)
	})
	return g
}

// chat sends one non-streaming chat completion through the router and
// returns the status code and body.
func (r *router) chat(t *testing.T, model string) (int, string) {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":3,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := client.Post(r.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("chat %s through the router: %v", model, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// chatOK asserts that a chat completion for model succeeds through the
// router and is answered by that model.
func (r *router) chatOK(t *testing.T, model string) {
	t.Helper()
	code, body := r.chat(t, model)
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil || out.Model != model ||
		len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
		t.Fatalf("chat %s through the router: %d %s", model, code, body)
	}
}

// sseFrames reads an event stream and returns each data frame with the
// time it arrived.
type frame struct {
	data string
	at   time.Time
}

func sseFrames(body io.Reader) ([]frame, error) {
	var out []frame
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			out = append(out, frame{data: string(d), at: time.Now()})
		}
	}
	return out, sc.Err()
}
