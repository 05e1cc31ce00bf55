// Package cluster starts a mentat cluster on loopback for the router
// benchmarks: one mentatd daemon, one mentatd agent per engine group (each
// running bin/enginesim as its child, exactly as in production), and the
// real mentatd-serve binary discovering them through the daemon.
package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/internal/keys"
)

// StartTimeout bounds the cluster's start, until every model routes.
const StartTimeout = 60 * time.Second

// Engine is one group: an agent and its enginesim.
type Engine struct {
	// Group is the agent's MENTAT_GROUP; Model the enginesim model name
	// the router routes by.
	Group, Model string
	// Flags are extra enginesim flags (latency, concurrency).
	Flags []string
}

// Opts configures the cluster.
type Opts struct {
	// BinDir holds mentatd, mentatd-serve and enginesim (make build).
	BinDir string
	// LogDir receives one log per process.
	LogDir string
	// CPUs pins every process of the cluster ("" = no pin).
	CPUs    string
	Engines []Engine
	// RouterEnv is added to the router's environment; RouterHeader goes
	// on its readiness check (the key, when RouterEnv turns keys on).
	RouterEnv    []string
	RouterHeader http.Header
}

// Cluster is a running cluster. Stop ends every process.
type Cluster struct {
	Daemon, Router *harness.Proc
	Agents         []*harness.Proc
	// RouterURL is http://127.0.0.1:<SERVE_PORT>.
	RouterURL string
	// EnginePort is each group's enginesim port.
	EnginePort map[string]int
	// RouterEnvUsed is the router's configuration, for the report.
	RouterEnvUsed []string
	groups        []string // per agent

	opts    Opts
	daemon  string // host:port
	udpPort int
	models  []string
	extra   []*harness.Proc // StartRouter's
}

