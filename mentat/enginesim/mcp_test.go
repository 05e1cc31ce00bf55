package enginesim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connectMCP(t *testing.T, te *testEngine) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "enginesim-test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: te.mcpURL, HTTPClient: te.client}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", te.mcpURL, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool[T any](t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (T, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out T
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return out, res
}

func TestMCPTools(t *testing.T) {
	te := startEngine(t, true, func(c *Config) { c.ITL = 5 * time.Millisecond })
	cs := connectMCP(t, te)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = true
		schema, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(string(schema), `"type":"object"`) {
			t.Errorf("%s input schema %s is not an object schema", tool.Name, schema)
		}
		if tool.Name == "latency_percentiles" && !strings.Contains(string(schema), `"required":["window_s"]`) {
			t.Errorf("latency_percentiles must require window_s: %s", schema)
		}
	}
	for _, want := range []string{"engine_status", "latency_percentiles", "set_latency"} {
		if !names[want] {
			t.Errorf("tool %s missing; have %v", want, names)
		}
	}

	// engine_status follows traffic.
	te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "x", "max_tokens": 3})
	st, _ := callTool[statusOut](t, cs, "engine_status", nil)
	if st.Totals.Requests != 1 || st.Totals.GenerationTokens != 3 || st.Totals.Finished.Length != 1 ||
		st.MaxNumSeqs != te.cfg.MaxNumSeqs || st.Latency.ITL != "5ms" || st.ServedModelNames[0] != "sim" {
		t.Errorf("engine_status: %+v", st)
	}
	// The prefix cache part: a 42-token prompt sent twice hits its two
	// whole blocks the second time.
	before := st.PrefixCache.QueryTokens
	prompt := Tokenize(nil, longText("gamma", 40))
	for range 2 {
		te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": prompt, "max_tokens": 1})
	}
	st, _ = callTool[statusOut](t, cs, "engine_status", nil)
	pc := st.PrefixCache
	if !pc.Enabled || pc.BlockSize != 16 || pc.Blocks != te.cfg.KVCacheTokens/16 || pc.BlocksUsed != 0 || pc.CachedBlocks < 2 ||
		pc.CachedTokens != 16*pc.CachedBlocks || pc.QueryTokens != before+2*int64(len(prompt)) || pc.HitTokens != 32 ||
		pc.HitRate != 32/float64(pc.QueryTokens) || pc.Evictions != 0 {
		t.Errorf("engine_status prefix_cache: %+v", pc)
	}
	if st.PrefillPerToken != "50µs" || st.MaxNumBatchedTokens != 2048 || st.DecodeKnee != 256 {
		t.Errorf("engine_status cost model: %s, %d, %d", st.PrefillPerToken, st.MaxNumBatchedTokens, st.DecodeKnee)
	}

	// set_latency: all or nothing.
	_, res := callTool[setLatencyOut](t, cs, "set_latency", map[string]any{"ttft": "40ms", "itl": "soon"})
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "itl") {
		t.Errorf("a bad itl must be a tool error naming it: %+v", res)
	}
	if got := te.lat.get(); got.TTFT != te.cfg.TTFT {
		t.Errorf("a refused set_latency changed ttft to %v", got.TTFT)
	}
	set, _ := callTool[setLatencyOut](t, cs, "set_latency", map[string]any{"ttft": "40ms", "itl": "15ms", "jitter": 0})
	if set.Current.TTFT != "40ms" || set.Current.ITL != "15ms" || set.Previous.ITL != "5ms" {
		t.Errorf("set_latency: %+v", set)
	}

	// latency_percentiles samples what is served during its window, at the
	// new latency.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(100 * time.Millisecond) // inside the window
		te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "y", "max_tokens": 10})
	}()
	start := time.Now()
	p, res := callTool[percentilesOut](t, cs, "latency_percentiles", map[string]any{"window_s": 1.5})
	wg.Wait()
	if res.IsError {
		t.Fatalf("latency_percentiles: %+v", res.Content)
	}
	if time.Since(start) < 1400*time.Millisecond {
		t.Errorf("latency_percentiles returned after %v, before its window", time.Since(start))
	}
	if p.TTFT.Count != 1 || p.ITL.Count != 9 || p.ITL.P50 < 0.015 || p.TTFT.P50 < 0.040 || p.ITL.P99 < p.ITL.P50 {
		t.Errorf("latency_percentiles: %+v", p)
	}
	_, res = callTool[percentilesOut](t, cs, "latency_percentiles", map[string]any{"window_s": 0})
	if !res.IsError {
		t.Errorf("window_s 0 must be refused")
	}
}

// A 2025-era client gets the stateful handler: a session id on initialize.
func TestMCPLegacyEra(t *testing.T) {
	te := startEngine(t, true, nil)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"legacy","version":"0"}}}`
	req, _ := http.NewRequest("POST", te.mcpURL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := te.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Mcp-Session-Id") == "" || !strings.Contains(string(b), `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("legacy initialize: %d session=%q %s", res.StatusCode, res.Header.Get("Mcp-Session-Id"), b)
	}
	// A foreign Origin is refused on every method.
	req, _ = http.NewRequest("GET", te.mcpURL, nil)
	req.Header.Set("Origin", "http://evil.example")
	res, err = te.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Origin: %d", res.StatusCode)
	}
}

func TestModernRequestRule(t *testing.T) {
	for _, c := range []struct {
		method, version, session, body string
		modern                         bool
	}{
		{"POST", "2026-07-28", "", "", true},
		{"POST", "2025-06-18", "", `{"method":"server/discover"}`, false},
		{"POST", "", "abc", `{"method":"server/discover"}`, false},
		{"GET", "", "", "", false},
		{"POST", "", "", `{"jsonrpc":"2.0","id":1,"method":"server/discover"}`, true},
		{"POST", "", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, true},
		{"POST", "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, false},
		{"POST", "", "", `[{"method":"server/discover"}]`, false},
		{"POST", "", "", `not json`, false},
	} {
		r, _ := http.NewRequest(c.method, "http://x/mcp", strings.NewReader(c.body))
		if c.version != "" {
			r.Header.Set("MCP-Protocol-Version", c.version)
		}
		if c.session != "" {
			r.Header.Set("Mcp-Session-Id", c.session)
		}
		if got := modernRequest(r); got != c.modern {
			t.Errorf("%+v: modern=%v", c, got)
		}
		rest, _ := io.ReadAll(r.Body)
		if string(rest) != c.body {
			t.Errorf("%+v: body not put back: %q", c, rest)
		}
	}
}
