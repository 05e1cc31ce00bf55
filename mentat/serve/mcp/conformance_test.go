package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The official MCP conformance suite and the MCP Inspector CLI against the
// merged endpoint, served in process with two real upstreams. The tools
// are pinned in scripts/npm-tools.json and installed into .deps/node by
// `make setup-npm`; nothing is downloaded here (node runs the installed
// files, npx runs with --no-install).

// npmTools locates the installed tools or fails the test saying how to
// install them.
type npmTools struct {
	dir        string // .deps/node
	node       string // Node 22
	legacy     string // @modelcontextprotocol/conformance@0.1.16 entry point
	modern     string // @modelcontextprotocol/conformance@0.2.0-alpha.12
	binDir     string // node_modules/.bin, first on PATH
	scratchDir string
}

func findNPMTools(t *testing.T) *npmTools {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatal("cannot find the module root (go.mod) above the test directory")
		}
		root = parent
	}
	dir := filepath.Join(root, ".deps", "node")
	n := &npmTools{
		dir:        dir,
		binDir:     filepath.Join(dir, "node_modules", ".bin"),
		node:       filepath.Join(dir, "node_modules", ".bin", "node"),
		legacy:     filepath.Join(dir, "node_modules", "conformance-legacy", "dist", "index.js"),
		modern:     filepath.Join(dir, "node_modules", "conformance-modern", "dist", "index.js"),
		scratchDir: t.TempDir(),
	}
	for _, f := range []string{n.node, n.legacy, n.modern, filepath.Join(n.binDir, "mcp-inspector")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("MCP conformance tools missing (%v): run make setup-npm", err)
		}
	}
	out, err := exec.Command(n.node, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v22.") {
		t.Fatalf("%s is not Node 22 (%q, %v): run make setup-npm", n.node, out, err)
	}
	return n
}

// command runs a tool from .deps/node with Node 22 first on PATH, a scratch
// HOME (the Inspector keeps state there) and npm offline.
func (n *npmTools) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(),
		"PATH="+n.binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+n.scratchDir,
		"npm_config_offline=true",
		"npm_config_update_notifier=false",
		"NO_COLOR=1",
	)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// conformanceTally matches the suite's summary, "Passed: 3/3, 0 failed".
var conformanceTally = regexp.MustCompile(`Passed: (\d+)/(\d+), (\d+) failed`)

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Node conformance suite; skipped with -short")
	}
	tools := findNPMTools(t)
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	r := newRouter(t, Config{}, group("alpha", a.URL, true), group("beta", b.URL, false))

	type run struct {
		suite, scenario, version string
	}
	var runs []run
	for _, s := range []string{"server-initialize", "ping", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams"} {
		runs = append(runs, run{tools.legacy, s, ""})
	}
	for _, v := range []string{"2025-06-18", "2025-11-25"} {
		for _, s := range []string{"server-initialize", "ping", "tools-list"} {
			runs = append(runs, run{tools.modern, s, v})
		}
	}
	runs = append(runs, run{tools.modern, "dns-rebinding-protection", "2025-11-25"})
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		runs = append(runs, run{tools.modern, "server-session-lifecycle", v})
	}
	for _, s := range []string{"tools-list", "http-header-validation", "caching", "dns-rebinding-protection"} {
		runs = append(runs, run{tools.modern, s, "2026-07-28"})
	}
	for _, c := range runs {
		name := c.scenario
		if c.version != "" {
			name += "@" + c.version
		}
		if c.suite == tools.legacy {
			name += "(0.1.16)"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := []string{c.suite, "server", "--url", r.URL, "--scenario", c.scenario}
			if c.version != "" {
				args = append(args, "--spec-version", c.version)
			}
			out, err := tools.command(ctx, tools.node, args...).CombinedOutput()
			m := conformanceTally.FindSubmatch(out)
			if err != nil || m == nil {
				t.Fatalf("conformance %s: %v\n%s", name, err, out)
			}
			passed, _ := strconv.Atoi(string(m[1]))
			total, _ := strconv.Atoi(string(m[2]))
			failed, _ := strconv.Atoi(string(m[3]))
			if failed != 0 || passed == 0 || passed != total {
				t.Fatalf("conformance %s: %d/%d passed, %d failed\n%s", name, passed, total, failed, out)
			}
			t.Logf("%s: %d passed", name, passed)
		})
	}

	for _, era := range []string{"legacy", "modern"} {
		t.Run("inspector-"+era, func(t *testing.T) {
			inspectorRun(t, tools, r.URL, era, "",
				"[alpha__engine_status alpha__latency_percentiles alpha__set_latency beta__engine_status beta__latency_percentiles beta__set_latency serve_status]",
				"beta__latency_percentiles", "beta p50=10ms")
		})
	}
}

// The Inspector CLI with an API key sees and calls only its key's groups.
func TestInspectorWithKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Node MCP Inspector; skipped with -short")
	}
	tools := findNPMTools(t)
	r, kf, _, _ := keyedRouter(t)
	for _, era := range []string{"legacy", "modern"} {
		t.Run("inspector-"+era, func(t *testing.T) {
			inspectorRun(t, tools, r.URL, era, kf.secrets["team-a"],
				"[alpha__engine_status alpha__latency_percentiles alpha__set_latency]",
				"alpha__latency_percentiles", "alpha p50=10ms")
		})
	}
}

// inspectorRun does one tools/list and one tools/call with the Inspector
// CLI in one protocol era, with key ("" none) as a bearer token; the list
// must be wantList and the call's text start with wantCall.
func inspectorRun(t *testing.T, tools *npmTools, url, era, key, wantList, call, wantCall string) {
	inspect := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		full := []string{"--no-install", "mcp-inspector", "--cli", url, "--transport", "http", "--protocol-era", era}
		if key != "" {
			full = append(full, "--header", "Authorization: Bearer "+key)
		}
		full = append(full, args...)
		out, err := tools.command(ctx, "npx", full...).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out, stderr)
		}
		return out
	}
	out := inspect("--method", "tools/list")
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("inspector tools/list output: %v\n%s", err, out)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if got := fmt.Sprint(names); got != wantList {
		t.Fatalf("inspector tools/list = %s, want %s", got, wantList)
	}
	out = inspect("--method", "tools/call", "--tool-name", call, "--tool-arg", "window_s=5")
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("inspector tools/call output: %v\n%s", err, out)
	}
	if res.IsError || len(res.Content) != 1 || !strings.HasPrefix(res.Content[0].Text, wantCall) {
		t.Fatalf("inspector tools/call = %s", out)
	}
}
