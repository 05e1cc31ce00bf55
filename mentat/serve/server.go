package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
)

// Server is the router: discovery, admission and the HTTP mux. Create it
// with New, mount more handlers with Handle before Run, then Run.
type Server struct {
	cfg     Config
	log     *slog.Logger
	holder  routes.Holder
	disc    *discovery.Manager
	builder builder
	mux     *mux
	start   time.Time
	trigger chan struct{}

	// state gives replicas' routing state in /status.json (SetReplicaState).
	state StateFunc
	// front is the mux behind the middleware Use added (authentication).
	front http.Handler
	// upstream are the keys probes send each group's engine.
	upstream *upstream.Keys

	mu     sync.Mutex
	ln     net.Listener
	prober *prober

	// readiness is /readyz's answer until a stop (checkReady); draining
	// is set when a stop begins.
	readiness atomic.Pointer[readiness]
	draining  atomic.Bool
	// ready is closed once the first round is over (Ready).
	ready chan struct{}
	// active counts the requests being handled (serveHTTP); conns are
	// the listener's connections.
	active atomic.Int64
	conns  conns
	// hardStop is every request's base context, cut when a stop's
	// SERVE_SHUTDOWN_S has passed; shuttingDown ends when the listener
	// closes (endShuttingDown).
	hardStop        context.Context
	cut             context.CancelCauseFunc
	shuttingDown    context.Context
	endShuttingDown context.CancelFunc
	// stopReport adds to the serve_stopped line (SetStopReport).
	stopReport func() []any
}

// New validates cfg and builds a Server; nothing listens or runs yet.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = logx.Discard()
	}
	for name, d := range map[string]time.Duration{"POLL_INTERVAL_S": cfg.PollInterval, "PROBE_INTERVAL_S": cfg.ProbeInterval,
		"PROBE_TIMEOUT_S": cfg.ProbeTimeout, "PROBE_FRESH_S": cfg.ProbeFresh, "PROBE_PROMOTE_S": cfg.ProbePromote,
		"SERVE_DRAIN_S": cfg.Drain, "SERVE_SHUTDOWN_S": cfg.ShutdownTimeout} {
		if d <= 0 {
			return nil, fmt.Errorf("%s must be positive", name)
		}
	}
	if cfg.Subnets == nil {
		cfg.Subnets = discovery.LocalSubnets
	}
	allow := discovery.NewAllow(cfg.AllowedSources)
	disc, err := discovery.New(discovery.Config{
		Seeds: cfg.Daemons, AnnounceAddr: cfg.AnnounceAddr, Allow: allow, DiscoverPeers: cfg.DiscoverPeers,
		PollInterval: cfg.PollInterval, FetchTimeout: max(cfg.ProbeTimeout, 5*time.Second),
		Key: cfg.Secret, Universe: cfg.Universe, Subnets: cfg.Subnets, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: logger, disc: disc, mux: newMux(), start: time.Now(),
		trigger: make(chan struct{}, 1),
		builder: builder{poll: cfg.PollInterval, fresh: cfg.ProbeFresh, allow: allow, subnets: cfg.Subnets},
	}
	s.front = s.mux
	s.readiness.Store(newReadiness(false, "starting"))
	s.ready = make(chan struct{})
	s.hardStop, s.cut = context.WithCancelCause(context.Background())
	s.shuttingDown, s.endShuttingDown = context.WithCancel(context.Background())
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.handleModel)
	s.mux.HandleFunc("GET /status.json", s.handleStatus)
	s.mux.HandleFunc("GET /healthz", handleHealthz)
	s.mux.HandleFunc("GET /livez", handleLivez)
	s.mux.HandleFunc("GET /readyz", s.handleReadyz)
	return s, nil
}

// SetReplicaState makes /status.json show each replica's routing state
// from f (the balancer's); call it before Run.
func (s *Server) SetReplicaState(f StateFunc) { s.state = f }

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Routes is the published route snapshot; handlers Load it per request.
func (s *Server) Routes() routes.Source { return &s.holder }

// Handle mounts a handler on the server's mux (net/http patterns). Call it
// before Run.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler is the server's whole HTTP handler, middleware included.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Use puts mw in front of every route (the last one added runs first).
// Call it before Run.
func (s *Server) Use(mw func(http.Handler) http.Handler) { s.front = mw(s.front) }

// SetUpstreamKeys makes admission probes send each group's upstream key
// (SERVE_UPSTREAM_KEYS_FILE); call it before Run.
func (s *Server) SetUpstreamKeys(k *upstream.Keys) { s.upstream = k }

// Uptime is how long this process's router has existed.
func (s *Server) Uptime() time.Duration { return time.Since(s.start) }

// Discovery exposes the watch set (for serve_status and tests).
func (s *Server) Discovery() *discovery.Manager { return s.disc }

