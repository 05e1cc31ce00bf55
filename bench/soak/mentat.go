package soak

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/nginx"
	"github.com/fe64bb06/frontdoor/internal/nginxconf"
	"github.com/fe64bb06/frontdoor/internal/testnet"
)

// The mentat half of the topology: one daemon, five agents each running
// an enginesim (three replicas of ModelA, two of ModelB; a1 and b1 with a
// management MCP), two routers sharing a session key, and Nginx
// round-robin in front of them, as docs/mentatd-serve.md's "Running
// several routers" sets it up.
const (
	ModelA = "soak-a"
	ModelB = "soak-b"
	// EmbeddingDim keeps embeddings cheap for the load.
	EmbeddingDim = 64
	// ProbeInterval is the routers' PROBE_INTERVAL_S; a readmission is
	// bounded by two rounds of it (plus the daemon's doorbell).
	ProbeInterval = time.Second
	// ProbeTimeout is the routers' PROBE_TIMEOUT_S (their default).
	ProbeTimeout = 3 * time.Second
	// EngineMaxModelLen holds the load's longest request: the shared
	// system prompt (~1160 tokens), up to ~225 more and 43 out.
	EngineMaxModelLen = 2048
	// EngineKVTokens is the engines' KV cache, 1024 blocks of 16.
	EngineKVTokens = 16384
	// RouterIndexBlocks is the routers' ROUTING_INDEX_BLOCKS: like the
	// engines' caches, a prefix index the load fills within the warm-up,
	// so that its eviction runs all through the soak and the index
	// filling is not read as memory growth (the default, 32768 blocks a
	// model, would still be filling at the end of a run).
	RouterIndexBlocks = 256
)

type engine struct {
	group, model string
	port, mcp    int
	agent        *service
	// addr is where the routers reach the engine; node names the network
	// namespace it runs in ("" for the loopback).
	addr, node string
}

type mentat struct {
	daemon *service
	// node2 is the second node's daemon when a3 runs in a namespace.
	node2   *service
	engines []*engine
	routers []*service
	rports  []int
	nginx   *nginx.Nginx
	front   string // Nginx's base URL
	daddr   string
}

// enginePID is the engine's pid (the agent's child), 0 when none runs.
func (e *engine) pid() int {
	if a := e.agent.pid(); a != 0 {
		if kids := harness.Children(a); len(kids) > 0 {
			return kids[0]
		}
	}
	return 0
}

func (e *engine) url() string { return "http://" + net.JoinHostPort(e.addr, strconv.Itoa(e.port)) }

// nodeName is the component name of the namespace host, in request paths
// and fault targets.
const nodeName = "node2"

// nodePort is the second daemon's and the engine's port inside the
// namespace, which has every port free.
const (
	nodeDaemonPort = 6380
	nodeEnginePort = 8000
)

