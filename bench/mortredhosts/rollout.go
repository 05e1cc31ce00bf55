package mortredhosts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mortred/deps"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// RolloutResult is part 2: a rollout of PPOCR_CLS under an open-loop load.
type RolloutResult struct {
	// Rate is the load in requests per second; Requests were sent,
	// Failed of them were not answered 200.
	Rate             float64
	Requests, Failed int
	// SteadyP99 and SwitchP99 are the p99 latencies of the requests that
	// started before the rollout command and in the switch window (its
	// start to its end + SwitchGrace); Ratio is SwitchP99 / SteadyP99.
	SteadyP99, SwitchP99 time.Duration
	SteadyN, SwitchN     int
	Ratio                float64
	// Took is the rollout command's duration: the new version's start,
	// warm-up and the switch.
	Took time.Duration
	// From and To are the versions before and after.
	From, To string
}

// SwitchGrace is how long after the rollout command's end its window
// lasts: requests sent to the old version just before the switch end
// then, and the old one starts to drain.
const SwitchGrace = 2 * time.Second

// requestTimeout bounds each request of the load, and stands for a failed
// request in the percentiles.
const requestTimeout = 30 * time.Second

// The PP-OCR direction classifier's ONNX file, under the model store.
const clsFile = "ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"

// findORT returns the ONNX Runtime library and the model store as the
// binaries find them from the checkout (package deps: MORTRED_ORT_LIB
// and MORTRED_MODEL_DIR first, else .deps/).
func findORT(root string) (lib, store string, err error) {
	f := deps.Finder{Env: envconf.OS(), WorkDir: root}
	if lib, err = f.Lib(""); err != nil {
		return "", "", err
	}
	store, err = f.ModelStore(clsFile, "", "")
	return lib, store, err
}

// clsModel is PPOCR_CLS with one worker of one thread.
func clsModel(root string, port int, keys map[string]any) model {
	k := map[string]any{"worker_nums": 1, "intra_op_threads": 1}
	for n, v := range keys {
		k[n] = v
	}
	return model{id: "PPOCR_CLS", port: port, modelConf: filepath.Join(root, "conf", "models", "ppocr_cls.toml"), keys: k}
}

// lightEnvelope is the request body of parts 2 and 3: one 8×8 light gray
// PNG, as the e2e tests send PPOCR_CLS.
func lightEnvelope() []byte {
	return []byte(`{"images":["` + b64(testmodel.GrayPNG(8, 8, 240)) + `"]}`)
}

