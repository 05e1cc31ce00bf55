package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig(envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Port: 6381, HTTPAddr: ":6381", Daemons: []string{"127.0.0.1:6380"}, AnnouncePort: 6382, AnnounceAddr: ":6382",
		AllowedSources: []string{"10.100.0.", "192.168.1.", "127.0.0.1", "::1", "172."}, DiscoverPeers: true,
		PollInterval: 10 * time.Second, ProbeInterval: 5 * time.Second, ProbeTimeout: 3 * time.Second,
		ProbeFresh: 18 * time.Second, ProbePromote: 30 * time.Second, ServingTimeout: 1800 * time.Second,
		MCPTimeout: 180 * time.Second, ToolsTTL: 60 * time.Second, Universe: "default",
		MCPSessionMax: 24 * time.Hour,
		Edge: httpx.Limits{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 60 * time.Second, IdleTimeout: 90 * time.Second,
			WriteTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, MaxConns: 4096},
		Routing: balance.Config{Policy: balance.Prefix, Threshold: 12, SessionHeader: "X-Session-ID",
			ScrapeInterval: time.Second, ScrapeTimeout: 3 * time.Second, SaturatedKV: 0.95},
		FlowLimits: flow.Config{MaxWait: flow.DefaultMaxWait, MaxQueue: flow.DefaultMaxQueue, MaxTotal: flow.DefaultMaxTotal, Burst: flow.DefaultBurst},
		Drain:      5 * time.Second, ShutdownTimeout: 30 * time.Second,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", c, want)
	}
}

// TestLoadConfigFlow: flow control's variables, and the bad values that
// fall back to their defaults.
func TestLoadConfigFlow(t *testing.T) {
	var warned []string
	env := envconf.Map(map[string]string{
		"FLOW_CONTROL": "on", "FLOW_MAX_INFLIGHT": "6", "FLOW_KV_THRESHOLD": "0.8",
		"FLOW_WAIT_S_CRITICAL": "90", "FLOW_WAIT_S_STANDARD": "2.5", "FLOW_WAIT_S_SHEDDABLE": "-1",
		"FLOW_QUEUE_CRITICAL": "5", "FLOW_QUEUE_STANDARD": "x", "FLOW_QUEUE_SHEDDABLE": "7", "FLOW_QUEUE_TOTAL": "9",
		"FLOW_BURST_TOKENS": "64", "SSE_KEEPALIVE_S": "15", "MODEL_WAIT_S": "20",
	})
	env.Warn = func(name, _, _ string) { warned = append(warned, name) }
	c, err := LoadConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	want := flow.Config{MaxWait: [flow.NumBands]time.Duration{90 * time.Second, 2500 * time.Millisecond, flow.DefaultMaxWait[flow.Sheddable]},
		MaxQueue: [flow.NumBands]int{5, flow.DefaultMaxQueue[flow.Standard], 7}, MaxTotal: 9, Burst: 64}
	if !c.Flow || c.FlowLimits != want || c.Routing.MaxInflight != 6 || c.Routing.SaturatedKV != 0.8 ||
		c.KeepAlive != 15*time.Second || c.ModelWait != 20*time.Second {
		t.Errorf("flow config %+v %+v %v %v %v %v", c.Flow, c.FlowLimits, c.Routing.MaxInflight, c.Routing.SaturatedKV, c.KeepAlive, c.ModelWait)
	}
	if fmt.Sprint(warned) != "[FLOW_QUEUE_STANDARD FLOW_WAIT_S_SHEDDABLE]" {
		t.Errorf("warned about %v", warned)
	}
	for _, v := range []string{"maybe", "2"} {
		var w []string
		e := envconf.Map(map[string]string{"FLOW_CONTROL": v, "FLOW_KV_THRESHOLD": "1.5"})
		e.Warn = func(name, _, _ string) { w = append(w, name) }
		if c, _ := LoadConfig(e); c.Flow || c.Routing.SaturatedKV != balance.KVFull || len(w) != 2 {
			t.Errorf("FLOW_CONTROL=%s: on %v, kv %v, warned %v", v, c.Flow, c.Routing.SaturatedKV, w)
		}
	}
}

