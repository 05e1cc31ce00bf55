package agent

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// procNetFiles are the tables the bind check reads; the agent's network
// namespace is the engine's, since the engine is its child or its neighbour
// in the container.
var procNetFiles = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// bindCheck watches the port of every port-form service and sends a note
// when the finding changes: "bound to <addrs> only" when the server bound
// specific addresses, empty when it binds the wildcard. The note is
// advisory; the router's probe alone admits an endpoint.
type bindCheck struct {
	log      *slog.Logger
	every    time.Duration
	wait     time.Duration
	services map[string]wire.Service
	setNote  func(service, note string)
	once     logx.Once
}

func (b *bindCheck) run(ctx context.Context) {
	ports := map[string]int{}
	for name, s := range b.services {
		if s.PortForm() {
			ports[name] = s.Port
		}
	}
	if len(ports) == 0 {
		return
	}
	start := time.Now()
	seen := map[string]bool{}    // ever listening
	warned := map[string]bool{}  // service_never_listened logged
	last := map[string]*string{} // last note sent
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		ls, err := readListeners()
		if err != nil {
			b.once.Log(b.log, slog.LevelWarn, "unreadable", "bind_check_unreadable", "error", err)
		}
		for _, name := range slices.Sorted(maps.Keys(ports)) {
			port := ports[name]
			f := Find(ls, port)
			if !f.Listening {
				if !seen[name] && !warned[name] && time.Since(start) >= b.wait {
					warned[name] = true
					b.log.Warn("service_never_listened", "service", name, "port", port, "waited", b.wait,
						"hint", "nothing listens on the announced port; check MENTAT_"+envName(name)+"_API and the engine's --port")
				}
				continue
			}
			seen[name] = true
			note := f.Note()
			if prev := last[name]; prev != nil && *prev == note {
				continue
			}
			switch {
			case note != "":
				b.log.Warn("service_bind_narrow", "service", name, "port", port, "addrs", f.Addrs,
					"hint", "routers on other links cannot reach it; bind 0.0.0.0 (--host 0.0.0.0) or announce the URL form")
			case last[name] != nil:
				b.log.Info("service_bind_widened", "service", name, "port", port)
			}
			last[name] = &note
			b.setNote(name, note)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func envName(service string) string {
	if service == wire.ServiceOpenAI {
		return "OPENAI"
	}
	return "MCP"
}

// readListeners reads every table; a missing tcp6 (no IPv6) is not an error.
func readListeners() ([]Listener, error) {
	var all []Listener
	var firstErr error
	for _, p := range procNetFiles {
		f, err := os.Open(p)
		if err != nil {
			if !os.IsNotExist(err) && firstErr == nil {
				firstErr = err
			}
			continue
		}
		ls, err := ParseProcNet(f)
		f.Close()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		all = append(all, ls...)
	}
	return all, firstErr
}
