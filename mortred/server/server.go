// Package server is the mortred model server: one model per process behind
// the admission chain of mortred.txt (public probes, Bearer auth, per-IP
// rate limit, method, media type, size, envelope), a bounded queue feeding
// worker_nums model instances with optional batching, request deadlines,
// async jobs, Prometheus metrics and the embedded OpenAPI document.
//
// Lifecycle: New (validate, no side effects) → Handler / Run → Load (model
// instances, warm-up, workers; /ready turns true) → Close (cancel, wait for
// every goroutine, close the instances).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/model"
)

// Server is one model-server process.
type Server struct {
	cfg     *config.Server
	log     *slog.Logger
	factory model.Factory
	reg     *prometheus.Registry
	m       *metrics
	auth    bearer
	limit   *limiter
	q       *queue
	jobs    *ledger // nil when async is off
	handler http.Handler

	ctx    context.Context // ends at Close: workers, jobs and waits stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	loadOnce sync.Once
	loadErr  error
	models   []model.Model // set once before ready turns true
	modelInf atomic.Pointer[model.Info]
	ready    atomic.Bool
	closed   sync.Once
}

// New builds a server from a validated config. It resolves the model type
// but loads nothing; call Load (or Run).
func New(cfg *config.Server, log *slog.Logger) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("server: nil config")
	}
	if log == nil {
		log = slog.Default()
	}
	f, err := model.Lookup(cfg.ModelType)
	if err != nil {
		return nil, fmt.Errorf("%s: model_config_file_path %s: %w", cfg.File, cfg.ModelConfigFilePath, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, log: log, factory: f, reg: prometheus.NewRegistry(),
		auth: newBearer(cfg.AuthToken), limit: newLimiter(cfg.RateLimitQPS),
		ctx: ctx, cancel: cancel,
	}
	s.m = newMetrics(s.reg, cfg.ID)
	// The runtime's own gauges (goroutines, memory, descriptors), as the
	// router and the gateway export: what a long run watches for leaks.
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.q = newQueue(cfg.QueueDepth(), cfg.WorkerNums, s.m)
	if cfg.AsyncEnabled {
		s.jobs = newLedger(cfg.AsyncMaxQueue, cfg.AsyncMaxCompleted, cfg.JobTTL(), s.m)
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the HTTP handler of the whole admission chain.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's Prometheus registry (served at /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Ready reports whether the model is loaded and warm.
func (s *Server) Ready() bool { return s.ready.Load() }

func (s *Server) info() model.Info {
	if p := s.modelInf.Load(); p != nil {
		return *p
	}
	return model.Info{Name: s.cfg.ID}
}

// Load builds worker_nums model instances, warms each, starts the workers
// and turns /ready true. It runs once; later calls return the first result.
func (s *Server) Load(ctx context.Context) error {
	s.loadOnce.Do(func() { s.loadErr = s.load(ctx) })
	return s.loadErr
}

func (s *Server) load(ctx context.Context) error {
	start := time.Now()
	opts := model.Options{ORTLib: s.cfg.ORTLibPath, IntraOpThreads: s.cfg.IntraOpThreads}
	models := make([]model.Model, 0, s.cfg.WorkerNums)
	fail := func(err error) error {
		for _, m := range models {
			_ = m.Close()
		}
		return err
	}
	for i := 0; i < s.cfg.WorkerNums; i++ {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		m, err := s.factory(s.cfg.ModelConfigFilePath, opts)
		if err != nil {
			return fail(fmt.Errorf("loading model %s (type %s) instance %d: %w", s.cfg.ModelConfigFilePath, s.cfg.ModelType, i, err))
		}
		models = append(models, m)
		if w, ok := m.(model.Warmer); ok {
			if err := w.Warm(ctx); err != nil {
				return fail(fmt.Errorf("warming model %s instance %d: %w", s.cfg.ModelConfigFilePath, i, err))
			}
		}
	}
	info := models[0].Info()
	s.modelInf.Store(&info)
	s.models = models
	select {
	case <-s.ctx.Done():
		return fail(errors.New("server closed while loading"))
	default:
	}
	s.wg.Add(len(models))
	for _, m := range models {
		go s.worker(s.ctx, m)
	}
	s.ready.Store(true)
	s.m.ready.Set(1)
	s.log.Info("model_ready", "id", s.cfg.ID, "model", info.Name, "version", info.Version, "workers", len(models),
		"batch", s.cfg.MaxBatchSize, "load_ms", time.Since(start).Milliseconds())
	return nil
}

// Close stops the workers and jobs, waits for them, and closes the model
// instances. In-flight requests answer 503. Safe to call more than once.
func (s *Server) Close() {
	s.closed.Do(func() {
		s.ready.Store(false)
		s.m.ready.Set(0)
		s.cancel()
		s.wg.Wait()
		for _, m := range s.models {
			if err := m.Close(); err != nil {
				s.log.Warn("model_close_failed", "id", s.cfg.ID, "err", err)
			}
		}
	})
}

// Run listens on the configured address, loads the model in the background
// and serves until ctx ends or loading fails; then it shuts down gracefully.
// onListen, when set, is told the bound address (port 0 picks one).
func (s *Server) Run(ctx context.Context, onListen func(addr net.Addr)) error {
	ln, err := config.Listen(s.cfg.Addr(), fmt.Sprintf("set port in [%s] of %s (or %s when run alone)", s.cfg.ID, s.cfg.File, config.EnvListenPort))
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln, onListen)
}

// Serve is Run on an existing listener. Serve is how a process becomes a
// model server, so it also tunes the Go runtime for one, once per process:
// the heap floor (RaiseHeapFloor) and a P per worker (addWorkerProcs).
func (s *Server) Serve(ctx context.Context, ln net.Listener, onListen func(addr net.Addr)) error {
	RaiseHeapFloor()
	addWorkerProcs(s.cfg.WorkerNums)
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("listening", "id", s.cfg.ID, "addr", ln.Addr().String(), "server_uri", s.cfg.ServerURI, "async", s.cfg.AsyncEnabled)
	if onListen != nil {
		onListen(ln.Addr())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	loadErr := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.Load(s.ctx)
		if err != nil && s.ctx.Err() == nil {
			s.log.Error("model_load_failed", "id", s.cfg.ID, "err", err)
		}
		loadErr <- err
	}()

	var result error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		result = err
	case err := <-loadErr:
		if err != nil {
			result = err
			break
		}
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			result = err
		}
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.cancel() // in-flight waits answer 503 instead of holding shutdown
	_ = hs.Shutdown(shutCtx)
	s.Close()
	if errors.Is(result, http.ErrServerClosed) {
		result = nil
	}
	return result
}