// runRollout rolls PPOCR_CLS out to a copy of its own ONNX file under a
// fixed-rate load: Steady, the rollout, After.
func runRollout(ctx context.Context, cfg Config, dir string) (RolloutResult, string, error) {
	res := RolloutResult{Rate: cfg.RolloutRate}
	lib, store, err := findORT(cfg.Root)
	if err != nil {
		return res, "", fmt.Errorf("PPOCR_CLS needs ONNX Runtime and the PP-OCR models (make setup-models): %w", err)
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = harness.FreePort(); err != nil {
			return res, "", err
		}
	}
	p, err := writePlane(filepath.Join(dir, "conf"), "127.0.0.1", ports[0], ports[1], nil,
		// Finished jobs stay fetchable for 3 s: the replaced version stops soon.
		[]model{clsModel(cfg.Root, ports[2], map[string]any{"async_job_ttl": 3000})})
	if err != nil {
		return res, "", err
	}
	sup, err := startSupervisor(ctx, dir, "mortred-supervisor", cfg.BinDir, nil, p, childEnv("MORTRED_ORT_LIB="+lib), "PPOCR_CLS")
	if err != nil {
		return res, "", err
	}
	defer sup.stop()
	before, err := sup.status(ctx, "PPOCR_CLS")
	if err != nil {
		return res, "", err
	}
	res.From = before.Version
	// The new version: the same graph under another path, so its answers
	// are the old one's and its version is From+<its SHA-256 prefix>.
	onnx := filepath.Join(dir, "cls-v2.onnx")
	if err := copyFile(filepath.Join(store, clsFile), onnx); err != nil {
		return res, "", err
	}

	infer := "http://" + p.gatewayAddr() + "/v1/models/PPOCR_CLS/infer"
	body := lightEnvelope()
	for range 20 {
		if _, err := want200(ctx, client, "POST", infer, apiToken, body); err != nil {
			return res, "", fmt.Errorf("warming PPOCR_CLS: %w", err)
		}
	}
	lc := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}}
	defer lc.CloseIdleConnections()
	maxFor := cfg.Steady + cfg.RolloutTimeout + cfg.After + 10*time.Second
	load := openLoop{rate: cfg.RolloutRate, max: int(math.Ceil(cfg.RolloutRate * maxFor.Seconds())), maxFor: maxFor, inflight: 256,
		call: func(ctx context.Context) (int, string, error) {
			r, err := do(ctx, lc, "POST", infer, apiToken, body)
			return r.code, versionOf(r), err
		}}
	stop := make(chan struct{})
	done := make(chan []outcome, 1)
	go func() { done <- load.run(ctx, stop) }()
	// end stops the load and waits for its answers.
	end := func() []outcome {
		select {
		case <-stop:
		default:
			close(stop)
		}
		return <-done
	}
	if err := sleep(ctx, cfg.Steady); err != nil {
		end()
		return res, "", err
	}
	from := time.Now()
	run, err := ctl(ctx, cfg.BinDir, cfg.RolloutTimeout, ctlEnv("MORTREDCTL_ADDR="+p.apiAddr(), "MORTREDCTL_GATEWAY_ADDR="+p.gatewayAddr()),
		"rollout", "PPOCR_CLS", "--model-file", onnx)
	to := time.Now()
	if err != nil {
		end()
		return res, "", fmt.Errorf("the rollout under load: %w", err)
	}
	sleepErr := sleep(ctx, cfg.After)
	outs := end()
	if sleepErr != nil {
		return res, "", sleepErr
	}
	after, err := sup.status(ctx, "PPOCR_CLS")
	if err != nil {
		return res, "", err
	}
	res.To, res.Took = after.Version, to.Sub(from)
	st := analyze(outs, from, to, SwitchGrace, requestTimeout)
	if st.versions[res.To] == 0 || res.To == res.From {
		return res, "", fmt.Errorf("after the rollout (%s) no answer came from a new version: answers by version %v, status %+v",
			strings.TrimSpace(run.stdout), st.versions, after)
	}
	res.Requests, res.Failed = st.total, st.failed
	res.SteadyP99, res.SwitchP99, res.SteadyN, res.SwitchN, res.Ratio = st.steady.p99, st.sw.p99, st.steady.n, st.sw.n, st.ratio99()
	cmd := fmt.Sprintf("%s   # MORTREDCTL_ADDR=%s, %s copied from %s", run.command, p.apiAddr(), filepath.Base(onnx), filepath.Join(store, clsFile))
	server, err := os.ReadFile(p.serverFile("PPOCR_CLS"))
	if err != nil {
		return res, "", err
	}
	return res, rolloutMarkdown(cfg, res, st, cmd, strings.TrimSpace(run.stdout), string(server)), nil
}

// versionOf is the version that served an answer: its X-Mortred-Version,
// else the envelope's model.version (the catalog's instance, before any
// rollout, has no header).
func versionOf(r reply) string {
	if v := r.header.Get("X-Mortred-Version"); v != "" {
		return v
	}
	var env struct {
		Model struct {
			Version string `json:"version"`
		} `json:"model"`
	}
	if json.Unmarshal(r.body, &env) != nil {
		return ""
	}
	return env.Model.Version
}

