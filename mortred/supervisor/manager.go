package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

// GatewayID names the gateway among the supervised children.
const GatewayID = "gateway"

// envRoutesFile tells the gateway where the supervisor writes its routes
// to rolled-out versions (mortred/gateway.EnvRoutesFile).
const envRoutesFile = "MORTRED_ROUTES_FILE"

// Environment the supervisor reads.
const (
	EnvAPIToken     = "MORTRED_API_TOKEN"
	EnvGatewayToken = "MORTRED_GATEWAY_AUTH_TOKEN"
	EnvMetricsToken = "MORTRED_METRICS_TOKEN"
)

// Options locate the binaries the supervisor runs.
type Options struct {
	// ServerBin and GatewayBin default to mortred-server and mortred-gateway
	// beside the supervisor's own executable.
	ServerBin, GatewayBin string
	// StopGrace between SIGTERM and SIGKILL; 0 means 10 s.
	StopGrace time.Duration
	// GracefulWait bounds graceful_restart's wait for async jobs; 0 means 120 s.
	GracefulWait time.Duration
}

// Managed is one supervised process and what the API says about it.
type Managed struct {
	ID       string
	Name     string
	Category string
	URI      string
	// Port is the catalog's port; a rolled-out version runs on another
	// (CurrentPort).
	Port    int
	Enabled bool
	Auto    bool
	// entry is nil for the gateway.
	entry *config.Entry

	// mu guards the instances: a rollout replaces cur while the API,
	// the charts and the metrics read it.
	mu  sync.Mutex
	cur *instance
	// prev is the version cur replaced (its files, not its process), for
	// rollback; nil before the first rollout.
	prev *instance
	// draining are replaced versions still running until their requests
	// and async jobs are done.
	draining []*instance
	// roll is the last rollout's state, shown in the API and the UI.
	roll RolloutState
	// rolling is set while a rollout or rollback of this model runs.
	rolling bool
}

// Child is the process of the version in service.
func (x *Managed) Child() *Child { return x.current().child }

// current is the instance in service.
func (x *Managed) current() *instance {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cur
}

// Manager owns the gateway and the model servers of one catalog.
type Manager struct {
	cp      *config.ControlPlane
	cat     *config.Catalog
	opts    Options
	log     *slog.Logger
	apiTok  string
	modelTk string

	// gatewayURL is where the UI's smoke test is relayed (http://host:port).
	gatewayURL string
	// metricsTok is the gateway's metrics token (its /metrics and
	// /stats.json), "" when the supervisor was given none.
	metricsTok string
	// usageClient reads the gateway's /stats.json for /api/v1/usage.
	usageClient *http.Client

	order []string // gateway first, then catalog ids
	byID  map[string]*Managed
	wg    sync.WaitGroup
	// runMu guards runCtx, the context the model servers' children run
	// under (set by Run; ended once the gateway has stopped).
	runMu  sync.Mutex
	runCtx context.Context
	// runDir holds rolled-out versions' files and routesFile, the
	// gateway's routes to them.
	runDir, routesFile string
	// hist samples the children for the UI's charts (/api/v1/series).
	hist *history
}

