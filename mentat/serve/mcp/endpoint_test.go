package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestMergeTwoUpstreams(t *testing.T) {
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	// beta's engine probe fails: the merge lists it anyway.
	r := newRouter(t, Config{}, group("alpha", a.URL, true), group("beta", b.URL, false))
	for _, version := range []string{legacy, ""} {
		t.Run("version="+version, func(t *testing.T) {
			cs := connect(t, r.URL, clientOpts{version: version})
			want := []string{
				"alpha__engine_status", "alpha__latency_percentiles", "alpha__set_latency",
				"beta__engine_status", "beta__latency_percentiles", "beta__set_latency",
				"serve_status",
			}
			if got := toolNames(t, cs); !reflect.DeepEqual(got, want) {
				t.Fatalf("tools/list = %v, want %v", got, want)
			}
			res, err := cs.ListTools(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*sdk.Tool{}
			for _, tool := range res.Tools {
				byName[tool.Name] = tool
			}
			st := byName["beta__engine_status"]
			js, _ := json.Marshal(st)
			for _, frag := range []string{`"title":"Engine status"`, `"readOnlyHint":true`, `"openWorldHint":true`,
				`"outputSchema":{"properties":{"engine":{"type":"string"}},"type":"object"}`, `"example.com/kind":"status"`,
				`"io.mentat/upstream":{"group":"beta","tool":"engine_status"}`} {
				if !strings.Contains(string(js), frag) {
					t.Errorf("beta__engine_status lost %s: %s", frag, js)
				}
			}
			for _, name := range []string{"alpha", "beta"} {
				res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: name + "__engine_status"})
				if err != nil {
					t.Fatal(err)
				}
				if res.IsError || resultText(res) != "engine "+name+" running" {
					t.Fatalf("%s__engine_status = %+v %q", name, res, resultText(res))
				}
				if sc, _ := res.StructuredContent.(map[string]any); sc["engine"] != name {
					t.Fatalf("structured = %v", res.StructuredContent)
				}
			}
			res2, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "beta__latency_percentiles", Arguments: map[string]any{"window_s": 5}})
			if err != nil || res2.IsError || resultText(res2) != `beta p50=10ms args={"window_s":5}` {
				t.Fatalf("beta__latency_percentiles = %v %q", err, resultText(res2))
			}
			res3, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "serve_status"})
			if err != nil || res3.IsError || !strings.Contains(resultText(res3), `"beta"`) {
				t.Fatalf("serve_status = %v %q", err, resultText(res3))
			}
		})
	}
}

func TestToolsTTLCache(t *testing.T) {
	t.Run("kept for the TTL", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		r := newRouter(t, Config{ToolsTTL: time.Hour}, group("alpha", a.URL, true))
		for range 3 {
			cs := connect(t, r.URL, clientOpts{version: legacy})
			if n := len(toolNames(t, cs)); n != 4 {
				t.Fatalf("%d tools", n)
			}
		}
		if n := a.listHits.Load(); n != 1 {
			t.Fatalf("upstream asked %d times within the TTL, want 1", n)
		}
	})
	t.Run("asked again after the TTL", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		newRouter(t, Config{ToolsTTL: 200 * time.Millisecond, SnapshotPoll: 50 * time.Millisecond}, group("alpha", a.URL, true))
		eventually(t, "three refreshes", func() bool { return a.listHits.Load() >= 3 })
	})
	t.Run("failed and empty answers are not cached", func(t *testing.T) {
		a := newUpstream(t, "alpha")
		a.set(func(u *testUpstream) { u.listFail, u.listNone = 2, 2 })
		r := newRouter(t, Config{ToolsTTL: time.Hour, RetryInterval: 20 * time.Millisecond, SnapshotPoll: 20 * time.Millisecond},
			group("alpha", a.URL, true))
		cs := connect(t, r.URL, clientOpts{version: legacy})
		eventually(t, "alpha's tools after two failures and two empty lists", func() bool {
			return len(toolNames(t, cs)) == 4
		})
		if n := a.listHits.Load(); n != 5 {
			t.Fatalf("upstream asked %d times, want 5 (2 failed, 2 empty, 1 good)", n)
		}
	})
}

