// Command mentatd-serve is the OpenAI-compatible router and merged MCP
// endpoint of a mentat cluster. Configuration is by environment only; see
// docs/mentatd-serve.txt.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mentat/serve"
)

func main() {
	if version.Handle("mentatd-serve", os.Args[1:], os.Stdout) {
		return
	}
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "mentatd-serve takes no arguments other than --version; configure it by environment")
		os.Exit(2)
	}
	log := logx.Default()
	env := envconf.OS()
	env.Warn = func(name, value, reason string) { log.Warn("config_invalid", "var", name, "value", value, "reason", reason) }
	cfg, err := serve.LoadConfig(env)
	if err != nil {
		log.Error("config_failed", "err", err)
		os.Exit(1)
	}
	srv, err := serve.New(cfg, log)
	if err != nil {
		log.Error("start_failed", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil {
		log.Error("serve_failed", "err", err)
		os.Exit(1)
	}
}
