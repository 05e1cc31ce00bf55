// mortred-server serves one model: mortred-server --config conf/server/testmodel.toml
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/server"

	// Model types this binary can serve.
	_ "github.com/fe64bb06/frontdoor/mortred/model/detect"
	_ "github.com/fe64bb06/frontdoor/mortred/model/face"
	_ "github.com/fe64bb06/frontdoor/mortred/model/ppocr"
	_ "github.com/fe64bb06/frontdoor/mortred/model/segment"
	_ "github.com/fe64bb06/frontdoor/mortred/model/superres"
	_ "github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

func main() {
	if version.Handle("mortred-server", os.Args[1:], os.Stdout) {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mortred-server:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("mortred-server", flag.ContinueOnError)
	path := fs.String("config", "", "model-server TOML file (e.g. conf/server/testmodel.toml)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("--config is required (e.g. --config conf/server/testmodel.toml)")
	}
	log := logx.Default()
	cfg, err := config.LoadServer(*path, envconf.OS())
	if err != nil {
		return err
	}
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx, func(addr net.Addr) {
		// One machine-readable line for supervisors and tests (port 0).
		fmt.Fprintf(os.Stdout, "mortred-server listening on %s\n", addr)
	})
}
