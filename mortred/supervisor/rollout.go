package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/fe64bb06/frontdoor/internal/atomicfile"
	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/supervisor/warmup"
)

// A rollout starts a new version of a model beside the one in service, on
// another port, warms it on sample images (each answer checked against the
// schema the new version serves and against the shape of the old version's
// answer), switches the gateway to it (the routes file, then SIGHUP, then
// the gateway's /readyz confirms), and drains the old version: it stops
// once its requests are done and its async jobs have outlived their TTL,
// and until then the gateway still fetches those jobs from it. A version
// that fails warm-up is stopped and the old one never stops serving.

// instance is one running version of a model (or the gateway's process).
type instance struct {
	child   *Child
	host    string // the model's listen host ("" or a wildcard: loopback)
	port    int
	version string // the model config's version
	gen     int    // 0 for the catalog's instance, then one more per rollout
	conf    string // the model-server file it runs
	jobTTL  time.Duration
	stop    context.CancelFunc // ends child.Run
}

// addr is where the supervisor reaches the instance.
func (in *instance) addr() string { return net.JoinHostPort(readyHost(in.host), strconv.Itoa(in.port)) }

// RolloutRequest is the body of POST /api/v1/servers/{id}/rollout. At most
// one of ModelFile (a new ONNX file for the model config in service) and
// Config (a new model config file) is given; with neither the version in
// service is started again. Paths are on the supervisor's host.
type RolloutRequest struct {
	ModelFile string `json:"model_file,omitempty"`
	Config    string `json:"config,omitempty"`
	// Version names the new version; default: the config's own version,
	// or, for a new model file, the version in service plus the file's
	// SHA-256 prefix.
	Version string `json:"version,omitempty"`
}

// RolloutState is the last rollout or rollback of a model.
type RolloutState struct {
	// State is warming, draining (switched; the old version finishes),
	// done or failed.
	State    string `json:"state"`
	Action   string `json:"action"` // rollout or rollback
	Version  string `json:"version"`
	Instance int    `json:"instance"`
	From     string `json:"from,omitempty"` // the version it replaces
	Error    string `json:"error,omitempty"`
	AtMS     int64  `json:"at_ms"`
}

// DrainingStatus is a replaced version still running.
type DrainingStatus struct {
	Version  string `json:"version"`
	Instance int    `json:"instance"`
	Port     int    `json:"port"`
	PID      int    `json:"pid"`
}

// RolloutResult is the answer of a rollout that switched.
type RolloutResult struct {
	OK       bool           `json:"ok"`
	ID       string         `json:"id"`
	Version  string         `json:"version"`
	Instance int            `json:"instance"`
	From     string         `json:"from"`
	Warmup   warmup.Report  `json:"warmup"`
	Note     string         `json:"note,omitempty"`
	Draining DrainingStatus `json:"draining"`
}

// RolloutError is a refused rollout and the HTTP status that says why.
type RolloutError struct {
	Code int
	Msg  string
}

func (e *RolloutError) Error() string { return e.Msg }

