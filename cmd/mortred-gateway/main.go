// Command mortred-gateway is mortred's authenticated data plane (:8080).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/gateway"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func main() {
	if version.Handle("mortred-gateway", os.Args[1:], os.Stdout) {
		return
	}
	confPath := flag.String("config", "conf/mortred.toml", "control-plane file (its [gateway] section and catalog)")
	flag.Parse()
	if err := run(*confPath); err != nil {
		fmt.Fprintln(os.Stderr, "mortred-gateway:", err)
		os.Exit(1)
	}
}

func run(confPath string) error {
	log := logx.Default()
	cp, err := config.LoadControlPlane(confPath)
	if err != nil {
		return err
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		return err
	}
	setup, err := gateway.FromConfig(cp, cat, envconf.OS())
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gw, err := gateway.New(setup.Config, log, reg)
	if err != nil {
		return err
	}
	defer gw.Close()
	l, err := config.Listen(setup.Addr, "set port in [gateway] of "+cp.File+" (or "+config.EnvListenPort+")")
	if err != nil {
		return err
	}
	// net/http with the [gateway] edge limits; the connection cap wraps
	// the listener.
	edge := setup.Config.Edge
	srv := edge.Server(gw, slog.NewLogLogger(log.Handler(), slog.LevelDebug))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads the key file (when keys are on) and the routes file
	// (when the supervisor passed one).
	var reloads []func() error
	if ks := gw.Keys(); ks != nil {
		go ks.Run(ctx)
		reloads = append(reloads, ks.Reload)
	}
	if setup.Config.RoutesFile != "" {
		reloads = append(reloads, gw.ReloadRoutes)
	}
	if len(reloads) > 0 {
		// Notified before the listener opens, so that a SIGHUP is never
		// the default action (exit) once clients can connect.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go reloadOnHangUp(ctx, hup, reloads...)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(edge.Listener(l)) }()
	log.Info("gateway_listening", "addr", l.Addr().String(), "models", len(setup.Config.Upstreams), "keys_file", setup.Config.KeysFile, "cors_origins", len(setup.Config.CORSOrigins), "host_id", setup.Config.HostID, "peers", len(setup.Config.Peers), "routes_file", setup.Config.RoutesFile)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Stopping: /readyz turns 503 at once and answers close their
	// connections, while requests are still served for the drain time, so
	// a balancer moves new work elsewhere before the listener closes.
	gw.Drain()
	log.Info("gateway_draining", "drain", setup.Drain.String(), "shutdown_timeout", setup.ShutdownTimeout.String())
	time.Sleep(setup.Drain)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), setup.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		log.Warn("gateway_shutdown_timeout", "shutdown_timeout", setup.ShutdownTimeout.String())
	}
	log.Info("gateway_stopped")
	return nil
}

// reloadOnHangUp runs every reload, in order, on each SIGHUP until ctx
// ends. Each is independent: a failed one keeps what it reloads in force
// (the key store and the gateway log and count it) and does not stop the
// others.
func reloadOnHangUp(ctx context.Context, hup <-chan os.Signal, reloads ...func() error) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for _, reload := range reloads {
				_ = reload()
			}
		}
	}
}