// rolloutMarkdown is part 2's text: the setup, the phases' table, what
// served, the failures, the command and the model-server file.
func rolloutMarkdown(cfg Config, res RolloutResult, st rolloutStats, command, output, serverFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "`mortred-supervisor` with PPOCR_CLS (real ONNX Runtime; `worker_nums = 1`, `intra_op_threads = 1`, "+
		"`async_job_ttl = 3000`) and its gateway. An open-loop load sends %.0f sync inferences per second through the gateway "+
		"(`POST /v1/models/PPOCR_CLS/infer`, one 8×8 light gray PNG; each request at its time whatever the earlier ones take, "+
		"so a stall shows as latency, not as fewer requests): %s steady, then `mortredctl rollout PPOCR_CLS --model-file` "+
		"with a copy of the same ONNX file while the load goes on, then %s more. Every request's start, latency and outcome is "+
		"recorded; a failure is any answer but a 200, or none (a failed request counts as %s, the load's timeout, in the "+
		"percentiles). The switch window runs from the rollout command's start to %s after its end. Nothing is pinned: the new "+
		"version loads and warms on whichever core is free, beside the old one serving and this benchmark's own client.\n\n",
		res.Rate, cfg.Steady, cfg.After, requestTimeout, SwitchGrace)
	row := func(name, window string, p phase) []string {
		return []string{name, window, fmt.Sprint(p.n), fmt.Sprint(p.failed), harness.Ms(p.p50), harness.Ms(p.p99), harness.Ms(p.max),
			harness.Ratio(float64(p.p99), float64(st.steady.p99))}
	}
	rows := [][]string{
		row("steady", fmt.Sprintf("%s before the rollout", cfg.Steady), st.steady),
		row("switch", fmt.Sprintf("the rollout command (%.1f s) + %s", res.Took.Seconds(), SwitchGrace), st.sw),
		row("after", fmt.Sprintf("the %.1f s after", (cfg.After-SwitchGrace).Seconds()), st.after),
		row("all", "", st.all),
	}
	b.WriteString(harness.Table([]string{"phase", "requests that started in", "requests", "failed", "p50 ms", "p99 ms", "max ms", "p99 ÷ steady"}, rows, true) + "\n")
	fmt.Fprintf(&b, "%d of %d requests failed. The switch window's p99 is %.2f× the steady phase's (target ≤ 2×; %s). "+
		"The rollout took %.1f s (`mortredctl rollout` from start to exit: the new version's start, warm-up and the switch). "+
		"Answers by the version that served them (`model.version` in the envelope): %s.\n\n", st.failed, st.total, st.ratio99(), rank99(st.sw.n),
		res.Took.Seconds(), versions(st.versions, res.From))
	if len(st.firstFailures) > 0 {
		b.WriteString("First failures:\n\n")
		for _, f := range st.firstFailures {
			b.WriteString("- " + mdLine(f) + "\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("Command and its output:\n\n```\n" + command + "\n" + output + "\n```\n\nThe model-server file:\n\n```toml\n" + serverFile + "```\n")
	return b.String()
}

// rank99 says which request of a phase of n its p99 is (harness.Pct's
// nearest rank), so a reader can weigh a p99 over few requests.
func rank99(n int) string {
	if n == 0 {
		return "the window held no request"
	}
	k := n - min(max(int(0.99*float64(n)+0.5)-1, 0), n-1)
	which := "slowest"
	switch k {
	case 1:
	case 2:
		which = "second slowest"
	case 3:
		which = "third slowest"
	default:
		which = fmt.Sprintf("%dth slowest", k)
	}
	if n == 1 {
		return "with 1 request in the window, its p99 is that request"
	}
	return fmt.Sprintf("with %d requests in the window, its p99 is their %s", n, which)
}

// versions lists the answers by version, from first.
func versions(v map[string]int, from string) string {
	names := make([]string, 0, len(v))
	for n := range v {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == from) != (names[j] == from) {
			return names[i] == from
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		label := n
		if label == "" {
			label = "(none)"
		}
		parts[i] = fmt.Sprintf("`%s` %d", label, v[n])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// mdLine keeps a message on one line of Markdown.
func mdLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