func startMentat(ctx context.Context, t topo, node *testnet.Host) (m *mentat, err error) {
	dir, logDir, env, seed := t.dir, t.logDir, t.env, t.seed
	m = &mentat{}
	defer func() {
		if err != nil {
			m.stop()
		}
	}()
	bin := func(n string) string { return filepath.Join(t.binDir, n) }
	ports, err := freePorts(3)
	if err != nil {
		return m, err
	}
	daemonPort, udpPort := ports[0], ports[1]
	m.daddr = "127.0.0.1:" + strconv.Itoa(daemonPort)
	m.daemon = &service{name: "daemon", logDir: logDir, spec: harness.Spec{Bin: bin("mentatd"), Args: []string{"daemon"},
		Env: append([]string{"MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT=" + strconv.Itoa(daemonPort), "MENTAT_ANNOUNCE_IFACES=lo",
			"MENTAT_ANNOUNCE_ADDR=127.0.0.1:" + strconv.Itoa(udpPort), "MENTAT_ANNOUNCE_INTERVAL_S=1", "MENTAT_NODE_IP=127.0.0.1",
			"MENTAT_AGENT_TIMEOUT_S=6"}, env...)}}
	if err := m.daemon.start(); err != nil {
		return m, err
	}
	if err := harness.Eventually(ctx, 30*time.Second, "daemon /status", func() error { return getOK(ctx, "http://"+m.daddr+"/status") }, m.daemon.current()); err != nil {
		return m, err
	}
	// The routers take port-form engines on the loopback, and on the
	// second node's address when there is one.
	daemons, allowed := m.daddr, "127.0.0.1,::1"
	if node != nil {
		// A second node: its own daemon, on the namespace's LAN address.
		naddr := net.JoinHostPort(node.Addr, strconv.Itoa(nodeDaemonPort))
		m.node2 = &service{name: "daemon-" + nodeName, logDir: logDir, spec: harness.Spec{Bin: "ip",
			Args: node.Command(bin("mentatd"), "daemon")[1:],
			Env: append([]string{"MENTAT_HTTP_HOST=" + node.Addr, "MENTAT_HTTP_PORT=" + strconv.Itoa(nodeDaemonPort),
				"MENTAT_ANNOUNCE_PORT=0", "MENTAT_NODE_IP=" + node.Addr, "MENTAT_AGENT_TIMEOUT_S=6"}, env...)}}
		if err := m.node2.start(); err != nil {
			return m, err
		}
		if err := harness.Eventually(ctx, 30*time.Second, "the second node's daemon", func() error { return getOK(ctx, "http://"+naddr+"/status") }, m.node2.current()); err != nil {
			return m, err
		}
		daemons += "," + naddr
		allowed += "," + node.Addr
	}
	for i, g := range []struct {
		group, model string
		mcp          bool
	}{{"a1", ModelA, true}, {"a2", ModelA, false}, {"a3", ModelA, false}, {"b1", ModelB, true}, {"b2", ModelB, false}} {
		e := &engine{group: g.group, model: g.model, addr: "127.0.0.1"}
		daemon, host := m.daddr, "127.0.0.1"
		if g.group == "a3" && node != nil {
			e.addr, e.node, e.port = node.Addr, nodeName, nodeEnginePort
			daemon, host = net.JoinHostPort(node.Addr, strconv.Itoa(nodeDaemonPort)), "0.0.0.0"
		} else if e.port, err = harness.FreePort(); err != nil {
			return m, err
		}
		// A KV cache of EngineKVTokens fills with the load's distinct
		// prompts within the warm-up, so eviction runs all through the
		// soak and a cache still filling (the default, 32 × 4096 tokens,
		// takes most of a run) is not mistaken for RSS growth.
		args := []string{"agent", "--", bin("enginesim"), "--model", g.model, "--host", host, "--port", strconv.Itoa(e.port),
			"--ttft", "40ms", "--itl", "8ms", "--max-num-seqs", "32", "--max-model-len", strconv.Itoa(EngineMaxModelLen),
			"--kv-cache-tokens", strconv.Itoa(EngineKVTokens), "--embedding-dim", strconv.Itoa(EmbeddingDim),
			"--seed", strconv.FormatInt(seed+int64(i), 10)}
		agentEnv := []string{"MENTAT_DAEMON=" + daemon, "MENTAT_GROUP=" + g.group, "MENTAT_CONTAINER=" + g.group,
			"MENTAT_OPENAI_API=" + strconv.Itoa(e.port) + "/v1", "MENTAT_MODEL_PROVIDER=vllm"}
		if g.mcp {
			if e.mcp, err = harness.FreePort(); err != nil {
				return m, err
			}
			args = append(args, "--mcp-port", strconv.Itoa(e.mcp))
			agentEnv = append(agentEnv, "MENTAT_MCP_API="+strconv.Itoa(e.mcp)+"/mcp")
		}
		spec := harness.Spec{Bin: bin("mentatd"), Args: args, Env: append(agentEnv, env...)}
		if e.node != "" {
			spec.Bin, spec.Args = "ip", node.Command(append([]string{spec.Bin}, args...)...)[1:]
		}
		e.agent = &service{name: "agent-" + g.group, logDir: logDir, keep: true, spec: spec}
		if err := e.agent.start(); err != nil {
			return m, err
		}
		m.engines = append(m.engines, e)
	}
	keyFile := filepath.Join(dir, "session.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return m, err
	}
	if m.rports, err = freePorts(2); err != nil {
		return m, err
	}
	for i, port := range m.rports {
		// Announcements reach the first router; the second finds the
		// engines through the daemon.
		announce := 0
		if i == 0 {
			announce = udpPort
		}
		r := &service{name: fmt.Sprintf("router-%d", i+1), logDir: logDir, spec: harness.Spec{Bin: bin("mentatd-serve"),
			Env: append([]string{"SERVE_PORT=" + strconv.Itoa(port), "MENTAT_DAEMONS=" + daemons, "ALLOWED_SOURCES=" + allowed,
				"MENTAT_ANNOUNCE_PORT=" + strconv.Itoa(announce), "POLL_INTERVAL_S=1",
				"PROBE_INTERVAL_S=" + strconv.Itoa(int(ProbeInterval/time.Second)), "PROBE_TIMEOUT_S=" + strconv.Itoa(int(ProbeTimeout/time.Second)),
				"MENTAT_SESSION_KEY_FILE=" + keyFile, "SERVE_DRAIN_S=6", "SERVE_SHUTDOWN_S=30", "SSE_KEEPALIVE_S=5",
				"SERVE_BODY_TIMEOUT_S=" + strconv.Itoa(int(BodyTimeout/time.Second)), "ROUTING_INDEX_BLOCKS=" + strconv.Itoa(RouterIndexBlocks)}, env...)}}
		if err := r.start(); err != nil {
			return m, err
		}
		m.routers = append(m.routers, r)
	}
	for i := range m.routers {
		if err := m.waitRouter(ctx, i, 60*time.Second); err != nil {
			return m, err
		}
	}
	sample, err := nginxconf.Read(nginxconf.RoutersSample)
	if err != nil {
		return m, err
	}
	if m.nginx, err = nginx.StartSample(ctx, logDir, "", "routers", sample, m.rports); err != nil {
		return m, fmt.Errorf("nginx: %w", err)
	}
	m.front = m.nginx.URL("routers")
	return m, nil
}

