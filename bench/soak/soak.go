// Package soak is the chaos soak of both products: it starts a mentat
// cluster (five engines behind two routers behind Nginx) and the mortred
// stack (supervisor, gateway, three model servers on ONNX Runtime), drives
// a mixed load with bad traffic in it for the whole run, injects a seeded
// fault every 10–30 s, judges every request, samples every long-lived
// process, and writes a report (bench/soak/report). `make soak` runs it
// for 30 minutes; the test in this package runs two.
package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/health"
	"github.com/fe64bb06/frontdoor/bench/soak/record"
	"github.com/fe64bb06/frontdoor/bench/soak/report"
	"github.com/fe64bb06/frontdoor/internal/testnet"
)

// Config is one run; zero values take the defaults in the comments.
type Config struct {
	// BinDir holds the built binaries (make build); Root is the
	// repository (for conf/); WorkDir receives configs and logs (a
	// temporary directory when empty).
	BinDir, Root, WorkDir string
	// Duration of the load (30m); Warmup (2m, or a tenth of a shorter
	// run) is left out of the health comparison and has no faults in its
	// first half.
	Duration, Warmup time.Duration
	Seed             int64
	// Out is the report's path ("" writes none).
	Out string
	// Command is how to reproduce the run, for the report.
	Command string
	// Logf receives progress lines (nil: stderr).
	Logf func(format string, args ...any)
}

// Summary is what a run found.
type Summary struct {
	Results  int
	Outcomes map[record.Outcome]int
	Faults   int
	// NotRecovered lists the faults after which their component did not
	// serve again within recoverCap.
	NotRecovered []string
	Orphans      []string
	Targets      []report.Target
	// Failed lists the targets missed.
	Failed []string
}

// OK reports whether the run met every target.
func (s Summary) OK() bool { return len(s.Failed) == 0 }

// topo is where the topology's processes find their files.
type topo struct {
	binDir, root, dir string
	// logDir holds every process's log; diskDir is the small disk it is
	// on (a tmpfs when root could mount one).
	logDir, diskDir string
	env             []string
	seed            int64
}

type run struct {
	topo
	cfg     Config
	rec     *record.Recorder
	mentat  *mentat
	mortred *mortred
	tmpfs   bool
	lan     *testnet.Adapter
	node    *testnet.Host
	marker  string
	notes   []string
	logf    func(string, ...any)
	http    *http.Client
}

// lanOctet is the soak's /24 of internal/testnet's range.
const lanOctet = 212

// tmpfsSize is the log disk: room for a 30-minute run's logs, small
// enough to fill in a moment.
const tmpfsSize = "256m"