func TestHungUpstreamTimesOut(t *testing.T) {
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	a.set(func(u *testUpstream) { u.hang = true })
	r := newRouter(t, Config{CallTimeout: 2 * time.Second}, group("alpha", a.URL, true), group("beta", b.URL, true))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	toolNames(t, cs)

	hung := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__set_latency"})
		if err != nil {
			res = errorResult("protocol error: %v", err)
		}
		hung <- res
	}()
	<-a.started
	// The other group answers while alpha hangs.
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "beta__set_latency"})
	if err != nil || res.IsError || resultText(res) != "beta latency set" {
		t.Fatalf("beta during alpha's hang: %v %q", err, resultText(res))
	}
	if names := toolNames(t, cs); len(names) != 7 {
		t.Fatalf("list during alpha's hang: %v", names)
	}
	res = <-hung
	if !res.IsError || !strings.Contains(resultText(res), `group "alpha"`) || !strings.Contains(resultText(res), "timed out after 2s") {
		t.Fatalf("hung call = %v %q", res.IsError, resultText(res))
	}
	eventually(t, "the upstream call cancelled", func() bool { return a.cancelled.Load() == 1 })
}

func TestClientCancelCancelsUpstream(t *testing.T) {
	a := newUpstream(t, "alpha")
	a.set(func(u *testUpstream) { u.hang = true })
	r := newRouter(t, Config{}, group("alpha", a.URL, true))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	toolNames(t, cs)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "alpha__set_latency"})
		done <- err
	}()
	<-a.started
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	eventually(t, "the upstream call cancelled", func() bool { return a.cancelled.Load() == 1 })
}

func TestProgressPassesThrough(t *testing.T) {
	a := newUpstream(t, "alpha")
	r := newRouter(t, Config{}, group("alpha", a.URL, true))
	progress := make(chan *sdk.ProgressNotificationParams, 8)
	cs := connect(t, r.URL, clientOpts{version: legacy, progress: progress})
	toolNames(t, cs)
	params := &sdk.CallToolParams{Name: "alpha__latency_percentiles"}
	params.SetProgressToken("my-token")
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil || res.IsError {
		t.Fatalf("%v %q", err, resultText(res))
	}
	for i := 1; i <= 3; i++ {
		select {
		case p := <-progress:
			if p.ProgressToken != "my-token" || p.Progress != float64(i) || p.Total != 3 || p.Message != "alpha" {
				t.Fatalf("progress %d = %+v", i, p)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("progress %d never arrived", i)
		}
	}
}

func TestCallErrorsAreToolResults(t *testing.T) {
	a := newUpstream(t, "alpha")
	dead := newUpstream(t, "dead")
	deadURL := dead.URL
	dead.close()
	r := newRouter(t, Config{ConnectTimeout: 5 * time.Second},
		group("alpha", a.URL, true), group("dead", deadURL, false), group("silent", "", false))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	if names := toolNames(t, cs); len(names) != 4 {
		t.Fatalf("a dead upstream broke the list: %v", names)
	}
	for _, tc := range []struct{ tool, want string }{
		{"nogroup__engine_status", `group "nogroup": unknown to the router`},
		{"alpha__nope", `group "alpha": no tool "alpha__nope"`},
		{"silent__engine_status", `group "silent": announces no MCP endpoint`},
		{"dead__engine_status", `group "dead": no tool`},
		{"no_separator", `unknown tool "no_separator"`},
	} {
		res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: tc.tool})
		if err != nil {
			t.Fatalf("%s: protocol error %v, want a tool error", tc.tool, err)
		}
		if !res.IsError || !strings.Contains(resultText(res), tc.want) {
			t.Errorf("%s = %v %q, want isError with %q", tc.tool, res.IsError, resultText(res), tc.want)
		}
	}
	// A tool that vanished upstream after the list: the upstream's refusal
	// comes back as a tool error naming the group.
	a.server.RemoveTools("set_latency")
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__set_latency"})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `group "alpha"`) {
		t.Fatalf("vanished tool = %v %v %q", err, res != nil && res.IsError, resultText(res))
	}
}

