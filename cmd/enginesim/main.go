// Command enginesim is a vLLM-compatible OpenAI server that needs no GPU.
// See docs/enginesim.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mentat/enginesim"
)

func main() {
	if version.Handle("enginesim", os.Args[1:], os.Stdout) {
		return
	}
	cfg, err := enginesim.ParseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		os.Exit(2)
	}
	cfg.UseEnvKey(os.Getenv("VLLM_API_KEY"))
	log := logx.Default()
	eng, err := enginesim.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := eng.Run(ctx); err != nil {
		log.Error("enginesim_failed", "err", err)
		stop()
		os.Exit(1)
	}
}