// Run runs the soak.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 30 * time.Minute
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = min(2*time.Minute, cfg.Duration/10)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "soak: "+f+"\n", a...) }
	}
	r := &run{cfg: cfg, rec: &record.Recorder{}, logf: cfg.Logf}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "soak-"); err != nil {
			return sum, err
		}
		defer os.RemoveAll(cfg.WorkDir)
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	r.marker = "SOAK_RUN=" + hex.EncodeToString(id)
	// GOGC=100 turns off the heap floor of the router and the model
	// servers (internal/gcfloor): it lets garbage reach 32 MiB before a
	// collection, which at the soak's rates takes most of a run to fill,
	// a rise in resident memory that is bounded by design and looks
	// exactly like a leak. At GOGC=100 resident memory follows the live
	// heap, so growth means memory kept.
	r.topo = topo{binDir: cfg.BinDir, root: cfg.Root, dir: cfg.WorkDir, diskDir: filepath.Join(cfg.WorkDir, "disk"),
		env: []string{r.marker, "GOGC=100"}, seed: cfg.Seed}
	if err := os.MkdirAll(r.diskDir, 0o755); err != nil {
		return sum, err
	}
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+tmpfsSize, "soak-logs", r.diskDir).Run(); err == nil {
		r.tmpfs = true
		defer func() {
			// The logs outlive the disk: a failed run is read from them.
			if out, err := exec.Command("cp", "-a", r.logDir, filepath.Join(cfg.WorkDir, "logs")).CombinedOutput(); err != nil {
				r.logf("keeping the logs: %v: %s", err, out)
			}
			if err := exec.Command("umount", "-l", r.diskDir).Run(); err != nil {
				r.logf("umount %s: %v", r.diskDir, err)
			}
		}()
	} else {
		r.notes = append(r.notes, "The log disk is an ordinary directory (mounting a tmpfs needs root): the disk-full fault was not injected.")
	}
	r.logDir = filepath.Join(r.diskDir, "logs")
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return sum, err
	}
	r.logf("work dir %s (logs in %s)", cfg.WorkDir, r.logDir)

	// The second node, in a network namespace: made first, so that its
	// removal (deferred first) runs after every process in it stopped.
	r.lan = &testnet.Adapter{}
	defer func() {
		if err := r.lan.Close(); err != nil {
			r.logf("removing the network namespace: %v", err)
		}
	}()
	if err := r.lan.Do(func() { r.node = testnet.NewLAN(r.lan, lanOctet).AddHost() }); err != nil {
		r.node = nil
		r.notes = append(r.notes, "Engine a3 ran on the loopback with the other engines, and the link-down fault was not injected: "+err.Error())
	}
	defer func() {
		if r.mentat != nil {
			r.mentat.stop()
		}
		if r.mortred != nil {
			r.mortred.stop()
		}
	}()
	r.logf("starting the mentat cluster")
	if r.mentat, err = startMentat(ctx, r.topo, r.node); err != nil {
		return sum, fmt.Errorf("mentat: %w", err)
	}
	r.logf("starting the mortred stack")
	if r.mortred, err = startMortred(ctx, r.topo); err != nil {
		return sum, fmt.Errorf("mortred: %w", err)
	}
	r.http = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32, IdleConnTimeout: 3 * time.Second,
		DialContext: (&net.Dialer{Timeout: 3 * time.Second}).DialContext}}
	defer r.http.CloseIdleConnections()
	mc := r.newMortredClient()
	if mc.inputs, err = newInputs(); err != nil {
		return sum, err
	}
	if err := mc.baseline(ctx); err != nil {
		return sum, err
	}

	// The commit is read now: the tree may move while the run goes on.
	head := commit(cfg.Root)
	start := time.Now()
	end := start.Add(cfg.Duration)
	// The run's end cancels the load (rather than passing a deadline to
	// it), so a request cut by it is told from one that hung past its own
	// deadline.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	endTimer := time.AfterFunc(cfg.Duration, stopLoad)
	defer endTimer.Stop()
	var wg sync.WaitGroup
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	wg.Add(1)
	go func() { defer wg.Done(); health.Run(sampleCtx, r.rec, 2*time.Second, r.healthTargets) }()
	var loadWG sync.WaitGroup
	r.startLoad(loadCtx, &loadWG, mc)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		// The last minute (a tenth of a short run) has no new faults, so
		// the run ends at a quiet point.
		r.schedule(loadCtx, mrand.New(mrand.NewPCG(uint64(cfg.Seed), 0xfa17)), end.Add(-min(time.Minute, cfg.Duration/10)))
	}()
	r.progress(loadCtx, start)
	<-faultsDone
	loadWG.Wait()
	stopSampling()
	wg.Wait()

	results, faults, samples := r.rec.Snapshot()
	// A request the end of the run cut is not judged.
	kept := results[:0]
	for _, x := range results {
		if x.End.After(end) && x.Failed {
			continue
		}
		kept = append(kept, x)
	}
	results = kept
	judge(results, faults)

	r.mentat.stop()
	r.mortred.stop()
	r.mentat, r.mortred = nil, nil
	orphans := r.orphans()
	in := report.Input{Seed: cfg.Seed, Commit: head, Duration: cfg.Duration, Start: start, End: end,
		Warmup: cfg.Warmup, Topology: r.topologyText(), Command: cfg.Command, Results: results, Faults: faults,
		Samples: samples, Orphans: orphans, Notes: r.notes}
	// Everything the report is drawn from, for a closer look at a run
	// kept with SOAK_DIR, and for Rerender.
	if b, err := json.Marshal(in); err == nil {
		if err := os.WriteFile(filepath.Join(cfg.WorkDir, InputFile), b, 0o644); err != nil {
			r.logf("keeping the report's input: %v", err)
		}
	}
	return finish(in, cfg.Out)
}

// InputFile is the name, in a run's WorkDir, of the report's input.
const InputFile = "report-input.json"

// Rerender judges a kept run again and writes its report to out, from the
// run's InputFile alone (no process is started), so that a change to the
// report's judgement can be checked against a real 30-minute run without
// spending another half-hour on it.
func Rerender(inputFile, out string) (Summary, error) {
	b, err := os.ReadFile(inputFile)
	if err != nil {
		return Summary{}, err
	}
	var in report.Input
	if err := json.Unmarshal(b, &in); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", inputFile, err)
	}
	return finish(in, out)
}

// finish is the end of a run and the whole of a rerender, shared so that
// both judge and write alike: it sums up in and writes its report to out
// ("" writes none).
func finish(in report.Input, out string) (Summary, error) {
	sum := Summary{Results: len(in.Results), Outcomes: map[record.Outcome]int{}, Faults: len(in.Faults), Orphans: in.Orphans,
		Targets: report.Evaluate(in)}
	for _, x := range in.Results {
		sum.Outcomes[x.Outcome]++
	}
	for _, f := range in.Faults {
		if f.Recovered.IsZero() {
			sum.NotRecovered = append(sum.NotRecovered, f.Kind+" on "+f.Target+": "+f.Note)
		}
	}
	for _, t := range sum.Targets {
		if !t.Met {
			sum.Failed = append(sum.Failed, t.Goal+": "+t.Measured)
		}
	}
	if out != "" {
		if err := report.Write(in, out); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// progress logs a line a minute until ctx ends.
func (r *run) progress(ctx context.Context, start time.Time) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			results, faults, _ := r.rec.Snapshot()
			bad := 0
			for _, x := range results {
				if x.Defect {
					bad++
				}
			}
			r.logf("%s: %d requests, %d faults, %d defects so far", time.Since(start).Round(time.Second), len(results), len(faults), bad)
		}
	}
}