// Start starts the daemon, the agents (with their engines) and the router,
// and returns once the router lists every engine's model.
func Start(ctx context.Context, o Opts) (c *Cluster, err error) {
	c = &Cluster{EnginePort: map[string]int{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = harness.FreePort(); err != nil {
			return nil, err
		}
	}
	daemonPort, servePort, udpPort := ports[0], ports[1], ports[2]
	bin := func(n string) string { return filepath.Join(o.BinDir, n) }
	c.Daemon, err = harness.Start(o.LogDir, harness.Spec{Name: "mentatd-daemon", Bin: bin("mentatd"), Args: []string{"daemon"}, CPUs: o.CPUs,
		Env: []string{"MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT=" + strconv.Itoa(daemonPort), "MENTAT_ANNOUNCE_IFACES=lo",
			"MENTAT_ANNOUNCE_ADDR=127.0.0.1:" + strconv.Itoa(udpPort), "MENTAT_ANNOUNCE_INTERVAL_S=1", "MENTAT_NODE_IP=127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	daemon := "127.0.0.1:" + strconv.Itoa(daemonPort)
	if err := harness.Eventually(ctx, StartTimeout, "daemon /status", func() error { return get("http://"+daemon+"/status", nil) }, c.Daemon); err != nil {
		return nil, err
	}
	var models []string
	for _, e := range o.Engines {
		port, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		c.EnginePort[e.Group] = port
		args := append([]string{"agent", "--", bin("enginesim"), "--model", e.Model, "--host", "127.0.0.1", "--port", strconv.Itoa(port)}, e.Flags...)
		a, err := harness.Start(o.LogDir, harness.Spec{Name: "agent-" + e.Group, Bin: bin("mentatd"), Args: args, CPUs: o.CPUs,
			Env: []string{"MENTAT_DAEMON=" + daemon, "MENTAT_GROUP=" + e.Group, "MENTAT_OPENAI_API=" + strconv.Itoa(port) + "/v1",
				"MENTAT_MODEL_PROVIDER=vllm"}})
		if err != nil {
			return nil, err
		}
		c.Agents = append(c.Agents, a)
		c.groups = append(c.groups, e.Group)
		models = append(models, e.Model)
	}
	c.opts, c.daemon, c.udpPort, c.models = o, daemon, udpPort, models
	c.Router, c.RouterURL, c.RouterEnvUsed, err = c.startRouter(ctx, "mentatd-serve", servePort, o.RouterEnv, o.RouterHeader, append([]*harness.Proc{c.Daemon}, c.Agents...))
	return c, err
}

// StartRouter starts one more router beside the cluster's (same daemon,
// same engines) with env added to the common configuration, and returns
// once it lists every model. header goes on its readiness check (an
// Authorization header when env turns keys on). The cluster's Stop stops
// it too.
func (c *Cluster) StartRouter(ctx context.Context, name string, env []string, header http.Header) (*harness.Proc, string, error) {
	port, err := harness.FreePort()
	if err != nil {
		return nil, "", err
	}
	p, url, _, err := c.startRouter(ctx, name, port, env, header, []*harness.Proc{c.Daemon})
	if p != nil {
		c.extra = append(c.extra, p)
	}
	return p, url, err
}

func (c *Cluster) startRouter(ctx context.Context, name string, port int, env []string, header http.Header, deps []*harness.Proc) (*harness.Proc, string, []string, error) {
	// UDP announcements reach the first router only (one socket); the
	// others find the engines through the daemon.
	announce := c.udpPort
	if c.Router != nil {
		announce = 0
	}
	used := append([]string{"SERVE_PORT=" + strconv.Itoa(port), "MENTAT_DAEMONS=" + c.daemon,
		"MENTAT_ANNOUNCE_PORT=" + strconv.Itoa(announce), "POLL_INTERVAL_S=1", "PROBE_INTERVAL_S=1"}, env...)
	proc, err := harness.Start(c.opts.LogDir, harness.Spec{Name: name, Bin: filepath.Join(c.opts.BinDir, "mentatd-serve"), CPUs: c.opts.CPUs, Env: used})
	if err != nil {
		return nil, "", nil, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	err = harness.Eventually(ctx, StartTimeout, name+" lists "+fmt.Sprint(c.models), func() error {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := getWith(url+"/v1/models", header, &list); err != nil {
			return err
		}
		have := map[string]bool{}
		for _, d := range list.Data {
			have[d.ID] = true
		}
		for _, m := range c.models {
			if !have[m] {
				return fmt.Errorf("model %s not routed yet", m)
			}
		}
		return nil
	}, append(deps, proc)...)
	return proc, url, used, err
}

// EngineURL is the base URL of a group's engine, for direct calls.
func (c *Cluster) EngineURL(group string) string {
	return "http://127.0.0.1:" + strconv.Itoa(c.EnginePort[group])
}

// EnginePID is the process id of a group's enginesim (the agent's child),
// or 0 when it cannot be found.
func (c *Cluster) EnginePID(group string) int {
	for i, a := range c.Agents {
		if c.groups[i] == group {
			if kids := harness.Children(a.PID()); len(kids) > 0 {
				return kids[0]
			}
		}
	}
	return 0
}

// Stop ends the router, the agents (which stop their engines) and the
// daemon.
func (c *Cluster) Stop() {
	for _, p := range c.extra {
		p.Stop()
	}
	if c.Router != nil {
		c.Router.Stop()
	}
	for _, a := range c.Agents {
		a.Stop()
	}
	if c.Daemon != nil {
		c.Daemon.Stop()
	}
}

var client = &http.Client{Timeout: 5 * time.Second}

func get(url string, v any) error { return getWith(url, nil, v) }

func getWith(url string, header http.Header, v any) error {
	return harness.GetJSON(context.Background(), client, url, header, v)
}

// WriteKeyFile writes a router key file into dir with one key that
// allows every model, with limits far above any benchmark's load (so the
// limiter's work is measured, never its refusals), and returns the
// file's path and the key's secret.
func WriteKeyFile(dir string) (path, secret string, err error) {
	secret, hash, err := keys.NewSecret(keys.Router)
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, "bench-keys.toml")
	body := fmt.Sprintf("[[key]]\nid = \"bench\"\nhash = %q\nrpm = 1000000000\ntpm = 1000000000000\nmax_concurrent = 1000000\n", hash)
	return path, secret, os.WriteFile(path, []byte(body), 0o600)
}
