package enginesim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMCPConformance runs the official MCP conformance suite, both eras,
// against the management server. It needs the pinned Node tools that
// `make setup` installs into .deps/node and skips without them.
func TestMCPConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite skipped in -short mode")
	}
	bin, _ := filepath.Abs("../../.deps/node/node_modules/.bin")
	mods := filepath.Join(bin, "..")
	node := filepath.Join(bin, "node")
	if _, err := os.Stat(node); err != nil {
		t.Fatal("no .deps/node: run `make setup-npm` (make test does): ", err)
	}
	te := startEngine(t, true, nil)
	for _, c := range []struct{ suite, scenario, version string }{
		{"conformance-legacy", "server-initialize", ""},
		{"conformance-legacy", "tools-list", ""},
		{"conformance-legacy", "dns-rebinding-protection", ""},
		{"conformance-modern", "server-session-lifecycle", "2025-06-18"},
		{"conformance-modern", "tools-list", "2026-07-28"},
		{"conformance-modern", "http-header-validation", "2026-07-28"},
	} {
		t.Run(c.suite+"/"+c.scenario+"/"+c.version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			args := []string{filepath.Join(mods, c.suite, "dist", "index.js"), "server", "--url", te.mcpURL, "--scenario", c.scenario}
			if c.version != "" {
				args = append(args, "--spec-version", c.version)
			}
			cmd := exec.CommandContext(ctx, node, args...)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), " 0 failed") {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