func rolloutErr(code int, format string, args ...any) error {
	return &RolloutError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// gatewayAckTimeout bounds the wait for the gateway to confirm a switch.
const gatewayAckTimeout = 15 * time.Second

// runInstance runs in's child under the models' context until retired.
func (m *Manager) runInstance(in *instance) bool {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.runCtx == nil || m.runCtx.Err() != nil {
		return false
	}
	ctx, cancel := context.WithCancel(m.runCtx)
	in.stop = cancel
	m.wg.Add(1)
	go func() { defer m.wg.Done(); in.child.Run(ctx) }()
	return true
}

// retire stops an instance's process and its child's goroutine.
func (m *Manager) retire(ctx context.Context, in *instance) {
	_ = in.child.Stop(ctx)
	if in.stop != nil {
		in.stop()
	}
}

// Rollout replaces model id's version in service by the one req names.
func (m *Manager) Rollout(ctx context.Context, id string, req RolloutRequest) (RolloutResult, error) {
	if req.ModelFile != "" && req.Config != "" {
		return RolloutResult{}, rolloutErr(http.StatusBadRequest, "give model_file or config, not both")
	}
	return m.replace(ctx, id, "rollout", func(x *Managed, gen int) (string, string, error) {
		return m.prepare(x, x.current(), req, gen)
	})
}

// Rollback returns model id to the version its last rollout replaced.
func (m *Manager) Rollback(ctx context.Context, id string) (RolloutResult, error) {
	return m.replace(ctx, id, "rollback", func(x *Managed, gen int) (string, string, error) {
		x.mu.Lock()
		prev := x.prev
		x.mu.Unlock()
		if prev == nil {
			return "", "", rolloutErr(http.StatusConflict, "%s has no previous version to return to: nothing was rolled out since the supervisor started", x.ID)
		}
		return m.prepare(x, prev, RolloutRequest{Version: prev.version}, gen)
	})
}

// replace runs one rollout or rollback of model id; prepare writes the new
// version's model-server file and names its version.
func (m *Manager) replace(ctx context.Context, id, action string, prepare func(*Managed, int) (string, string, error)) (RolloutResult, error) {
	x := m.byID[id]
	if x == nil || x.entry == nil {
		return RolloutResult{}, rolloutErr(http.StatusNotFound, "no model server %q; GET /api/v1/catalog lists them", id)
	}
	x.mu.Lock()
	if x.rolling {
		x.mu.Unlock()
		return RolloutResult{}, rolloutErr(http.StatusConflict, "a rollout of %s is already running; wait for it (GET /api/v1/servers/%s shows it)", id, id)
	}
	x.rolling = true
	old := x.cur
	gen := old.gen + 1
	for _, d := range x.draining {
		gen = max(gen, d.gen+1)
	}
	if x.prev != nil {
		gen = max(gen, x.prev.gen+1)
	}
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.rolling = false
		x.mu.Unlock()
	}()
	if !x.Enabled {
		return RolloutResult{}, rolloutErr(http.StatusConflict, "%s is disabled in %s", id, m.cp.File)
	}
	setRoll := func(st RolloutState) {
		st.Action, st.Instance, st.From, st.AtMS = action, gen, old.version, time.Now().UnixMilli()
		x.mu.Lock()
		x.roll = st
		x.mu.Unlock()
	}
	version := ""
	fail := func(err error) (RolloutResult, error) {
		var re *RolloutError
		if !errors.As(err, &re) {
			err = rolloutErr(http.StatusInternalServerError, "%s", err.Error())
		}
		setRoll(RolloutState{State: "failed", Version: version, Error: err.Error()})
		x.Child().Log().Append("[supervisor] " + action + " refused: " + err.Error())
		m.log.Warn("supervisor_rollout_failed", "id", id, "action", action, "err", err)
		return RolloutResult{}, err
	}

	serverFile, v, err := prepare(x, gen)
	version = v
	if err != nil {
		return fail(err)
	}
	setRoll(RolloutState{State: "warming", Version: version})
	srv, err := config.LoadServer(serverFile, envconf.Map(nil))
	if err != nil {
		return fail(rolloutErr(http.StatusBadRequest, "the new version's configuration does not load: %v", err))
	}
	spec := old.child.spec
	spec.Args = []string{"--config", serverFile}
	spec.ReadyURL = "http://" + net.JoinHostPort(readyHost(srv.Host), strconv.Itoa(*srv.Port)) + "/ready"
	in := &instance{child: NewChild(spec, old.child.Log(), m.log), host: srv.Host, port: *srv.Port, version: version, gen: gen,
		conf: serverFile, jobTTL: time.Duration(srv.AsyncJobTTL) * time.Millisecond}
	if !m.runInstance(in) {
		return fail(rolloutErr(http.StatusServiceUnavailable, "the supervisor is stopping"))
	}
	in.child.Log().Append(fmt.Sprintf("[supervisor] %s: starting version %q (instance %d) on port %d beside version %q", action, version, gen, in.port, old.version))
	if err := in.child.Start(ctx); err != nil {
		m.retire(context.WithoutCancel(ctx), in)
		return fail(err)
	}
	if err := waitInstanceReady(ctx, in, spec.StartTimeout); err != nil {
		m.retire(context.WithoutCancel(ctx), in)
		return fail(rolloutErr(http.StatusUnprocessableEntity, "version %q did not start, so it was stopped and version %q keeps serving: %v", version, old.version, err))
	}
	client := &http.Client{Timeout: time.Minute}
	target := warmup.Target{BaseURL: "http://" + in.addr(), URI: x.URI, Token: m.modelTk, Client: client}
	var ref *warmup.Target
	if st := old.child.Status(); st.Ready {
		ref = &warmup.Target{BaseURL: "http://" + old.addr(), URI: x.URI, Token: m.modelTk, Client: client}
	}
	samples, err := warmupSamples(srv.WarmupImages)
	if err != nil {
		m.retire(context.WithoutCancel(ctx), in)
		return fail(rolloutErr(http.StatusBadRequest, "%v", err))
	}
	report, err := warmup.Check(ctx, target, ref, samples)
	if err != nil {
		m.retire(context.WithoutCancel(ctx), in)
		return fail(rolloutErr(http.StatusUnprocessableEntity, "version %q failed warm-up, so it was stopped and version %q keeps serving: %v", version, old.version, err))
	}

	// The switch: from here the new version serves.
	x.mu.Lock()
	x.prev, x.cur = old, in
	x.draining = append(x.draining, old)
	x.mu.Unlock()
	res := RolloutResult{OK: true, ID: id, Version: version, Instance: gen, From: old.version, Warmup: report,
		Draining: DrainingStatus{Version: old.version, Instance: old.gen, Port: old.port, PID: old.child.Status().PID}}
	if err := m.publishRoutes(ctx, id, gen); err != nil {
		res.Note = err.Error()
		m.log.Warn("supervisor_rollout_gateway", "id", id, "err", err)
	}
	in.child.Log().Append(fmt.Sprintf("[supervisor] %s: version %q (instance %d) serves; version %q drains", action, version, gen, old.version))
	setRoll(RolloutState{State: "draining", Version: version})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.drain(x, old)
		x.mu.Lock()
		if x.roll.Instance == gen && x.roll.State == "draining" {
			x.roll.State = "done"
		}
		x.mu.Unlock()
	}()
	return res, nil
}