// orphans waits a moment for stopped processes to go, then lists what
// still carries the run's marker.
func (r *run) orphans() []string {
	var out []string
	for i := 0; i < 50; i++ {
		ps, err := health.Orphans(r.marker, os.Getpid())
		if err != nil {
			return []string{"could not scan /proc: " + err.Error()}
		}
		out = out[:0]
		for _, p := range ps {
			out = append(out, fmt.Sprintf("pid %d: %s", p.PID, p.Cmd))
		}
		if len(out) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out
}

func (r *run) healthTargets() []health.Target {
	var ts []health.Target
	add := func(name string, pid func() int, metrics, token string) {
		ts = append(ts, health.Target{Name: name, PID: pid, MetricsURL: metrics, MetricsToken: token})
	}
	m := r.mentat
	if m == nil || r.mortred == nil {
		return nil
	}
	add("daemon", m.daemon.pid, "", "")
	if m.node2 != nil {
		add(m.node2.name, m.node2.pid, "", "")
	}
	for _, e := range m.engines {
		add("agent-"+e.group, e.agent.pid, "", "")
		add("engine-"+e.group, e.pid, e.url()+"/metrics", "")
	}
	for i, rt := range m.routers {
		add(rt.name, rt.pid, m.routerURL(i)+"/metrics", "")
	}
	if m.nginx != nil && m.nginx.Proc != nil {
		add("nginx", m.nginx.Proc.PID, "", "")
	}
	add("supervisor", r.mortred.sup.pid, r.mortred.api()+"/api/v1/metrics", apiToken)
	st, err := r.mortred.status(context.Background())
	if err == nil {
		gw := st.Gateway.PID
		add("gateway", func() int { return gw }, r.mortred.gateway()+"/metrics", metricsToken)
		for _, s := range st.Servers {
			pid := s.PID
			add("model-"+s.ID, func() int { return pid }, fmt.Sprintf("http://127.0.0.1:%d/metrics", s.Port), modelToken)
		}
	}
	return ts
}

func (r *run) topologyText() string {
	return strings.TrimSpace(fmt.Sprintf(`
**mentat**: one mentatd daemon; five mentatd agents, each running an enginesim (%s on groups a1, a2, a3; %s on b1, b2; a1 and b1 with a management MCP server; --max-num-seqs 32, --max-model-len %d, --kv-cache-tokens %d, a cache the load fills within the warm-up so that eviction runs all through the soak); %s two mentatd-serve routers sharing MENTAT_SESSION_KEY_FILE (PROBE_INTERVAL_S=%d, SERVE_DRAIN_S=6, SERVE_BODY_TIMEOUT_S=%d, ROUTING_INDEX_BLOCKS=%d, a prefix index the load also fills within the warm-up); Nginx round-robin in front of them with the repository's conf/nginx/mentat-routers.conf. The soak restarts an agent a second after it exits, as a process manager would. Every Go process runs with GOGC=100, which turns off the heap floor (internal/gcfloor) so that resident memory follows the live heap.

**mortred**: mortred-supervisor with its gateway (request limit %d MiB, drain 1 s) and three model servers, one worker each: %s (the PP-OCR pipeline), %s (nsfwjs on a photograph) and %s (batches). Model-server logs and every process's log are on a %s tmpfs that the disk-full fault fills.

**Load** (bounded, the whole run): three OpenAI clients through Nginx (chat and completions, streamed and not, with and without a long shared system prompt, embeddings), one MCP client holding a session through Nginx (calls to each group's tools and the router's own), two mortred clients (sync inference of every model, batches, async jobs polled at once and 30–120 s late), and one client of bad traffic (malformed and oversized bodies, unknown models, bad tokens, stalled bodies, slow bodies, mid-stream hang-ups).`,
		ModelA, ModelB, EngineMaxModelLen, EngineKVTokens, r.nodeText(), int(ProbeInterval/time.Second), int(BodyTimeout/time.Second), RouterIndexBlocks, GatewayBodyLimitMB, ModelOCR, ModelNSFW, ModelTest, tmpfsSize))
}

func (r *run) nodeText() string {
	if r.node == nil {
		return "every engine on the loopback (no network namespace: see the notes);"
	}
	return fmt.Sprintf("a3's agent and engine on a second node: a network namespace at %s on a bridged LAN, with its own mentatd daemon, whose link the link-down fault cuts;", r.node.Addr)
}

// probeBoth serves one request at each front door.
func (r *run) probeBoth(ctx context.Context) error {
	rnd := mrand.New(mrand.NewPCG(1, 2))
	c := r.newMentatClient()
	if res := c.chat(ctx, rnd, ModelB, false, false, false); res.Failed || res.Defect {
		return errors.New(res.Detail)
	}
	return getOK(ctx, r.mortred.gateway()+"/readyz")
}

func commit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
		c += "-dirty"
	}
	return c
}