// NewManager builds the children from the control plane and catalog. The
// management token (MORTRED_API_TOKEN) is required: the API never runs open.
// The model servers' token is MORTRED_AUTH_TOKEN, or a fresh random one,
// handed to each child (and to the gateway) through its environment.
func NewManager(cp *config.ControlPlane, cat *config.Catalog, env envconf.Env, opts Options, log *slog.Logger) (*Manager, error) {
	apiTok := env.String(EnvAPIToken, "")
	if apiTok == "" {
		return nil, errors.New("no management token: set MORTRED_API_TOKEN (mortredctl init-trust writes fresh tokens to an env file)")
	}
	if err := cp.CheckCatalog(cat); err != nil {
		return nil, err
	}
	self, _ := os.Executable()
	if opts.ServerBin == "" {
		opts.ServerBin = filepath.Join(filepath.Dir(self), "mortred-server")
	}
	if opts.GatewayBin == "" {
		opts.GatewayBin = filepath.Join(filepath.Dir(self), "mortred-gateway")
	}
	for _, bin := range []string{opts.ServerBin, opts.GatewayBin} {
		if st, err := os.Stat(bin); err != nil || st.IsDir() {
			return nil, fmt.Errorf("cannot find %s: build it with `make build` or pass its path", bin)
		}
	}
	if opts.GracefulWait <= 0 {
		opts.GracefulWait = 120 * time.Second
	}
	modelTok := env.String(config.EnvAuthToken, "")
	if modelTok == "" {
		modelTok = randomToken()
	}
	m := &Manager{cp: cp, cat: cat, opts: opts, log: log, apiTok: apiTok, modelTk: modelTok, byID: map[string]*Managed{}}
	base := childEnv(os.Environ(), config.EnvAuthToken)
	// Model servers get only their own token: the management and scrape
	// secrets are the gateway's, and MORTRED_LISTEN_HOST/PORT address the
	// gateway (every model server would otherwise bind that one port).
	modelBase := childEnv(base, EnvAPIToken, EnvGatewayToken, EnvMetricsToken, config.EnvListenHost, config.EnvListenPort)
	rotate := int64(cp.Supervisor.LogRotateMB) << 20
	logFor := func(id string) *RingLog {
		return NewRingLog(5000, filepath.Join(cp.Supervisor.LogDir, id+".log"), rotate)
	}

	gw := cp.Gateway
	gwHost := env.String(config.EnvListenHost, gw.Host)
	if ip := net.ParseIP(gwHost); ip != nil && ip.IsUnspecified() {
		gwHost = "127.0.0.1"
	}
	// The gateway child reads the same overrides, so probe where it listens.
	m.gatewayURL = "http://" + net.JoinHostPort(gwHost, strconv.Itoa(env.Port(config.EnvListenPort, gw.Port, false)))
	m.runDir = cp.Supervisor.RunDir
	m.routesFile = filepath.Join(m.runDir, "routes.json")
	gwSpec := Spec{
		Name: GatewayID, Path: opts.GatewayBin, Args: []string{"--config", cp.File},
		Env:      append(append([]string(nil), base...), config.EnvAuthToken+"="+modelTok, envRoutesFile+"="+m.routesFile),
		ReadyURL: m.gatewayURL + "/healthz",
		Policy:   PolicyAlways,
		// A stopping gateway drains and then waits for its in-flight
		// requests: SIGKILL only after both had their time.
		StopGrace: max(opts.StopGrace, gw.Drain()+gw.ShutdownTimeout()+5*time.Second),
	}
	m.add(&Managed{ID: GatewayID, Name: "mortred-gateway", Category: "gateway", Port: gw.Port, Enabled: true, Auto: true,
		cur: &instance{child: NewChild(gwSpec, logFor(GatewayID), log), port: gw.Port}})

	for _, e := range cat.Entries {
		pol := cp.Policy(e.ID)
		spec := Spec{
			Name: e.ID, Path: opts.ServerBin, Args: []string{"--config", e.Config.File},
			// The model server reads its token from MORTRED_AUTH_TOKEN,
			// never from its command line.
			Env:       append(append([]string(nil), modelBase...), config.EnvAuthToken+"="+modelTok),
			ReadyURL:  "http://" + net.JoinHostPort(readyHost(e.Host), strconv.Itoa(e.Port)) + "/ready",
			Policy:    Policy(pol.RestartPolicy),
			StopGrace: opts.StopGrace,
		}
		auto := cp.Supervisor.AutostartDefault == nil || *cp.Supervisor.AutostartDefault
		if pol.Autostart != nil {
			auto = *pol.Autostart
		}
		m.add(&Managed{ID: e.ID, Name: e.Name, Category: e.Category, URI: e.URI, Port: e.Port,
			Enabled: pol.Enabled == nil || *pol.Enabled, Auto: auto, entry: e,
			cur: &instance{child: NewChild(spec, logFor(e.ID), log), host: e.Host, port: e.Port, conf: e.Config.File,
				version: modelVersion(e.Config.ModelConfigFilePath), jobTTL: time.Duration(e.Config.AsyncJobTTL) * time.Millisecond}})
	}
	// Versions rolled out in an earlier run serve again; the routes of
	// that run named its processes, which are gone, so they are written
	// anew before the gateway starts.
	m.restore()
	if err := m.writeRoutes(); err != nil {
		return nil, err
	}
	m.metricsTok = env.String(EnvMetricsToken, "")
	m.usageClient = &http.Client{Timeout: usageTimeout}
	m.hist = newHistory(m, m.metricsTok)
	return m, nil
}

