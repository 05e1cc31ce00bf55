// Command mentatd is the mentat node binary: `mentatd daemon` (the node
// daemon), `mentatd agent [-- command...]` (the per-container agent) and
// `mentatd serve` (the router). See docs/mentatd.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mentat/agent"
	"github.com/fe64bb06/frontdoor/mentat/daemon"
	"github.com/fe64bb06/frontdoor/mentat/serve/app"
)

const usage = `usage:
  mentatd daemon                  node daemon (HTTP :6380, UDP announcements)
  mentatd agent [-- command...]   register with the daemon; run command as the actor
  mentatd serve                   the router (same as mentatd-serve)
  mentatd serve keys new|list|disable|enable ...
                                  the router's key file (same as mentatd-serve keys)
  mentatd --version
Configuration is by environment; see docs/mentatd.md.`

func main() {
	if version.Handle("mentatd", os.Args[1:], os.Stdout) {
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	log := logx.Default()
	env := envconf.OS()
	env.Warn = func(name, value, reason string) {
		log.Warn("config_value_ignored", "var", name, "value", value, "reason", reason)
	}
	switch os.Args[1] {
	case "daemon":
		os.Exit(runDaemon(env, log))
	case "agent":
		os.Exit(runAgent(env, log, os.Args[2:]))
	case "serve":
		if len(os.Args) > 2 && os.Args[2] == "keys" {
			os.Exit(keys.Command(keys.Router, os.Args[3:], os.Stdout, os.Stderr))
		}
		if len(os.Args) > 2 {
			fmt.Fprintln(os.Stderr, "mentatd serve takes no arguments but the keys subcommand; configure it by environment (docs/mentatd-serve.md)")
			os.Exit(2)
		}
		os.Exit(app.Main(envconf.OS(), log))
	case "help", "-h", "--help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "mentatd: unknown subcommand %q\n%s\n", os.Args[1], usage)
		os.Exit(2)
	}
}

func runDaemon(env envconf.Env, log *slog.Logger) int {
	cfg, err := daemon.FromEnv(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mentatd daemon:", err)
		return 2
	}
	d, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mentatd daemon:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mentatd daemon:", err)
		return 1
	}
	return 0
}

func runAgent(env envconf.Env, log *slog.Logger, args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	cfg, err := agent.FromEnv(env, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mentatd agent:", err)
		return 2
	}
	// Notify before anything starts, so no signal meant for the engine is
	// lost in between.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, agent.Signals...)
	defer signal.Stop(sigs)
	return agent.Run(cfg, log, sigs)
}