func TestUpstreamDownForCall(t *testing.T) {
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	r := newRouter(t, Config{ToolsTTL: time.Hour, ConnectTimeout: 5 * time.Second}, group("alpha", a.URL, true), group("beta", b.URL, true))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	toolNames(t, cs)
	b.close()
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "beta__engine_status"})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `group "beta"`) {
		t.Fatalf("call to a stopped upstream = %v %q", err, resultText(res))
	}
	res, err = cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
	if err != nil || res.IsError {
		t.Fatalf("alpha after beta stopped = %v %q", err, resultText(res))
	}
}

func TestUpstreamSessionReestablished(t *testing.T) {
	a := newUpstream(t, "alpha")
	r := newRouter(t, Config{ToolsTTL: time.Hour}, group("alpha", a.URL, true))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	toolNames(t, cs)
	for i := range 3 {
		a.dropSessions()
		res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
		if err != nil || res.IsError {
			t.Fatalf("call %d after the upstream lost our session: %v %q", i, err, resultText(res))
		}
	}
	if n := a.initHits.Load(); n < 2 {
		t.Fatalf("upstream saw %d handshakes, want a new one after each loss", n)
	}
}

func TestListChanged(t *testing.T) {
	for _, version := range []string{legacy, ""} {
		t.Run("version="+version, func(t *testing.T) { testListChanged(t, version) })
	}
}

func testListChanged(t *testing.T, version string) {
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	r := newRouter(t, Config{ToolsTTL: time.Hour, SnapshotPoll: 50 * time.Millisecond}, group("alpha", a.URL, true))
	changed := make(chan struct{}, 1)
	cs := connect(t, r.URL, clientOpts{version: version, listChanged: changed})
	if n := len(toolNames(t, cs)); n != 4 {
		t.Fatalf("%d tools", n)
	}
	expect := func(what string, n int) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("no list_changed after %s", what)
		}
		eventually(t, what, func() bool { return len(toolNames(t, cs)) == n })
	}
	r.setGroups(group("alpha", a.URL, true), group("beta", b.URL, true))
	expect("a group appeared", 7)
	r.setGroups(group("beta", b.URL, true))
	expect("a group left", 4)
	b.server.AddTool(&sdk.Tool{Name: "drain", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	expect("an upstream's tools changed", 5)
}

func TestSessions(t *testing.T) {
	a := newUpstream(t, "alpha")
	r := newRouter(t, Config{SessionTimeout: 300 * time.Millisecond}, group("alpha", a.URL, true))
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	post := func(session, origin, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, r.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", legacy)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const ping = `{"jsonrpc":"2.0","id":2,"method":"ping"}`

	if resp := post("no-such-session", "", ping); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown session: %d, want 404", resp.StatusCode)
	}
	resp := post("", "", initialize)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d session %q", resp.StatusCode, id)
	}
	if resp := post(id, "", ping); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping in session: %d", resp.StatusCode)
	}
	sessions := func() (ids []string) {
		for ss := range r.server.Sessions() {
			ids = append(ids, ss.ID())
		}
		return ids
	}
	if local := sessions(); len(local) != 1 || local[0] == id {
		t.Fatalf("local sessions %v: the client must hold a sealed id, never the SDK's", local)
	}
	// An idle session's local copy is reaped; the session goes on: its
	// next request rebuilds the copy.
	eventually(t, "the idle session reaped", func() bool { return len(sessions()) == 0 })
	if resp := post(id, "", ping); resp.StatusCode != http.StatusOK {
		t.Fatalf("reaped session: %d, want 200 (rebuilt)", resp.StatusCode)
	}
	if n := len(sessions()); n != 1 {
		t.Fatalf("%d local sessions after the rebuild, want 1", n)
	}
}

