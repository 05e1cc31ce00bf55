// Package mortredhosts measures what issue 30 asks of mortred's edge, in
// one run:
//
//  1. the Nginx TLS edge from `mortredctl init-edge --mode lan` in front of
//     one gateway against the gateway direct (TESTMODEL, no delay; wrk,
//     paths interleaved; CPU placement as in bench/gateway);
//  2. a rollout of PPOCR_CLS (real ONNX Runtime) under an open-loop load
//     through the gateway: failed requests, the p99 in the switch window
//     against the steady phase's, the rollout's own duration;
//  3. two hosts (network namespaces from internal/testnet, each with its
//     own supervisor, gateway and PPOCR_CLS) behind Nginx from init-edge
//     --gateways, against one; without root this part is not measured.
//
// Every process, namespace and route a part makes is removed when it
// ends, failed or not, and every load is bounded in count and time. Load
// goes only to loopback and to the namespaces part 3 makes.
package mortredhosts

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config is one run. Zero values take the defaults in the comments.
type Config struct {
	// BinDir holds the built mortred binaries (make build); Root is the
	// checkout (conf/models, .deps); WorkDir receives configurations
	// and logs.
	BinDir, Root, WorkDir string
	// ServerCPUs and LoadCPUs pin part 1's servers and wrk ("" = none).
	ServerCPUs, LoadCPUs string
	// Duration of each wrk measurement (default 5 s) and Rounds of them
	// per path (default 1), in parts 1 and 3.
	Duration time.Duration
	Rounds   int
	// EdgeConns is part 1's throughput load (default 32 connections).
	EdgeConns int
	// RolloutRate is part 2's load in requests per second (default 40);
	// Steady and After (default 10 s each) the load before the rollout
	// and after its command ends; RolloutTimeout bounds the command
	// (default 4 min).
	RolloutRate    float64
	Steady, After  time.Duration
	RolloutTimeout time.Duration
	// HostConns is part 3's load (default 8 connections).
	HostConns int
	// LANOctet is part 3's /24 of 10.231.0.0/16 (default 250 to 254 by
	// the process id; see testnet.NewLAN).
	LANOctet int
}

// Result is the section and the figures of its targets. A part that was
// not measured has its Err set (or, for Hosts, NotMeasured).
type Result struct {
	Markdown string
	Edge     EdgeResult
	Rollout  RolloutResult
	Hosts    HostsResult
	// EdgeErr, RolloutErr and HostsErr are each part's failure.
	EdgeErr, RolloutErr, HostsErr error
}

func (c Config) withDefaults() Config {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.EdgeConns <= 0 {
		c.EdgeConns = 32
	}
	if c.RolloutRate <= 0 {
		c.RolloutRate = 40
	}
	if c.Steady <= 0 {
		c.Steady = 10 * time.Second
	}
	if c.After <= 0 {
		c.After = 10 * time.Second
	}
	if c.RolloutTimeout <= 0 {
		c.RolloutTimeout = 4 * time.Minute
	}
	if c.HostConns <= 0 {
		c.HostConns = 8
	}
	if c.LANOctet <= 0 {
		c.LANOctet = 250 + os.Getpid()%5
	}
	return c
}

// Run measures the three parts in order. A part that fails is reported
// in place and the others still run; the error joins the parts' errors.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	var res Result
	var b strings.Builder
	b.WriteString("Issue 30's questions about mortred's edge, measured side by side in this run: what the TLS edge costs in front of " +
		"one gateway, whether a rollout under load fails requests or stalls them, and what an edge in front of two hosts does.\n\n")
	part := func(n int, title, key string, run func(dir string) (string, error)) error {
		fmt.Fprintf(&b, "### %d. %s\n\n", n, title)
		dir := filepath.Join(cfg.WorkDir, key)
		err := os.MkdirAll(dir, 0o755)
		md := ""
		if err == nil {
			md, err = run(dir)
		}
		if err != nil {
			fmt.Fprintf(&b, "**Not measured in this run:** %s (logs in `%s`)\n\n", mdLine(err.Error()), dir)
			return fmt.Errorf("%s: %w", key, err)
		}
		b.WriteString(md + "\n")
		return nil
	}
	res.EdgeErr = part(1, "The TLS edge in front of one gateway", "edge", func(dir string) (md string, err error) {
		res.Edge, md, err = runEdge(ctx, cfg, dir)
		return md, err
	})
	res.RolloutErr = part(2, "A rollout under load", "rollout", func(dir string) (md string, err error) {
		res.Rollout, md, err = runRollout(ctx, cfg, dir)
		return md, err
	})
	res.HostsErr = part(3, "Two hosts against one", "hosts", func(dir string) (md string, err error) {
		res.Hosts, md, err = runHosts(ctx, cfg, dir)
		return md, err
	})
	res.Markdown = b.String()
	return res, errors.Join(res.EdgeErr, res.RolloutErr, res.HostsErr)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
