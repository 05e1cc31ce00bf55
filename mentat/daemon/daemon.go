package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
)

// Daemon is one running `mentatd daemon`.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	bootID   string
	reg      *registry
	ln       net.Listener
	port     atomic.Int64
	stopping chan struct{}
	once     logx.Once
	streams  sync.WaitGroup // /events handlers, which Shutdown does not wait for
	// Ifaces lists the machine's interfaces; tests replace it.
	ifaces func() ([]Iface, error)
}

// New validates cfg and builds a daemon; Run starts it.
func New(cfg Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = logx.Discard()
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, bootID: hex.EncodeToString(b[:]), stopping: make(chan struct{}),
		ifaces: SystemIfaces}
	d.reg = newRegistry(newHub(cfg.EventQueue), d.bootID, cfg.Hostname, cfg.NodeIP, cfg.AgentTimeout)
	return d, nil
}

// Listen binds the HTTP port. Run calls it when the caller has not, so a
// test can learn the port (Addr) before Run.
func (d *Daemon) Listen() error {
	if d.ln != nil {
		return nil
	}
	addr := net.JoinHostPort(d.cfg.HTTPHost, strconv.Itoa(d.cfg.HTTPPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen on %s: %w: another mentatd daemon probably runs here; stop it, or set MENTAT_HTTP_PORT to a free port (and point the agents' MENTAT_DAEMON and the router's MENTAT_DAEMONS at it)", addr, err)
		}
		return fmt.Errorf("listen on %s: %w (set MENTAT_HTTP_HOST / MENTAT_HTTP_PORT)", addr, err)
	}
	d.ln = ln
	d.port.Store(int64(ln.Addr().(*net.TCPAddr).Port))
	return nil
}

// Addr is the bound HTTP address, after Listen.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// BootID is this process's random boot id.
func (d *Daemon) BootID() string { return d.bootID }

func (d *Daemon) httpPort() int { return int(d.port.Load()) }

func (d *Daemon) logOnce(key, event string, args ...any) {
	d.once.Log(d.log, slog.LevelWarn, key, event, args...)
}

// Run serves until ctx ends, then stops every loop and closes every
// connection before it returns.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Listen(); err != nil {
		return err
	}
	ann, err := newAnnouncer(d, d.ifaces)
	if err != nil {
		d.ln.Close()
		return fmt.Errorf("announce socket: %w", err)
	}
	defer ann.close()
	// Addresses are known before the first request is served.
	ann.tick(ctx)

	srv := &http.Server{Handler: d.routes(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelDebug)}
	nodeID, nodeIP, addrs, _ := d.reg.node()
	d.log.Info("http_listening", "addr", d.Addr(), "node_id", nodeID, "node_ip", nodeIP,
		"addrs", addrs, "boot_id", d.bootID, "universe", d.cfg.Universe, "signed", len(d.cfg.Secret) > 0)

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	loop := func(name string, f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					d.log.Error("loop_panic", "loop", name, "panic", p)
				}
			}()
			f(lctx)
		}()
	}
	loop("announce", ann.run)
	loop("mesh", newMesh(d).run)
	loop("reaper", d.reapLoop)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(d.ln) }()
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	close(d.stopping)
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	wg.Wait()
	d.streams.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (d *Daemon) reapLoop(ctx context.Context) {
	every := max(d.cfg.AgentTimeout/4, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.reg.reap()
		}
	}
}