// Listen binds the HTTP port and the announcement socket. Run calls it when
// the caller did not; calling it first lets a caller learn the bound
// addresses (port 0 in tests).
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen %s: %w: another router (mentatd-serve or mentatd serve) probably runs here; stop it, or set SERVE_PORT to a free port", s.cfg.HTTPAddr, err)
		}
		return fmt.Errorf("listen %s: %w (set SERVE_PORT)", s.cfg.HTTPAddr, err)
	}
	if err := s.disc.Listen(); err != nil {
		ln.Close()
		return err
	}
	s.ln = ln
	return nil
}

// Addr is the bound HTTP address, nil before Listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// AnnounceAddr is the bound UDP announcement address, nil when off.
func (s *Server) AnnounceAddr() net.Addr { return s.disc.AnnounceAddr() }

// ProbeRetries counts probes re-sent on a fresh connection.
func (s *Server) ProbeRetries() uint64 {
	s.mu.Lock()
	p := s.prober
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.retries.Load()
}

// Run serves until ctx ends, then stops gracefully (stop.go: a drain of
// SERVE_DRAIN_S, then up to SERVE_SHUTDOWN_S for what is in flight, then
// a cut) and returns once every goroutine it started has returned.
// Discovery and probing go on until the HTTP server is done, so that the
// router serves as usual while it drains.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()

	s.log.Info("serve_listening", "addr", s.ln.Addr().String(), "announce", fmt.Sprint(s.disc.AnnounceAddr()),
		"daemons", fmt.Sprint(s.cfg.Daemons), "universe", s.cfg.Universe, "signed", len(s.cfg.Secret) > 0)
	p := newProber(bg, s.cfg.ProbeInterval, s.cfg.ProbeTimeout, s.cfg.ProbePromote, s.log, s.poke)
	p.upstream = s.upstream
	s.mu.Lock()
	s.prober = p
	s.mu.Unlock()
	// The first snapshot is in place before the first request is served, so
	// that the status already lists the configured seeds (not yet polled).
	s.rebuild(p)

	var wg sync.WaitGroup
	var discErr error
	discFailed := make(chan struct{})
	wg.Go(func() {
		if discErr = s.disc.Run(bg); discErr != nil {
			close(discFailed)
		}
	})
	wg.Go(func() { s.publish(bg, p) })

	// net/http with the edge limits (SERVE_* variables); the connection
	// cap wraps the listener. Every request's context derives from
	// HardStop, so that a stop's cut reaches the handlers.
	srv := s.cfg.Edge.Server(s.Handler(), slog.NewLogLogger(s.log.Handler(), slog.LevelDebug))
	srv.BaseContext = func(net.Listener) context.Context { return s.hardStop }
	srv.ConnState = s.conns.connState
	serveErr := make(chan error, 1)
	ln := s.conns.listener(s.cfg.Edge.Listener(s.ln))
	go func() { serveErr <- srv.Serve(ln) }()

	var err error
	served := false // serveErr was received
	var stopped time.Time
	select {
	case <-ctx.Done():
		stopped = time.Now()
		served, err = s.drain(serveErr)
	case err = <-serveErr:
		served = true
	case <-discFailed:
	}
	if stopped.IsZero() {
		stopped = time.Now()
	}
	n := s.shutdown(srv, ln)
	if !served {
		// The stop closed the listener (net.ErrClosed) or, past a cut,
		// the server.
		if e := <-serveErr; !errors.Is(e, net.ErrClosed) && !errors.Is(e, http.ErrServerClosed) {
			err = e
		}
	}
	cancel()
	wg.Wait()
	p.wait()
	if err == nil {
		err = discErr
	}
	fields := []any{"elapsed", time.Since(stopped).Round(time.Millisecond), "requests_cut", n.cut, "requests_forced", n.forced}
	if s.stopReport != nil {
		fields = append(fields, s.stopReport()...)
	}
	s.log.Info("serve_stopped", fields...)
	return err
}

func (s *Server) poke() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// publish is the one goroutine that rebuilds and publishes the route
// snapshot after Run's first: on any discovery or probe change, and on a
// tick so views and probe results are seen to go stale.
func (s *Server) publish(ctx context.Context, p *prober) {
	tick := max(min(s.cfg.PollInterval, s.cfg.ProbeInterval, s.cfg.ProbeFresh)/4, 20*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.disc.Changed():
		case <-s.trigger:
		case <-t.C:
		}
		s.rebuild(p)
	}
}

func (s *Server) rebuild(p *prober) {
	defer recoverLog(s.log, "rebuild_panic")
	now, views := time.Now(), s.disc.Views()
	snap := s.builder.build(now, views, p)
	s.holder.Store(snap)
	s.checkReady(now, views, snap)
}
