// Package cluster starts a mentat cluster on loopback for the router
// benchmarks: one mentatd daemon, one mentatd agent per engine group (each
// running bin/enginesim as its child, exactly as in production), and the
// real mentatd-serve binary discovering them through the daemon.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
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
	// RouterEnv is added to the router's environment.
	RouterEnv []string
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
	c.RouterEnvUsed = append([]string{"SERVE_PORT=" + strconv.Itoa(servePort), "MENTAT_DAEMONS=" + daemon,
		"MENTAT_ANNOUNCE_PORT=" + strconv.Itoa(udpPort), "POLL_INTERVAL_S=1", "PROBE_INTERVAL_S=1"}, o.RouterEnv...)
	c.Router, err = harness.Start(o.LogDir, harness.Spec{Name: "mentatd-serve", Bin: bin("mentatd-serve"), CPUs: o.CPUs, Env: c.RouterEnvUsed})
	if err != nil {
		return nil, err
	}
	c.RouterURL = "http://127.0.0.1:" + strconv.Itoa(servePort)
	procs := append([]*harness.Proc{c.Daemon, c.Router}, c.Agents...)
	err = harness.Eventually(ctx, StartTimeout, "router lists "+fmt.Sprint(models), func() error {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := get(c.RouterURL+"/v1/models", &list); err != nil {
			return err
		}
		have := map[string]bool{}
		for _, d := range list.Data {
			have[d.ID] = true
		}
		for _, m := range models {
			if !have[m] {
				return fmt.Errorf("model %s not routed yet", m)
			}
		}
		return nil
	}, procs...)
	return c, err
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

func get(url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
