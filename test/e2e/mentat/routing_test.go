package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// A model routes only once its group has a running actor AND its endpoint
// answers the probe: an engine that answers without an actor stays out
// ("no running actors"), and an actor whose engine does not answer yet
// stays out ("endpoint probe failed: ..." quoting every candidate).
func TestRoutableOnlyWithRunningActorAndAnsweringProbe(t *testing.T) {
	d := startDaemon(t, "daemon")
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)

	// gamma: the engine answers, but the agent runs nothing.
	gamma := &engine{group: "gamma", model: "gamma-1", noCommand: true}
	gamma.port = testproc.FreePort(t)
	start(t, "engine-gamma", baseEnv(), testproc.Bin(t, "enginesim"), "--model", "gamma-1", "--host", "127.0.0.1",
		"--port", itoa(gamma.port))
	startAgent(t, d.addr, gamma)

	// delta: the actor runs, but the engine only starts when the test says.
	gate := filepath.Join(t.TempDir(), "go")
	delta := &engine{group: "delta", model: "delta-1", wrap: func(argv []string) []string {
		return append([]string{"/bin/sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`, gate}, argv...)
	}}
	startAgent(t, d.addr, delta)

	g := r.waitGroup(t, "gamma", "no running actors", func(g groupStatus) bool { return g.why() == "no running actors" })
	if g.Healthy || g.AgentsAlive != 1 || g.ActorsRunning != 0 {
		t.Fatalf("gamma = %+v, want an alive agent, no running actor, unhealthy", g)
	}
	dg := r.waitGroup(t, "delta", "probe failed with its actor running", func(g groupStatus) bool {
		return g.ActorsRunning == 1 && strings.HasPrefix(g.why(), "endpoint probe failed: ")
	})
	for _, c := range []string{"http://127.0.0.1:" + itoa(delta.port) + "/v1", "http://[::1]:" + itoa(delta.port) + "/v1"} {
		if !slices.Contains(dg.OpenAICandidates, c) || !strings.Contains(dg.why(), c+": ") {
			t.Errorf("delta: candidate %s missing from openai_candidates %v or why_not %q", c, dg.OpenAICandidates, dg.why())
		}
	}
	if got := r.models(t); len(got) != 0 {
		t.Fatalf("/v1/models = %v before any group is admitted", got)
	}
	if code, body := r.chat(t, "gamma-1"); code == http.StatusOK {
		t.Fatalf("chat to gamma-1 (no running actor) answered 200: %s", body)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.waitModels(t, "delta-1")
	r.chatOK(t, "delta-1")
	if g := r.status(t).Groups["gamma"]; g.Healthy || g.why() != "no running actors" {
		t.Fatalf("gamma after delta was admitted: %+v", g)
	}
}

// twoModels starts a daemon with two engines, alpha (port form) and beta
// (URL form), each with a management MCP.
func twoModels(t *testing.T) (*daemon, *engine, *engine) {
	t.Helper()
	d := startDaemon(t, "daemon")
	alpha := &engine{group: "alpha", model: "alpha-7b", mcpPort: testproc.FreePort(t), itl: "60ms"}
	beta := &engine{group: "beta", model: "beta-1b", mcpPort: testproc.FreePort(t), urlForm: true}
	startAgent(t, d.addr, alpha)
	startAgent(t, d.addr, beta)
	return d, alpha, beta
}

// Both announcement forms route, streams pass through frame by frame, and
// killing one engine takes its model out while the other keeps serving.
func TestTwoFormsStreamingAndKilledEngine(t *testing.T) {
	d, alpha, beta := twoModels(t)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)
	r.waitModels(t, "alpha-7b", "beta-1b")

	st := r.status(t)
	a, b := st.Groups["alpha"], st.Groups["beta"]
	aURL, bURL := "http://127.0.0.1:"+itoa(alpha.port)+"/v1", "http://127.0.0.1:"+itoa(beta.port)+"/v1"
	if a.openai() != aURL || !slices.Contains(a.OpenAICandidates, "http://[::1]:"+itoa(alpha.port)+"/v1") ||
		a.Provider != "vllm" || a.MCP == nil || *a.MCP != "http://127.0.0.1:"+itoa(alpha.mcpPort)+"/mcp" {
		t.Errorf("alpha (port form) = %+v", a)
	}
	if b.openai() != bURL || !slices.Equal(b.OpenAICandidates, []string{bURL}) || b.Provider != "vllm" {
		t.Errorf("beta (URL form) = %+v", b)
	}
	if st.Models["alpha-7b"].Group != "alpha" || st.Models["beta-1b"].URL != bURL {
		t.Errorf("models = %+v", st.Models)
	}
	r.chatOK(t, "alpha-7b")
	r.chatOK(t, "beta-1b")

	t.Run("streaming", func(t *testing.T) {
		const tokens = 12 // alpha emits one every 60 ms
		body := `{"model":"alpha-7b","stream":true,"max_tokens":12,"ignore_eos":true,"messages":[{"role":"user","content":"count"}]}`
		sent := time.Now()
		resp, err := client.Post(r.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		frames, err := sseFrames(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) < tokens+1 || frames[len(frames)-1].data != "[DONE]" {
			t.Fatalf("got %d frames ending %q, want %d tokens then [DONE]", len(frames), frames[len(frames)-1].data, tokens)
		}
		// The engine spaces the tokens 11 × 60 ms apart (±10 % jitter), and
		// load only delays them further, so a router that buffered the
		// stream would deliver the first frame with the last. The check is
		// one of order, not of speed.
		first, last := frames[0].at, frames[len(frames)-1].at
		if gap := last.Sub(first); gap < 300*time.Millisecond {
			t.Fatalf("first frame after %v, [DONE] only %v later: the stream was buffered", first.Sub(sent), gap)
		}
		t.Logf("first frame after %v, [DONE] %v later", first.Sub(sent), last.Sub(first))
	})

	betaPID := actorPID(t, d.addr, "beta")
	if betaPID == 0 {
		t.Fatal("beta has no running actor on the daemon")
	}
	if err := syscall.Kill(betaPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitModels(t, "alpha-7b")
	g := r.waitGroup(t, "beta", "no running actors", func(g groupStatus) bool { return g.why() == "no running actors" })
	if g.Healthy {
		t.Fatalf("beta = %+v after its engine was killed", g)
	}
	// The router still knows the name from the last good probe, so the
	// client is told why rather than that nothing serves it.
	if code, body := r.chat(t, "beta-1b"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no running actors") {
		t.Fatalf("chat to beta-1b after its engine was killed: %d %s; want 503 with the reason", code, body)
	}
	for range 5 {
		r.chatOK(t, "alpha-7b")
	}
}

// A router restart changes nothing on the nodes: the engines keep their
// pids and the new router (here `mentatd serve`, the same code) routes to
// them again.
func TestRouterRestartLeavesEnginesAlone(t *testing.T) {
	d, _, _ := twoModels(t)
	port := testproc.FreePort(t)
	r1 := startRouter(t, "router-1", port, "MENTAT_DAEMONS="+d.addr)
	r1.waitModels(t, "alpha-7b", "beta-1b")
	pids := map[string]int{"alpha": actorPID(t, d.addr, "alpha"), "beta": actorPID(t, d.addr, "beta")}
	for g, pid := range pids {
		if pid == 0 {
			t.Fatalf("%s has no running actor", g)
		}
	}

	stop(t, r1.Proc)
	for g, pid := range pids {
		if !testproc.Alive(pid) {
			t.Fatalf("%s's engine (pid %d) died with the router", g, pid)
		}
	}
	r2 := startRouterCmd(t, "router-2", []string{testproc.Bin(t, "mentatd"), "serve"}, port, "MENTAT_DAEMONS="+d.addr)
	r2.waitModels(t, "alpha-7b", "beta-1b")
	r2.chatOK(t, "alpha-7b")
	r2.chatOK(t, "beta-1b")
	for g, pid := range pids {
		if now := actorPID(t, d.addr, g); now != pid || !testproc.Alive(pid) {
			t.Fatalf("%s's engine: pid %d before the restart, %d after (alive %v)", g, pid, now, testproc.Alive(pid))
		}
	}
}
