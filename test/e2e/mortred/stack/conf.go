package stack

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// Model is one model server of a generated catalog, a copy of
// conf/server/testmodel.toml's semantics on a free port.
type Model struct {
	ID   string
	Port int // 0 picks a free one
	// Keys override or add model-server keys (e.g. "worker_nums": 1).
	Keys map[string]any
	// ModelKeys are added to the model's own TOML (e.g. a key the testmodel
	// factory refuses, for a server that exits at once).
	ModelKeys map[string]any
	// Policy lines for [servers.<ID>] in mortred.toml, e.g. "autostart": false.
	Policy map[string]any
}

// URI is the model's legacy server_uri.
func (m Model) URI() string {
	return "/mortred_ai_server_v1/classification/" + strings.ToLower(m.ID)
}

// Conf is a generated control-plane directory:
//
//	DIR/mortred.toml, DIR/server/<ID>.toml, DIR/models/<ID>.toml, DIR/logs/
type Conf struct {
	// Host is where the supervisor and gateway listen (127.0.0.1 unless
	// WriteConfAt named another).
	Host        string
	Dir         string
	File        string // DIR/mortred.toml
	APIPort     int
	GatewayPort int
	Models      map[string]Model
}

// ServerFile is the model-server file of id.
func (c *Conf) ServerFile(id string) string { return filepath.Join(c.Dir, "server", id+".toml") }

// GatewayURL is http://<host>:<gateway port>.
func (c *Conf) GatewayURL() string { return "http://" + c.GatewayAddr() }

// GatewayAddr is <host>:<gateway port>.
func (c *Conf) GatewayAddr() string {
	return net.JoinHostPort(c.host(), strconv.Itoa(c.GatewayPort))
}

// APIURL is http://<host>:<supervisor port>.
func (c *Conf) APIURL() string {
	return "http://" + net.JoinHostPort(c.host(), strconv.Itoa(c.APIPort))
}

func (c *Conf) host() string {
	if c.Host == "" {
		return "127.0.0.1"
	}
	return c.Host
}

// LogDir is where the supervisor writes child logs.
func (c *Conf) LogDir() string { return filepath.Join(c.Dir, "logs") }

// WriteConf writes a control-plane directory with these models. gateway
// adds or overrides [gateway] keys.
func WriteConf(t testing.TB, models []Model, gateway map[string]any) *Conf {
	t.Helper()
	return WriteConfAt(t, "127.0.0.1", models, gateway)
}

// WriteConfAt is WriteConf with the supervisor and gateway listening on
// host (a network namespace's address; the ports are then fixed, since
// the namespace has them all free, and the models stay on its loopback).
func WriteConfAt(t testing.TB, host string, models []Model, gateway map[string]any) *Conf {
	t.Helper()
	dir := t.TempDir()
	c := &Conf{Host: host, Dir: dir, File: filepath.Join(dir, "mortred.toml"), Models: map[string]Model{}}
	if host == "127.0.0.1" {
		c.APIPort, c.GatewayPort = testproc.FreePort(t), testproc.FreePort(t)
	} else {
		c.APIPort, c.GatewayPort = 8787, 8080
	}
	for _, sub := range []string{"server", "models"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gw := map[string]any{
		"host": host, "port": c.GatewayPort, "request_size_limit_mb": 64, "max_connections": 256,
		"upstream_connect_timeout_ms": 2000, "upstream_response_timeout_ms": 120000, "upstream_idle_timeout_ms": 30000,
	}
	for k, v := range gateway {
		gw[k] = v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[supervisor]\n%s\n[gateway]\n%s", table(map[string]any{
		"api_host": host, "api_port": c.APIPort, "autostart_default": true, "start_concurrency": 2,
		"log_dir": "logs", "log_rotate_mb": 1, "server_conf_dir": "server",
	}), table(gw))
	for _, m := range models {
		if m.Port == 0 {
			m.Port = testproc.FreePort(t)
		}
		c.Models[m.ID] = m
		if len(m.Policy) > 0 {
			fmt.Fprintf(&b, "\n[servers.%s]\n%s", m.ID, table(m.Policy))
		}
		keys := map[string]any{
			"host": "127.0.0.1", "port": m.Port, "server_uri": m.URI(), "worker_nums": 2,
			"request_size_limit": 16, "auth_token": "", "rate_limit_qps": 0, "model_run_timeout": 30000,
			"max_queue_depth": 256, "max_batch_size": 1, "max_batch_delay_ms": 5, "max_request_items": 32,
			"async_enabled": true, "async_timeout": 300000, "async_max_queue": 64, "async_job_ttl": 600000,
			"async_max_completed": 1000, "model_config_file_path": "../models/" + m.ID + ".toml",
		}
		for k, v := range m.Keys {
			keys[k] = v
		}
		write(t, c.ServerFile(m.ID), fmt.Sprintf("[%s]\n%s", m.ID, table(keys)))
		mk := map[string]any{"type": "testmodel", "name": m.ID, "category": "classification", "version": "1"}
		for k, v := range m.ModelKeys {
			mk[k] = v
		}
		write(t, filepath.Join(dir, "models", m.ID+".toml"), table(mk))
	}
	write(t, c.File, b.String())
	return c
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// table renders key = value lines, sorted, strings quoted.
func table(kv map[string]any) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := kv[k]
		switch x := v.(type) {
		case string:
			fmt.Fprintf(&b, "%s = %s\n", k, strconv.Quote(x))
		case []string:
			q := make([]string, len(x))
			for i, e := range x {
				q[i] = strconv.Quote(e)
			}
			fmt.Fprintf(&b, "%s = [%s]\n", k, strings.Join(q, ", "))
		case map[string]string:
			// An inline table, e.g. [gateway] peers.
			names := make([]string, 0, len(x))
			for n := range x {
				names = append(names, n)
			}
			sort.Strings(names)
			parts := make([]string, len(names))
			for i, n := range names {
				parts[i] = n + " = " + strconv.Quote(x[n])
			}
			fmt.Fprintf(&b, "%s = { %s }\n", k, strings.Join(parts, ", "))
		default:
			fmt.Fprintf(&b, "%s = %v\n", k, x)
		}
	}
	return b.String()
}
