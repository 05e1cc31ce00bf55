package agent

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/daemon"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Signals are the signals the agent handles: with a command it passes each
// to the engine's process group; SIGINT, SIGTERM, SIGQUIT and SIGHUP also
// mean "stop" (deregister once the engine is gone).
var Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// firstRegisterWait bounds how long the engine waits for the agent's first
// registration.
const firstRegisterWait = 3 * time.Second

func isStop(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGQUIT || s == syscall.SIGHUP
}

// Run is the agent's whole life; it returns the process exit status. Without
// a command it stays registered until a stop signal, then deregisters and
// returns 0. With one, it returns the engine's status (128+N when signal N
// killed it); it deregisters only when it was asked to stop, so an engine
// that died on its own stays visible as a dead actor until the agent's
// registration ages out on the daemon.
func Run(cfg Config, log *slog.Logger, sigs <-chan os.Signal) int {
	if log == nil {
		log = logx.Discard()
	}
	client := daemon.NewClient(cfg.Daemon, cfg.CallTimeout)
	defer client.Close()
	if _, ok := cfg.Services[wire.ServiceOpenAI]; cfg.Provider != "" && !ok {
		log.Warn("provider_without_openai", "provider", cfg.Provider,
			"hint", "MENTAT_MODEL_PROVIDER describes MENTAT_OPENAI_API; it is not announced alone")
	}
	l := newLink(client, log, daemon.RegisterRequest{Group: cfg.Group, Container: cfg.Container,
		PID: os.Getpid(), NodeIP: cfg.NodeIP}, cfg.Services)
	bc := &bindCheck{log: log, every: cfg.BindCheck, wait: cfg.BindWait, services: cfg.Services, setNote: l.setNote}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){l.run, bc.run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					log.Error("agent_loop_panic", "panic", p)
				}
			}()
			f(ctx)
		}()
	}
	log.Info("agent_start", "group", cfg.Group, "daemon", cfg.Daemon, "container", cfg.Container,
		"services", cfg.Services, "command", cfg.Command)

	code, leave := 0, true
	if len(cfg.Command) == 0 {
		for s := range sigs {
			if isStop(s) {
				break
			}
		}
	} else {
		code, leave = runActor(cfg, log, l, sigs)
	}
	cancel()
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), cfg.CallTimeout)
	defer fcancel()
	l.finish(fctx, leave)
	return code
}

// runActor runs the engine until it exits, passing signals through.
func runActor(cfg Config, log *slog.Logger, l *link, sigs <-chan os.Signal) (code int, leave bool) {
	a := &actor{id: newActorID(), name: cfg.ActorName, argv: cfg.Command, log: log, report: l.setActor}
	a.spawning()
	// The daemon sees the actor spawning before it runs; a daemon that is
	// down delays the engine by at most firstRegisterWait.
	select {
	case <-l.first:
	case <-time.After(firstRegisterWait):
		log.Warn("starting_unregistered", "daemon", cfg.Daemon, "waited", firstRegisterWait,
			"hint", "the engine starts anyway; the agent keeps trying to register")
	}
	if code, err := a.start(); err != nil {
		return code, false
	}
	done := make(chan int, 1)
	go func() { done <- a.wait() }()
	for {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				log.Info("signal_forwarded", "signal", sig.String())
				a.signal(sig)
			}
			leave = leave || isStop(s)
		case code = <-done:
			return code, leave
		}
	}
}
