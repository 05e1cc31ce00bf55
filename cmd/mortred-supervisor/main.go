// Command mortred-supervisor is mortred's control plane (:8787): it starts
// and supervises the gateway and the model servers and serves the management
// REST API and web UI.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/supervisor"
	"github.com/fe64bb06/frontdoor/mortred/supervisor/ui"
)

func main() {
	if version.Handle("mortred-supervisor", os.Args[1:], os.Stdout) {
		return
	}
	confPath := flag.String("config", "conf/mortred.toml", "control-plane file")
	serverBin := flag.String("server-bin", "", "mortred-server binary (default: beside this one)")
	gatewayBin := flag.String("gateway-bin", "", "mortred-gateway binary (default: beside this one)")
	flag.Parse()
	if err := run(*confPath, supervisor.Options{ServerBin: *serverBin, GatewayBin: *gatewayBin}); err != nil {
		fmt.Fprintln(os.Stderr, "mortred-supervisor:", err)
		os.Exit(1)
	}
}

func run(confPath string, opts supervisor.Options) error {
	log := logx.Default()
	env := envconf.OS()
	cp, err := config.LoadControlPlane(confPath)
	if err != nil {
		return err
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		return err
	}
	if err := config.CheckListen(cp.Supervisor.APIHost, true, env.String(config.EnvExpose, "")); err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	m, err := supervisor.NewManager(cp, cat, env, opts, log)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cp.Supervisor.APIHost, strconv.Itoa(cp.Supervisor.APIPort))
	l, err := config.Listen(addr, "set api_port in [supervisor] of "+cp.File+" (is another mortred-supervisor running? `mortredctl status` asks it)")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: m.Handler(ui.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.Info("supervisor_listening", "addr", l.Addr().String(), "servers", len(cat.Entries))
	m.Run(ctx) // returns once every child has stopped
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
