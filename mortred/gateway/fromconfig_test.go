package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

// TestFromConfigEdge: the [gateway] edge keys reach the listener's limits
// and the upstream idle timeout the Transport; unset keys take the
// documented defaults.
func TestFromConfigEdge(t *testing.T) {
	env := envconf.Map(map[string]string{EnvAPIToken: "t", EnvMetricsToken: "m"})
	load := func(gateway string) *Setup {
		t.Helper()
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "server"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "mortred.toml")
		if err := os.WriteFile(p, []byte("[gateway]\n"+gateway), 0o644); err != nil {
			t.Fatal(err)
		}
		cp, err := config.LoadControlPlane(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := FromConfig(cp, &config.Catalog{}, env)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	def := load("")
	want := httpx.Limits{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 60 * time.Second, IdleTimeout: 90 * time.Second,
		WriteTimeout: 60 * time.Second, MaxHeaderBytes: 65536, MaxConns: 1024}
	if def.Config.Edge != want || def.Config.IdleConnTimeout != 90*time.Second {
		t.Fatalf("defaults: edge %+v, upstream idle %v", def.Config.Edge, def.Config.IdleConnTimeout)
	}
	set := load("read_header_timeout_ms = 1000\nbody_timeout_ms = 2000\nidle_timeout_ms = 3000\nwrite_timeout_ms = 4000\n" +
		"max_header_bytes = 8192\nmax_connections = 5\nupstream_idle_timeout_ms = 6000\n")
	want = httpx.Limits{ReadHeaderTimeout: time.Second, BodyTimeout: 2 * time.Second, IdleTimeout: 3 * time.Second,
		WriteTimeout: 4 * time.Second, MaxHeaderBytes: 8192, MaxConns: 5}
	if set.Config.Edge != want || set.Config.IdleConnTimeout != 6*time.Second {
		t.Fatalf("set: edge %+v, upstream idle %v", set.Config.Edge, set.Config.IdleConnTimeout)
	}
}