// TestModernToolErrorIsComplete checks the tool error the router builds
// itself carries resultType for a 2026-07-28 client, whose protocol needs it.
func TestModernToolErrorIsComplete(t *testing.T) {
	r := newRouter(t, Config{})
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gone__engine_status","arguments":{},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, r.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "gone__engine_status")
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, frag := range []string{`"isError":true`, `"resultType":"complete"`, `group \"gone\": unknown to the router`} {
		if !strings.Contains(string(out), frag) {
			t.Errorf("response lacks %s: %d %s", frag, resp.StatusCode, out)
		}
	}
}

// TestRewrittenGroupName: a group name clients would refuse in a tool name
// is rewritten deterministically, said so in the description, and calls
// still reach the right upstream. The group has no MCP URL in use yet, only
// a candidate, and is unhealthy: the merge uses the candidate anyway.
func TestRewrittenGroupName(t *testing.T) {
	a := newUpstream(t, "alpha")
	g := &routes.Group{Name: "glm-5.1", MCPCandidates: []string{a.URL}, WhyNot: "not probed yet"}
	r := newRouter(t, Config{}, g)
	cs := connect(t, r.URL, clientOpts{version: legacy})
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := buildNames([]ref{{"glm-5.1", "engine_status"}}).byRef[ref{"glm-5.1", "engine_status"}]
	var found *sdk.Tool
	for _, tool := range res.Tools {
		if tool.Name == want {
			found = tool
		}
	}
	if found == nil || !strings.HasPrefix(want, "glm-5_1__engine_status_") {
		t.Fatalf("no %q in %v", want, toolNames(t, cs))
	}
	if !strings.Contains(found.Description, `Tool "engine_status" of group "glm-5.1"`) || !strings.HasPrefix(found.Description, "Reports the engine's state.") {
		t.Fatalf("description = %q", found.Description)
	}
	call, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: want})
	if err != nil || call.IsError || resultText(call) != "engine alpha running" {
		t.Fatalf("call %s = %v %q", want, err, resultText(call))
	}
}

// TestHangingUpstreamDoesNotBlockList: an upstream that never answers at
// all (a wedged status server) costs the list nothing but its own tools.
func TestHangingUpstreamDoesNotBlockList(t *testing.T) {
	a := newUpstream(t, "alpha")
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer hang.CloseClientConnections()
	defer close(stop)
	r := newRouter(t, Config{ConnectTimeout: time.Second, CallTimeout: 2 * time.Second, ListWait: 200 * time.Millisecond},
		group("alpha", a.URL, true), group("wedged", hang.URL+"/mcp", false))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	if names := toolNames(t, cs); len(names) != 4 {
		t.Fatalf("tools/list with a wedged upstream: %v", names)
	}
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "wedged__engine_status"})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `group "wedged"`) {
		t.Fatalf("call to the wedged group = %v %q", err, resultText(res))
	}
	res, err = cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
	if err != nil || res.IsError {
		t.Fatalf("alpha beside a wedged group = %v %q", err, resultText(res))
	}
}

// TestCallWaitsForFirstAnswers: a tools/call on a router that has not
// asked its groups yet (it just started) waits for their first answers,
// as tools/list does, instead of calling the tool unknown.
func TestCallWaitsForFirstAnswers(t *testing.T) {
	a := newUpstream(t, "alpha")
	r := newRouter(t, Config{}, group("alpha", a.URL, true))
	cs := connect(t, r.URL, clientOpts{version: legacy})
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
	if err != nil || res.IsError || resultText(res) != "engine alpha running" {
		t.Fatalf("first call: %v %q", err, resultText(res))
	}
}