// routerURL is router i's own base URL.
func (m *mentat) routerURL(i int) string { return "http://127.0.0.1:" + strconv.Itoa(m.rports[i]) }

// waitRouter waits until router i is ready and routes every engine group.
func (m *mentat) waitRouter(ctx context.Context, i int, timeout time.Duration) error {
	return harness.Eventually(ctx, timeout, m.routers[i].name+" ready with every group", func() error {
		if err := getOK(ctx, m.routerURL(i)+"/readyz"); err != nil {
			return err
		}
		return m.groupsHealthy(ctx, i, nil)
	}, m.routers[i].current())
}

// groupsHealthy checks that router i shows the groups (every engine's
// when nil) healthy.
func (m *mentat) groupsHealthy(ctx context.Context, i int, groups []string) error {
	if groups == nil {
		for _, e := range m.engines {
			groups = append(groups, e.group)
		}
	}
	var st struct {
		Groups map[string]struct {
			Healthy bool `json:"healthy"`
		} `json:"groups"`
	}
	if err := getJSON(ctx, m.routerURL(i)+"/status.json", &st); err != nil {
		return err
	}
	for _, g := range groups {
		if !st.Groups[g].Healthy {
			return fmt.Errorf("group %s not healthy on %s", g, m.routers[i].name)
		}
	}
	return nil
}

func (m *mentat) engine(group string) *engine {
	for _, e := range m.engines {
		if e.group == group {
			return e
		}
	}
	return nil
}

func (m *mentat) stop() {
	if m.nginx != nil && m.nginx.Proc != nil {
		m.nginx.Stop()
	}
	for _, r := range m.routers {
		r.stop()
	}
	for _, e := range m.engines {
		e.agent.stop()
	}
	for _, d := range []*service{m.node2, m.daemon} {
		if d != nil {
			d.stop()
		}
	}
}

// probeClient is for readiness checks: short, never through a proxy, no
// pooled connections left to processes that are restarted.
var probeClient = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func getOK(ctx context.Context, url string) error {
	return getJSON(ctx, url, nil)
}

func getJSON(ctx context.Context, url string, v any) error { return getAuthJSON(ctx, url, "", v) }

// getAuthJSON GETs url (with the Bearer token when not empty) and decodes
// a 200's body into v (when not nil).
func getAuthJSON(ctx context.Context, url, token string, v any) error {
	var h http.Header
	if token != "" {
		h = http.Header{"Authorization": {"Bearer " + token}}
	}
	return harness.GetJSON(ctx, probeClient, url, h, v)
}

func freePorts(n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		p, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}
