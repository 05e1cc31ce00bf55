package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/daemon"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// link keeps this agent registered with its daemon. The agent's state (its
// services with their notes, its actors) lives here; changes are pushed as
// they happen, and whenever the daemon may have lost us (a failed call, an
// "unknown agent" answer, a new boot id) the whole state is registered
// again. One goroutine (run) talks to the daemon; setters only record and
// poke it.
type link struct {
	client *daemon.Client
	log    *slog.Logger

	mu       sync.Mutex
	base     daemon.RegisterRequest // group, container, pid, node_ip
	services map[string]wire.Service
	actors   map[string]daemon.ActorState
	dirtyA   map[string]bool
	dirtyN   map[string]bool

	// Owned by the goroutine talking to the daemon.
	registered bool
	agentID    string
	bootID     string
	every      time.Duration
	lastErr    string
	kick       chan struct{}
	// first closes at the first successful registration.
	first     chan struct{}
	firstOnce sync.Once
}

func newLink(c *daemon.Client, log *slog.Logger, base daemon.RegisterRequest, services map[string]wire.Service) *link {
	return &link{client: c, log: log, base: base, services: maps.Clone(services),
		actors: map[string]daemon.ActorState{}, dirtyA: map[string]bool{}, dirtyN: map[string]bool{},
		every: time.Second, kick: make(chan struct{}, 1), first: make(chan struct{})}
}

func (l *link) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// setActor records an actor's state and pushes it soon.
func (l *link) setActor(id string, s daemon.ActorState) {
	l.mu.Lock()
	l.actors[id] = s
	l.dirtyA[id] = true
	l.mu.Unlock()
	l.poke()
}

// setNote records a service's note and pushes it soon.
func (l *link) setNote(service, note string) {
	l.mu.Lock()
	s, ok := l.services[service]
	if ok && s.Note != note {
		s.Note = note
		l.services[service] = s
		l.dirtyN[service] = true
	}
	l.mu.Unlock()
	l.poke()
}

// run keeps the registration alive until ctx ends.
func (l *link) run(ctx context.Context) {
	// ctx ends the loop between calls, never a call in flight (each is
	// bounded by the client's timeout): the daemon may already have read
	// a call the agent gives up on and apply it after the final state
	// finish pushes, leaving an exited engine "spawning" or "running".
	calls := context.WithoutCancel(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
			l.sync(calls)
		case <-timer.C:
			if l.registered {
				l.heartbeat(calls)
			}
			l.sync(calls)
			timer.Reset(l.every)
		}
	}
}

// sync registers when needed, else pushes what changed.
func (l *link) sync(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if !l.registered {
		l.register(ctx)
		return
	}
	l.mu.Lock()
	actors := map[string]daemon.ActorState{}
	for id := range l.dirtyA {
		actors[id] = l.actors[id]
	}
	notes := map[string]string{}
	for name := range l.dirtyN {
		notes[name] = l.services[name].Note
	}
	clear(l.dirtyA)
	clear(l.dirtyN)
	l.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(actors)) {
		if err := l.client.SetActor(ctx, daemon.ActorUpdate{AgentID: l.agentID, ActorID: id, ActorState: actors[id]}); err != nil {
			l.lost(ctx, "actor update", err)
			return
		}
	}
	for _, name := range slices.Sorted(maps.Keys(notes)) {
		if err := l.client.SetNote(ctx, daemon.NoteUpdate{AgentID: l.agentID, Service: name, Note: notes[name]}); err != nil {
			l.lost(ctx, "note update", err)
			return
		}
	}
}

// lost drops the registration so the next sync sends the whole state again
// (which includes whatever update just failed).
func (l *link) lost(ctx context.Context, what string, err error) {
	l.registered = false
	if ctx.Err() != nil {
		return // our own cancellation: finish registers the final state
	}
	l.note("daemon_call_failed", what, err)
	l.poke()
}

// note logs an error once until the next success, so an unreachable daemon
// makes one line, not one per retry.
func (l *link) note(event, what string, err error) {
	msg := what + ": " + err.Error()
	if msg == l.lastErr {
		return
	}
	l.lastErr = msg
	args := []any{"daemon", l.client.Base, "call", what, "error", err}
	if errors.Is(err, syscall.ECONNREFUSED) {
		args = append(args, "hint", "no mentatd daemon listens there: start one (mentatd daemon) on this node, or set MENTAT_DAEMON to its address")
	}
	l.log.Warn(event, args...)
}

func (l *link) register(ctx context.Context) {
	l.mu.Lock()
	req := l.base
	req.Services = maps.Clone(l.services)
	req.Actors = maps.Clone(l.actors)
	clear(l.dirtyA)
	clear(l.dirtyN)
	l.mu.Unlock()
	resp, err := l.client.Register(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			event := "register_failed"
			if daemon.IsRejected(err) {
				event = "register_rejected"
			}
			l.note(event, "register", err)
		}
		return
	}
	again := l.bootID != ""
	l.firstOnce.Do(func() { close(l.first) })
	l.registered, l.agentID, l.bootID, l.lastErr = true, resp.AgentID, resp.BootID, ""
	if hb := time.Duration(resp.HeartbeatS * float64(time.Second)); hb > 0 {
		l.every = min(max(hb, 50*time.Millisecond), time.Minute)
	}
	event := "agent_registered"
	if again {
		event = "agent_reregistered"
	}
	l.log.Info(event, "daemon", l.client.Base, "agent", resp.AgentID, "boot_id", resp.BootID, "heartbeat", l.every)
}

func (l *link) heartbeat(ctx context.Context) {
	resp, err := l.client.Heartbeat(ctx, l.agentID)
	switch {
	case err != nil:
		l.lost(ctx, "heartbeat", err)
	case resp.BootID != l.bootID:
		l.log.Info("daemon_restarted", "daemon", l.client.Base, "boot_id", resp.BootID)
		l.registered = false
	}
}

// finish runs after run has returned: it pushes the final state (once,
// within ctx) and, when leave is set, deregisters.
func (l *link) finish(ctx context.Context, leave bool) {
	// A failed push drops the registration and the next round registers
	// the whole final state; three rounds cover one daemon hiccup.
	for range 3 {
		if ctx.Err() != nil {
			break
		}
		l.sync(ctx)
		if l.registered && len(l.dirtyPending()) == 0 {
			break
		}
	}
	if leave && l.registered {
		if err := l.client.Deregister(ctx, l.agentID); err != nil {
			l.log.Warn("deregister_failed", "daemon", l.client.Base, "error", err)
			return
		}
		l.log.Info("agent_deregistered", "agent", l.agentID)
	}
}

func (l *link) dirtyPending() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(slices.Collect(maps.Keys(l.dirtyA)), slices.Collect(maps.Keys(l.dirtyN))...)
}