func (m *Manager) add(x *Managed) {
	m.order = append(m.order, x.ID)
	m.byID[x.ID] = x
}

// childEnv is env without the named variables: what children must not
// inherit blindly (the model token is set explicitly).
func childEnv(env []string, drop ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, name := range drop {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

func readyHost(h string) string {
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return "127.0.0.1"
	}
	return h
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run starts the children's loops, then the gateway and the autostart model
// servers (at most start_concurrency at once), and blocks until ctx ends;
// then every child is stopped before Run returns, so nothing is orphaned.
func (m *Manager) Run(ctx context.Context) {
	// The model servers stop only once the gateway has: it first drains
	// and finishes the requests it relays to them, which would fail if
	// their models went first.
	modelCtx, stopModels := context.WithCancel(context.WithoutCancel(ctx))
	defer stopModels()
	m.runMu.Lock()
	m.runCtx = modelCtx
	m.runMu.Unlock()
	for _, id := range m.order {
		x := m.byID[id]
		if id == GatewayID {
			c := x.Child()
			m.wg.Add(1)
			go func() { defer m.wg.Done(); c.Run(ctx); stopModels() }()
			continue
		}
		m.runInstance(x.current())
	}
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.hist.run(ctx) }()
	m.autostart(ctx)
	<-ctx.Done()
	m.wg.Wait()
}

func (m *Manager) autostart(ctx context.Context) {
	if err := m.byID[GatewayID].Child().Start(ctx); err != nil {
		m.log.Error("supervisor_autostart_failed", "id", GatewayID, "err", err)
	}
	sem := make(chan struct{}, max(1, m.cp.Supervisor.StartConcurrency))
	var wg sync.WaitGroup
	for _, id := range m.order[1:] {
		x := m.byID[id]
		if !x.Enabled || !x.Auto {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if err := x.Child().Start(ctx); err != nil {
				m.log.Error("supervisor_autostart_failed", "id", x.ID, "err", err)
				return
			}
			// Hold the slot until the server is ready (or gives up), so a
			// small machine loads one model at a time.
			deadline := time.Now().Add(2 * time.Minute)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				s := x.Child().Status()
				if s.Ready || s.State == StateFailed || s.State == StateStopped {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// IDs lists the gateway and then the catalog ids.
func (m *Manager) IDs() []string { return append([]string(nil), m.order...) }

// Get returns a managed process by id, or nil.
func (m *Manager) Get(id string) *Managed { return m.byID[id] }

// Servers lists the catalog's model servers, sorted by id.
func (m *Manager) Servers() []*Managed {
	out := make([]*Managed, 0, len(m.order)-1)
	for _, id := range m.order[1:] {
		out = append(out, m.byID[id])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ErrUnknownAction is returned for an action the API does not know.
var ErrUnknownAction = errors.New("unknown action: use start, stop, restart, graceful_restart, rollout or rollback")

// Act runs a lifecycle action on one process.
func (m *Manager) Act(ctx context.Context, id, action string) error {
	x := m.byID[id]
	if x == nil {
		return fmt.Errorf("no server %q", id)
	}
	switch action {
	case "start":
		if !x.Enabled {
			return fmt.Errorf("%s is disabled in %s ([servers.%s] enabled = false)", id, m.cp.File, id)
		}
		return x.Child().Start(ctx)
	case "stop":
		return x.Child().Stop(ctx)
	case "restart":
		if !x.Enabled {
			return fmt.Errorf("%s is disabled in %s", id, m.cp.File)
		}
		return x.Child().Restart(ctx)
	case "graceful_restart":
		if !x.Enabled {
			return fmt.Errorf("%s is disabled in %s", id, m.cp.File)
		}
		if x.entry != nil && x.Child().Status().PID != 0 {
			if err := m.waitJobs(ctx, x); err != nil {
				return err
			}
		}
		return x.Child().Restart(ctx)
	}
	return ErrUnknownAction
}

// APIToken is the management token.
func (m *Manager) APIToken() string { return m.apiTok }

// ModelToken is the token the model servers were given.
func (m *Manager) ModelToken() string { return m.modelTk }