// TestLoadConfigEdge: every edge limit is read from its SERVE_* variable;
// SERVE_MAX_CONNECTIONS=0 means no cap.
func TestLoadConfigEdge(t *testing.T) {
	c, err := LoadConfig(envconf.Map(map[string]string{
		"SERVE_READ_HEADER_TIMEOUT_S": "2", "SERVE_BODY_TIMEOUT_S": "3.5", "SERVE_IDLE_TIMEOUT_S": "4",
		"SERVE_WRITE_TIMEOUT_S": "5", "SERVE_MAX_HEADER_BYTES": "8192", "SERVE_MAX_CONNECTIONS": "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := httpx.Limits{ReadHeaderTimeout: 2 * time.Second, BodyTimeout: 3500 * time.Millisecond, IdleTimeout: 4 * time.Second,
		WriteTimeout: 5 * time.Second, MaxHeaderBytes: 8192, MaxConns: -1}
	if c.Edge != want {
		t.Fatalf("edge %+v, want %+v", c.Edge, want)
	}
}

func TestLoadConfigRules(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("  s3cret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)

	c, err := LoadConfig(envconf.Map(map[string]string{
		"MENTAT_DAEMONS": "", "MENTAT_ANNOUNCE_PORT": "0", "DISCOVER_PEERS": "yes",
		"PROBE_INTERVAL_S": "0.5", "PROBE_TIMEOUT_S": "0.25", "POLL_INTERVAL_S": "-1",
		"MENTAT_SECRET": "ignored", "MENTAT_SECRET_FILE": keyFile, "ALLOWED_SOURCES": "10.,::1",
		"MENTAT_UNIVERSE": "prod", "SERVE_PORT": "7000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Daemons) != 0 || c.Daemons == nil {
		t.Fatalf("MENTAT_DAEMONS set and empty seeds nothing: %v", c.Daemons)
	}
	if c.AnnounceAddr != "" || c.AnnouncePort != 0 {
		t.Fatal("MENTAT_ANNOUNCE_PORT=0 leaves the listener on")
	}
	if c.DiscoverPeers {
		t.Fatal("DISCOVER_PEERS=yes enables peers; only 1 does")
	}
	if c.ProbeInterval != 500*time.Millisecond || c.ProbeFresh != 1750*time.Millisecond || c.ProbePromote != 3*time.Second {
		t.Fatalf("derived probe times: %v %v %v", c.ProbeInterval, c.ProbeFresh, c.ProbePromote)
	}
	if c.PollInterval != 10*time.Second {
		t.Fatal("negative *_S did not take the default")
	}
	if string(c.Secret) != "s3cret" || c.Universe != "prod" || c.HTTPAddr != ":7000" || !reflect.DeepEqual(c.AllowedSources, []string{"10.", "::1"}) {
		t.Fatalf("%+v", c)
	}

	c, _ = LoadConfig(envconf.Map(map[string]string{"PROBE_FRESH_S": "7", "PROBE_PROMOTE_S": "9", "MENTAT_SECRET": " k ",
		"MENTAT_DAEMONS": "10.0.0.1, 10.0.0.2:7000,[::1]:6380,http://h:1/"}))
	if c.ProbeFresh != 7*time.Second || c.ProbePromote != 9*time.Second || string(c.Secret) != "k" {
		t.Fatalf("%+v", c)
	}
	if !reflect.DeepEqual(c.Daemons, []string{"10.0.0.1:6380", "10.0.0.2:7000", "[::1]:6380", "h:1"}) {
		t.Fatalf("daemons %v", c.Daemons)
	}

	for name, env := range map[string]map[string]string{
		"unreadable": {"MENTAT_SECRET_FILE": filepath.Join(dir, "missing")},
		"empty":      {"MENTAT_SECRET_FILE": empty},
		"bad daemon": {"MENTAT_DAEMONS": "10.0.0.1:notaport"},
	} {
		_, err := LoadConfig(envconf.Map(env))
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if name != "bad daemon" && !strings.Contains(err.Error(), "MENTAT_SECRET_FILE") {
			t.Errorf("%s: error does not say which variable: %v", name, err)
		}
	}
}

func TestLoadConfigRouting(t *testing.T) {
	c, err := LoadConfig(envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Routing; r.Policy != balance.Prefix || r.Threshold != balance.DefaultThreshold ||
		r.SessionHeader != "X-Session-ID" || r.ScrapeInterval != time.Second || r.ScrapeTimeout != c.ProbeTimeout {
		t.Errorf("defaults: %+v", r)
	}
	var warned []string
	env := envconf.Map(map[string]string{"ROUTING_POLICY": "Round-Robin", "ROUTING_THRESHOLD": "3",
		"ROUTING_SESSION_HEADER": "X-Conversation", "ROUTING_SCRAPE_S": "0.5"})
	env.Warn = func(name, value, reason string) { warned = append(warned, name) }
	if c, _ = LoadConfig(env); c.Routing.Policy != balance.RoundRobin || c.Routing.Threshold != 3 ||
		c.Routing.SessionHeader != "X-Conversation" || c.Routing.ScrapeInterval != 500*time.Millisecond {
		t.Errorf("set: %+v", c.Routing)
	}
	if c, _ = LoadConfig(envconf.Map(map[string]string{"ROUTING_INDEX_BLOCKS": "512"})); c.Routing.IndexBlocks != 512 {
		t.Errorf("ROUTING_INDEX_BLOCKS=512: %+v", c.Routing)
	}
	env = envconf.Map(map[string]string{"ROUTING_POLICY": "random", "ROUTING_THRESHOLD": "0", "ROUTING_INDEX_BLOCKS": "-1"})
	env.Warn = func(name, value, reason string) { warned = append(warned, name) }
	if c, _ = LoadConfig(env); c.Routing.Policy != balance.Prefix || c.Routing.Threshold != 0 || c.Routing.IndexBlocks != 0 {
		t.Errorf("invalid values should take the defaults: %+v", c.Routing)
	}
	if strings.Join(warned, ",") != "ROUTING_POLICY,ROUTING_THRESHOLD,ROUTING_INDEX_BLOCKS" {
		t.Errorf("warnings for %v", warned)
	}
}

// TestLoadConfigIndexFile: ROUTING_INDEX_FILE is a path whose directory
// must exist at start, not only when the router stops and saves there.
func TestLoadConfigIndexFile(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadConfig(envconf.Map(map[string]string{"ROUTING_INDEX_FILE": " " + dir + "/index.json "}))
	if err != nil || c.IndexFile != dir+"/index.json" {
		t.Fatalf("ROUTING_INDEX_FILE in an existing directory: %q, %v", c.IndexFile, err)
	}
	if c, err := LoadConfig(envconf.Map(nil)); err != nil || c.IndexFile != "" {
		t.Fatalf("unset: %q, %v", c.IndexFile, err)
	}
	_, err = LoadConfig(envconf.Map(map[string]string{"ROUTING_INDEX_FILE": dir + "/missing/index.json"}))
	if err == nil || !strings.Contains(err.Error(), "ROUTING_INDEX_FILE") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing directory: %v, want an error naming ROUTING_INDEX_FILE", err)
	}
}

// TestLoadConfigKeys: the key files are paths (unset or empty: off), the
// CORS origins a checked list.
func TestLoadConfigKeys(t *testing.T) {
	c, err := LoadConfig(envconf.Map(map[string]string{"SERVE_KEYS_FILE": " /etc/k.toml ", "SERVE_UPSTREAM_KEYS_FILE": "/etc/u.toml",
		"SERVE_CORS_ORIGINS": "https://app.example, http://localhost:3000"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.KeysFile != "/etc/k.toml" || c.UpstreamKeysFile != "/etc/u.toml" ||
		!reflect.DeepEqual(c.CORSOrigins, []string{"https://app.example", "http://localhost:3000"}) {
		t.Fatalf("got %q %q %q", c.KeysFile, c.UpstreamKeysFile, c.CORSOrigins)
	}
	if c, err := LoadConfig(envconf.Map(map[string]string{"SERVE_KEYS_FILE": ""})); err != nil || c.KeysFile != "" || c.CORSOrigins != nil {
		t.Fatalf("empty: %+v %v", c, err)
	}
	for _, bad := range []string{"*", "https://app.example/path", "app.example"} {
		if _, err := LoadConfig(envconf.Map(map[string]string{"SERVE_CORS_ORIGINS": bad})); err == nil || !strings.Contains(err.Error(), "SERVE_CORS_ORIGINS") {
			t.Errorf("SERVE_CORS_ORIGINS=%s: %v", bad, err)
		}
	}
}

// TestLoadConfigMCPSessions: MCP_SESSION_MAX_S and MENTAT_SESSION_KEY_FILE
// (a path; the app reads the file), and the bad values that fall back.
func TestLoadConfigMCPSessions(t *testing.T) {
	c, err := LoadConfig(envconf.Map(map[string]string{"MCP_SESSION_MAX_S": "3600", "MENTAT_SESSION_KEY_FILE": " /etc/mentat/session.key "}))
	if err != nil {
		t.Fatal(err)
	}
	if c.MCPSessionMax != time.Hour || c.SessionKeyFile != "/etc/mentat/session.key" {
		t.Fatalf("got %v %q", c.MCPSessionMax, c.SessionKeyFile)
	}
	for _, bad := range []string{"0", "-5", "a day"} {
		var warned []string
		env := envconf.Map(map[string]string{"MCP_SESSION_MAX_S": bad, "MENTAT_SESSION_KEY_FILE": ""})
		env.Warn = func(name, _, _ string) { warned = append(warned, name) }
		c, err := LoadConfig(env)
		if err != nil || c.MCPSessionMax != DefaultMCPSessionMax || c.SessionKeyFile != "" || fmt.Sprint(warned) != "[MCP_SESSION_MAX_S]" {
			t.Errorf("MCP_SESSION_MAX_S=%s: %v %q %v, warned %v", bad, c.MCPSessionMax, c.SessionKeyFile, err, warned)
		}
	}
}

// TestLoadConfigStop: SERVE_DRAIN_S and SERVE_SHUTDOWN_S, and the values
// that fall back to their defaults with a warning naming the variable
// (zero among them: a *_S value must be positive).
func TestLoadConfigStop(t *testing.T) {
	c, err := LoadConfig(envconf.Map(map[string]string{"SERVE_DRAIN_S": "2.5", "SERVE_SHUTDOWN_S": "120"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Drain != 2500*time.Millisecond || c.ShutdownTimeout != 120*time.Second {
		t.Fatalf("drain %v, shutdown %v", c.Drain, c.ShutdownTimeout)
	}
	for _, bad := range []string{"0", "0.0", "-1", "soon", "NaN", "Inf"} {
		var warned []string
		env := envconf.Map(map[string]string{"SERVE_DRAIN_S": bad, "SERVE_SHUTDOWN_S": bad})
		env.Warn = func(name, value, reason string) {
			warned = append(warned, name+"="+value+": "+reason)
		}
		c, err := LoadConfig(env)
		if err != nil {
			t.Fatalf("%s: %v", bad, err)
		}
		if c.Drain != DefaultDrain || c.ShutdownTimeout != DefaultShutdownTimeout {
			t.Errorf("%s: drain %v, shutdown %v; want the defaults", bad, c.Drain, c.ShutdownTimeout)
		}
		if len(warned) != 2 || !strings.HasPrefix(warned[0], "SERVE_DRAIN_S="+bad+": must be a positive number of seconds") ||
			!strings.HasPrefix(warned[1], "SERVE_SHUTDOWN_S="+bad+": must be a positive number of seconds") {
			t.Errorf("%s: warned %q", bad, warned)
		}
		if z := bad == "0" || bad == "0.0"; z != strings.Contains(fmt.Sprint(warned), "such as 0.1") {
			t.Errorf("%s: only a zero drain is told how to stop almost at once: %q", bad, warned)
		}
	}
}