// waitInstanceReady waits until in's child is ready; an exit, a failure or
// the start timeout ends the wait with the child's own reason.
func waitInstanceReady(ctx context.Context, in *instance, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := in.child.Status()
		switch {
		case st.Ready:
			return nil
		case st.State == StateFailed || st.State == StateBackoff || st.State == StateStopped && st.LastExitStatus != "":
			// The note of its first exit, without the restart it plans.
			why, _, _ := strings.Cut(st.Error, "; restarting in ")
			if why == "" {
				why = st.LastExitStatus
			}
			return errors.New(why)
		case time.Now().After(deadline):
			return fmt.Errorf("not ready within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drain keeps a replaced instance running until the requests it had are
// done and the async jobs it holds are past their TTL (the gateway fetches
// them from it meanwhile), then takes it out of the routes and stops it.
// The supervisor stopping ends the wait.
func (m *Manager) drain(x *Managed, old *instance) {
	m.runMu.Lock()
	ctx := m.runCtx
	m.runMu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	url := "http://" + old.addr() + "/metrics"
	deadline := time.Now().Add(m.opts.GracefulWait)
	quiet := 0
	jobs := false
	for quiet < 2 && time.Now().Before(deadline) {
		// Two quiet reads half a second apart: a request the gateway sent
		// just before the switch may still be on its way.
		busy, hadJobs, err := m.busy(ctx, client, url)
		jobs = jobs || hadJobs
		switch {
		case err != nil:
			quiet = 2 // it cannot say; it is stopped as it is
		case busy == 0:
			quiet++
		default:
			quiet = 0
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			break
		}
	}
	if jobs {
		old.child.Log().Append(fmt.Sprintf("[supervisor] version %q (instance %d) keeps its finished jobs fetchable for async_job_ttl (%s)", old.version, old.gen, old.jobTTL))
		sleepCtx(ctx, old.jobTTL)
	}
	x.mu.Lock()
	for i, d := range x.draining {
		if d == old {
			x.draining = append(x.draining[:i:i], x.draining[i+1:]...)
			break
		}
	}
	gen := x.cur.gen
	x.mu.Unlock()
	if ctx.Err() == nil {
		_ = m.publishRoutes(ctx, x.ID, gen)
	}
	old.child.Log().Append(fmt.Sprintf("[supervisor] version %q (instance %d) drained; stopping it", old.version, old.gen))
	m.retire(context.WithoutCancel(ctx), old)
}

// busy reads a model server's metrics: its items waiting or running plus
// its unfinished async jobs, and whether it ever accepted a job.
func (m *Manager) busy(ctx context.Context, client *http.Client, url string) (int, bool, error) {
	mfs, err := scrapeMetrics(ctx, client, url, m.modelTk)
	if err != nil {
		return 0, false, err
	}
	total := 0.0
	for _, name := range []string{"mortred_queue_depth", "mortred_workers_busy", activeJobsMetric} {
		total += gaugeSum(mfs[name])
	}
	accepted := 0.0
	for _, mt := range mfs["mortred_async_jobs_total"].GetMetric() {
		for _, l := range mt.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == "pending" {
				accepted += mt.GetCounter().GetValue()
			}
		}
	}
	return int(total), accepted > 0, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// routesFile is what the gateway reads (MORTRED_ROUTES_FILE): each model
// whose instance in service is not the catalog's, or that has draining
// instances.
type routesFile struct {
	Generation int64                 `json:"generation"`
	Models     map[string]routeEntry `json:"models"`
}

type routeEntry struct {
	Addr     string       `json:"addr"`
	Version  string       `json:"version"`
	Instance int          `json:"instance"`
	Draining []routeEntry `json:"draining,omitempty"`
}

// stateFile records, per model, the rolled-out version in service and the
// one it replaced, so that a supervisor that restarts serves them again.
type stateFile struct {
	Models map[string]stateEntry `json:"models"`
}

type stateEntry struct {
	ServerFile string      `json:"server_file"`
	Version    string      `json:"version"`
	Instance   int         `json:"instance"`
	Prev       *stateEntry `json:"prev,omitempty"`
}

func (m *Manager) statePath() string { return filepath.Join(m.runDir, "state.json") }

// writeRoutes writes the gateway's routes file and the state file: each
// model whose instance in service is not the catalog's, or that has
// draining instances or a previous version.
func (m *Manager) writeRoutes() error {
	rf := routesFile{Generation: time.Now().UnixNano(), Models: map[string]routeEntry{}}
	sf := stateFile{Models: map[string]stateEntry{}}
	for _, mid := range m.order[1:] {
		x := m.byID[mid]
		x.mu.Lock()
		if x.cur.gen != 0 || len(x.draining) > 0 {
			e := routeEntry{Addr: x.cur.addr(), Version: x.cur.version, Instance: x.cur.gen}
			for _, d := range x.draining {
				e.Draining = append(e.Draining, routeEntry{Addr: d.addr(), Version: d.version, Instance: d.gen})
			}
			rf.Models[mid] = e
		}
		if x.cur.gen != 0 || x.prev != nil {
			e := stateEntry{ServerFile: x.cur.conf, Version: x.cur.version, Instance: x.cur.gen}
			if x.prev != nil {
				e.Prev = &stateEntry{ServerFile: x.prev.conf, Version: x.prev.version, Instance: x.prev.gen}
			}
			sf.Models[mid] = e
		}
		x.mu.Unlock()
	}
	for path, v := range map[string]any{m.routesFile: rf, m.statePath(): sf} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileAtomic(path, append(b, '\n')); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// restore puts back the versions the state file of an earlier run names,
// each on a fresh free port (its old one may be taken by now). A state
// that cannot be used is logged and the catalog's version serves.
func (m *Manager) restore() {
	b, err := os.ReadFile(m.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var sf stateFile
	if err == nil {
		err = json.Unmarshal(b, &sf)
	}
	if err != nil {
		m.log.Warn("supervisor_state_unreadable", "file", m.statePath(), "err", err)
		return
	}
	for id, e := range sf.Models {
		x := m.byID[id]
		if x == nil || x.entry == nil {
			m.log.Warn("supervisor_state_unknown_model", "id", id)
			continue
		}
		cat := x.cur
		if e.Prev != nil {
			x.prev = &instance{conf: e.Prev.ServerFile, version: e.Prev.Version, gen: e.Prev.Instance}
		}
		if e.Instance == 0 {
			continue // the catalog's version serves; prev is kept for rollback
		}
		file, version, err := m.prepare(x, &instance{conf: e.ServerFile, version: e.Version}, RolloutRequest{}, e.Instance)
		var srv *config.Server
		if err == nil {
			srv, err = config.LoadServer(file, envconf.Map(nil))
		}
		if err != nil {
			m.log.Warn("supervisor_state_version_unusable", "id", id, "version", e.Version, "err", err)
			x.prev = nil
			continue
		}
		spec := cat.child.spec
		spec.Args = []string{"--config", file}
		spec.ReadyURL = "http://" + net.JoinHostPort(readyHost(srv.Host), strconv.Itoa(*srv.Port)) + "/ready"
		x.cur = &instance{child: NewChild(spec, cat.child.Log(), m.log), host: srv.Host, port: *srv.Port, version: version, gen: e.Instance,
			conf: file, jobTTL: time.Duration(srv.AsyncJobTTL) * time.Millisecond}
		m.log.Info("supervisor_version_restored", "id", id, "version", version, "instance", e.Instance, "port", *srv.Port)
	}
}

// publishRoutes writes the routes file, tells the gateway (SIGHUP) and
// waits until its /readyz shows model id on instance gen.
func (m *Manager) publishRoutes(ctx context.Context, id string, gen int) error {
	if err := m.writeRoutes(); err != nil {
		return err
	}
	gw := m.byID[GatewayID].Child()
	pid := gw.Status().PID
	if pid == 0 {
		return nil // it reads the file when it starts
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("telling the gateway (pid %d) to reload its routes: %w", pid, err)
	}
	deadline := time.Now().Add(gatewayAckTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		var ready struct {
			Models []struct {
				Instance int `json:"instance"`
			} `json:"models"`
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.gatewayURL+"/readyz?model="+id, nil)
		if resp, err := client.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
			if len(ready.Models) == 1 && ready.Models[0].Instance == gen {
				return nil
			}
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("the gateway did not confirm the switch of %s to instance %d within %s; it reads %s when it restarts", id, gen, gatewayAckTimeout, m.routesFile)
		}
	}
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// prepare writes the model-server file of a new instance of x: from's
// file on a free port, with the model config req asks for. It returns the
// file and the new version's name.
func (m *Manager) prepare(x *Managed, from *instance, req RolloutRequest, gen int) (string, string, error) {
	var doc map[string]map[string]any
	if _, err := toml.DecodeFile(from.conf, &doc); err != nil {
		return "", "", fmt.Errorf("reading %s: %w", from.conf, err)
	}
	sec, ok := doc[x.ID]
	if !ok {
		return "", "", fmt.Errorf("%s has no section [%s]", from.conf, x.ID)
	}
	dir := filepath.Join(m.runDir, x.ID, "instance-"+strconv.Itoa(gen))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	fromDir := filepath.Dir(from.conf)
	absolute(sec, fromDir, "model_config_file_path", "ort_lib_path", "warmup_images")
	modelConf, _ := sec["model_config_file_path"].(string)
	version := from.version
	switch {
	case req.Config != "":
		p, err := filepath.Abs(req.Config)
		if err != nil {
			return "", "", err
		}
		v, err := configVersion(p)
		if err != nil {
			return "", "", rolloutErr(http.StatusBadRequest, "config %s: %v", p, err)
		}
		if version = v; req.Version != "" && req.Version != v {
			return "", "", rolloutErr(http.StatusBadRequest, "config %s says version %q, not %q: the version of a config file is its own", p, v, req.Version)
		}
		modelConf = p
	case req.ModelFile != "" || req.Version != "" && req.Version != from.version:
		var mc map[string]any
		if _, err := toml.DecodeFile(modelConf, &mc); err != nil {
			return "", "", fmt.Errorf("reading the model config %s: %w", modelConf, err)
		}
		mcDir := filepath.Dir(modelConf)
		if _, ok := mc["model_dir"]; ok {
			absolute(mc, mcDir, "model_dir")
		} else {
			absolute(mc, mcDir, fileKeys(mc)...)
		}
		if req.ModelFile != "" {
			p, err := filepath.Abs(req.ModelFile)
			if err != nil {
				return "", "", err
			}
			sum, err := fileSHA256(p)
			if err != nil {
				return "", "", rolloutErr(http.StatusBadRequest, "model file: %v", err)
			}
			mc["model_file"] = p
			version = from.version + "+" + sum[:8]
		}
		if req.Version != "" {
			version = req.Version
		}
		mc["version"] = version
		modelConf = filepath.Join(dir, "model.toml")
		if err := writeTOML(modelConf, mc); err != nil {
			return "", "", err
		}
	}
	host, _ := sec["host"].(string)
	port, err := freePort(readyHost(host))
	if err != nil {
		return "", "", err
	}
	sec["port"] = port
	sec["model_config_file_path"] = modelConf
	serverFile := filepath.Join(dir, "server.toml")
	if err := writeTOML(serverFile, doc); err != nil {
		return "", "", err
	}
	return serverFile, version, nil
}

// absolute makes the relative paths under keys (a string or a list of
// them) absolute against dir.
func absolute(tbl map[string]any, dir string, keys ...string) {
	abs := func(s string) string {
		if s != "" && !filepath.IsAbs(s) {
			return filepath.Join(dir, s)
		}
		return s
	}
	for _, k := range keys {
		switch v := tbl[k].(type) {
		case string:
			tbl[k] = abs(v)
		case []any:
			for i, e := range v {
				if s, ok := e.(string); ok {
					v[i] = abs(s)
				}
			}
		}
	}
}

// warmupSamples are the images of warmup_images, else the built-in ones.
func warmupSamples(paths []string) ([][]byte, error) {
	if len(paths) == 0 {
		return warmup.DefaultSamples(), nil
	}
	out := make([][]byte, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("warmup_images: %v", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// fileKeys are a model config's keys that hold a file path.
func fileKeys(tbl map[string]any) []string {
	var out []string
	for k, v := range tbl {
		if _, ok := v.(string); ok && (strings.HasSuffix(k, "_file") || strings.HasSuffix(k, "_path")) {
			out = append(out, k)
		}
	}
	return out
}

func writeTOML(path string, v any) error {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(v); err != nil {
		return err
	}
	return writeFileAtomic(path, b.Bytes())
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// configVersion is a model config's version key, else its SHA-256 prefix.
func configVersion(path string) (string, error) {
	v, err := readVersion(path)
	if err != nil || v != "" {
		return v, err
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return "", err
	}
	return sum[:12], nil
}

// modelVersion is the version a model config names ("" if unreadable).
func modelVersion(path string) string {
	v, _ := readVersion(path)
	return v
}

// readVersion reads a model config's version key.
func readVersion(path string) (string, error) {
	var head struct {
		Version string `toml:"version"`
	}
	_, err := toml.DecodeFile(path, &head)
	return head.Version, err
}

// freePort asks the kernel for a port free on host.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port for the new version: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
