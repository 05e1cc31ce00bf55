// Package flow measures the router's flow control (FLOW_CONTROL) against
// the same router without it, side by side in one run, on two enginesim
// replicas small enough that the offered load saturates them: an
// interactive tenant's time to first token while a batch tenant floods,
// the tokens the engines serve, fairness between ten tenants that all ask
// for more than their share, and a critical band's time to first token
// under a sheddable flood. Every request is counted: served, refused with
// 429 (flow control's answer), or failed (5xx, a timeout, a cut stream).
package flow

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/cluster"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// Config is one run's setup.
type Config struct {
	BinDir, WorkDir string
	ServerCPUs      string
	// Duration is each load's length (default 8 s).
	Duration time.Duration
}

const (
	model = "bench-flow"
	// Each replica generates 16 requests at once; a request's first
	// token comes 100 ms after it is admitted (a few hundred prompt
	// tokens' prefill), the rest 10 ms apart. Answers are 4 to 28 tokens
	// long, 16 on average, so a request takes about 0.25 s and a replica
	// serves about 64 a second. Answers of one length would end in
	// lockstep: every slot of an engine frees at once, then none for a
	// whole request's time, and a request that finds the engines full
	// waits up to that long for any slot, however it is scheduled.
	maxSeqs   = 24
	minTokens = 4
	maxTokens = 28
	// requestTimeout bounds one request; waiting past it is a failure.
	requestTimeout = 60 * time.Second
)

var engineFlags = []string{"--max-num-seqs", strconv.Itoa(maxSeqs), "--ttft", "100ms", "--itl", "10ms", "--jitter", "0",
	"--prefill-per-token", "0", "--decode-knee", "0"}

// flowEnv is the flow-controlled router's configuration: bounded waits
// short enough that a flood's queue drains within the run.
var flowEnv = []string{"FLOW_CONTROL=on", "FLOW_WAIT_S_CRITICAL=20", "FLOW_WAIT_S_STANDARD=10", "FLOW_WAIT_S_SHEDDABLE=5"}

// Outcome counts one load's requests by how they ended.
type Outcome struct {
	Sent, Served, Refused, Failed int
	// Failures are up to three examples of a failure.
	Failures []string
}

// Load is one tenant's traffic: a rate and headers.
type Load struct {
	Tenant, Priority string
	Rate             float64
}

// Measured is what one run of loads gave, per tenant.
type Measured struct {
	TTFT map[string][]time.Duration // served requests' times to first frame
	// Tokens are the frames each tenant got within the load's duration.
	Tokens  map[string]int
	Outcome map[string]*Outcome
	// Elapsed is from the first request to the last answer.
	Elapsed time.Duration
}

// Result is the whole section.
type Result struct {
	Markdown string
	// Capacity is the requests per second the two replicas serve,
	// measured.
	Capacity float64
	// Interactive p90 TTFT alone, and with the batch flood without and
	// with flow control; tokens served by both tenants in the flood.
	InteractiveAlone, InteractiveOff, InteractiveOn time.Duration
	TokensOff, TokensOn                             int
	// Jain's index of the ten tenants' served tokens, off and on.
	JainOff, JainOn float64
	// Critical p99 TTFT alone and under a sheddable flood (flow on).
	CriticalAlone, CriticalFlood time.Duration
	// Bad is every 5xx, timeout or cut stream over all flow-on loads.
	Bad, BadOff int
	Refused     int
}

type bench struct {
	off, on string // router URLs
	client  *http.Client
	d       time.Duration
	// runs numbers the loads, so that no prompt is sent twice: a prompt
	// a router saw in an earlier run would go by prefix affinity to the
	// replica that served it, not by load as a new one does.
	runs int
}

// Run starts the cluster and two routers over it and measures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 8 * time.Second
	}
	engines := []cluster.Engine{{Group: "replica-0", Model: model, Flags: engineFlags}, {Group: "replica-1", Model: model, Flags: engineFlags}}
	c, err := cluster.Start(ctx, cluster.Opts{BinDir: cfg.BinDir, LogDir: cfg.WorkDir, CPUs: cfg.ServerCPUs, Engines: engines,
		RouterEnv: []string{"ROUTING_SCRAPE_S=0.25"}})
	if err != nil {
		return Result{}, err
	}
	defer c.Stop()
	_, onURL, err := c.StartRouter(ctx, "mentatd-serve-flow", append([]string{"ROUTING_SCRAPE_S=0.25"}, flowEnv...), nil)
	if err != nil {
		return Result{}, err
	}
	b := &bench{off: c.RouterURL, on: onURL, d: cfg.Duration,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}}
	defer b.client.CloseIdleConnections()

	var res Result
	var md strings.Builder
	// Capacity: a closed loop of 4 requests per engine slot (enough to
	// keep every slot busy) without flow control.
	capacity, err := b.capacity(ctx)
	if err != nil {
		return res, err
	}
	res.Capacity = capacity
	fmt.Fprintf(os.Stderr, "flow: capacity %.1f req/s\n", capacity)
	// Flow control learns the engines' capacity when they first queue:
	// one burst does it.
	if _, err := b.run(ctx, b.on, []Load{{Tenant: "warm", Rate: 2 * capacity}}, 2*time.Second); err != nil {
		return res, err
	}

	// 1. An interactive tenant at 0.4× capacity, alone and beside a batch
	// tenant flooding at 3×.
	interactive := Load{Tenant: "interactive", Rate: 0.4 * capacity}
	batch := Load{Tenant: "batch", Rate: 3 * capacity}
	alone, err := b.run(ctx, b.off, []Load{interactive}, b.d)
	if err != nil {
		return res, err
	}
	off, err := b.run(ctx, b.off, []Load{interactive, batch}, b.d)
	if err != nil {
		return res, err
	}
	on, err := b.run(ctx, b.on, []Load{interactive, batch}, b.d)
	if err != nil {
		return res, err
	}
	res.InteractiveAlone, res.InteractiveOff, res.InteractiveOn = p(alone, "interactive", 0.9), p(off, "interactive", 0.9), p(on, "interactive", 0.9)
	res.TokensOff, res.TokensOn = off.Tokens["interactive"]+off.Tokens["batch"], on.Tokens["interactive"]+on.Tokens["batch"]
	fmt.Fprintf(&md, "### Interactive tenant beside a batch flood\n\nTenant `interactive` at %.1f req/s (0.4× the measured capacity of %.1f req/s), "+
		"tenant `batch` at %.1f req/s (3×), both standard band, %s of Poisson arrivals; each request streams %d to %d tokens (uniform). "+
		"Tokens served are frames received within the load's %s, by both tenants.\n\n", interactive.Rate, capacity, batch.Rate, b.d, minTokens, maxTokens, b.d)
	md.WriteString(harness.Table([]string{"run", "interactive p50 TTFT s", "interactive p90 TTFT s", "interactive p90 ÷ alone", "tokens served /s",
		"interactive served/sent", "batch served/refused/failed of sent"}, [][]string{
		row("interactive alone, flow control off", alone, "interactive", "", res.InteractiveAlone, b.d),
		row("with the flood, flow control off", off, "interactive", "batch", res.InteractiveAlone, b.d),
		row("with the flood, flow control on", on, "interactive", "batch", res.InteractiveAlone, b.d),
	}, true))

	// 2. Ten tenants, all above their share of a 2.55× load.
	var ten []Load
	for i := range 10 {
		ten = append(ten, Load{Tenant: fmt.Sprintf("t%d", i), Rate: capacity / 10 * (1.2 + 0.3*float64(i))})
	}
	fairOff, err := b.run(ctx, b.off, ten, b.d)
	if err != nil {
		return res, err
	}
	fairOn, err := b.run(ctx, b.on, ten, b.d)
	if err != nil {
		return res, err
	}
	res.JainOff, res.JainOn = jain(fairOff, ten), jain(fairOn, ten)
	fmt.Fprintf(&md, "\n### Ten tenants above their share\n\nTen standard-band tenants offering %.1f to %.1f req/s (1.2× to 3.9× a tenth of the capacity; 2.55× in all). "+
		"Jain's fairness index of the tokens each was served within the load's %s (1 is equal shares):\n\n", ten[0].Rate, ten[9].Rate, b.d)
	var trows [][]string
	for _, l := range ten {
		trows = append(trows, []string{l.Tenant, fmt.Sprintf("%.1f", l.Rate), strconv.Itoa(fairOff.Tokens[l.Tenant]), strconv.Itoa(fairOn.Tokens[l.Tenant])})
	}
	trows = append(trows, []string{"Jain's index", "", fmt.Sprintf("%.3f", res.JainOff), fmt.Sprintf("%.3f", res.JainOn)})
	md.WriteString(harness.Table([]string{"tenant", "offered req/s", "tokens, flow control off", "tokens, flow control on"}, trows, true))

	// 3. A critical tenant at 0.3×, alone and under a sheddable flood at 3×.
	crit := Load{Tenant: "ops", Priority: "critical", Rate: 0.3 * capacity}
	shed := Load{Tenant: "bulk", Priority: "sheddable", Rate: 3 * capacity}
	critAlone, err := b.run(ctx, b.on, []Load{crit}, b.d)
	if err != nil {
		return res, err
	}
	critFlood, err := b.run(ctx, b.on, []Load{crit, shed}, b.d)
	if err != nil {
		return res, err
	}
	res.CriticalAlone, res.CriticalFlood = p(critAlone, "ops", 0.99), p(critFlood, "ops", 0.99)
	fmt.Fprintf(&md, "\n### Critical band under a sheddable flood (flow control on)\n\nTenant `ops` (X-Priority: critical) at %.1f req/s, tenant `bulk` (sheddable) at %.1f req/s.\n\n", crit.Rate, shed.Rate)
	md.WriteString(harness.Table([]string{"run", "critical p50 TTFT s", "critical p99 TTFT s", "p99 ÷ alone", "critical served/sent", "sheddable served/refused/failed of sent"}, [][]string{
		critRow("critical alone", critAlone, res.CriticalAlone),
		critRow("critical with the sheddable flood", critFlood, res.CriticalAlone),
	}, true))

	for _, m := range []Measured{on, fairOn, critAlone, critFlood} {
		for _, o := range m.Outcome {
			res.Bad += o.Failed
			res.Refused += o.Refused
		}
	}
	for _, m := range []Measured{alone, off, fairOff} {
		for _, o := range m.Outcome {
			res.BadOff += o.Failed
		}
	}
	fmt.Fprintf(&md, "\nWith flow control on, %d requests were refused with 429 and Retry-After (every one within its band's wait: %s), and %d failed "+
		"(5xx, a timeout of %s, or a stream cut before [DONE]); without it, %d failed.\n", res.Refused, strings.Join(flowEnv[1:], ", "), res.Bad, requestTimeout, res.BadOff)
	var ex []string
	for _, m := range []Measured{on, fairOn, critAlone, critFlood} {
		for _, o := range m.Outcome {
			ex = append(ex, o.Failures...)
		}
	}
	if len(ex) > 0 {
		fmt.Fprintf(&md, "Failures, for example: %s.\n", strings.Join(ex[:min(3, len(ex))], "; "))
	}
	fmt.Fprintf(&md, "\nEngines: two enginesim replicas (`%s`), one `mentatd daemon`, agents; two routers over them, one without flow control and one with `%s`, "+
		"both `ROUTING_SCRAPE_S=0.25`, pinned with the engines. Load: this benchmark's own Go client, streaming, one connection per request in flight. "+
		"What limits the figures: the engines are simulated (their timing is exact, their capacity fixed), and the load client shares the machine.\n",
		strings.Join(engineFlags, " "), strings.Join(flowEnv, " "))
	res.Markdown = md.String()
	return res, nil
}

func p(m Measured, tenant string, q float64) time.Duration {
	t := slices.Clone(m.TTFT[tenant])
	slices.Sort(t)
	// A request that was not served counts as the slowest.
	if o := m.Outcome[tenant]; o != nil {
		for range o.Sent - o.Served {
			t = append(t, requestTimeout)
		}
	}
	return harness.Pct(t, q)
}

func jain(m Measured, loads []Load) float64 {
	var sum, sq float64
	for _, l := range loads {
		x := float64(m.Tokens[l.Tenant])
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(loads)) * sq)
}

func row(name string, m Measured, tenant, other string, alone time.Duration, d time.Duration) []string {
	o := m.Outcome[tenant]
	tokens := 0
	for _, n := range m.Tokens {
		tokens += n
	}
	otherText := "–"
	if other != "" {
		x := m.Outcome[other]
		otherText = fmt.Sprintf("%d/%d/%d of %d", x.Served, x.Refused, x.Failed, x.Sent)
	}
	p90 := p(m, tenant, 0.9)
	return []string{name, secsText(p(m, tenant, 0.5)), secsText(p90), fmt.Sprintf("%.2f×", p90.Seconds()/alone.Seconds()),
		fmt.Sprintf("%.0f", float64(tokens)/d.Seconds()), fmt.Sprintf("%d/%d", o.Served, o.Sent), otherText}
}

func critRow(name string, m Measured, alone time.Duration) []string {
	o := m.Outcome["ops"]
	otherText := "–"
	if x := m.Outcome["bulk"]; x != nil {
		otherText = fmt.Sprintf("%d/%d/%d of %d", x.Served, x.Refused, x.Failed, x.Sent)
	}
	p99 := p(m, "ops", 0.99)
	return []string{name, secsText(p(m, "ops", 0.5)), secsText(p99), fmt.Sprintf("%.2f×", p99.Seconds()/alone.Seconds()), fmt.Sprintf("%d/%d", o.Served, o.Sent), otherText}
}

func secsText(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// capacity measures the requests per second the replicas serve with
// every slot busy (a closed loop of 2 × maxSeqs × 2 clients).
func (b *bench) capacity(ctx context.Context) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	var mu sync.Mutex
	served := 0
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 4 * maxSeqs {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i+1), 7))
			for j := 0; ctx.Err() == nil; j++ {
				if _, _, err := b.stream(ctx, b.off, Load{Tenant: "capacity"}, fmt.Sprintf("capacity %d %d", i, j), answerTokens(r), time.Time{}); err == nil {
					mu.Lock()
					served++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if served == 0 {
		return 0, fmt.Errorf("no request was served while measuring capacity")
	}
	return float64(served) / time.Since(start).Seconds(), nil
}

// answerTokens draws an answer's length, uniform over minTokens to
// maxTokens.
func answerTokens(r *rand.Rand) int { return minTokens + r.IntN(maxTokens-minTokens+1) }

// run sends loads to url for d (Poisson arrivals, a fixed seed per
// tenant) and waits for every answer.
func (b *bench) run(ctx context.Context, url string, loads []Load, d time.Duration) (Measured, error) {
	m := Measured{TTFT: map[string][]time.Duration{}, Tokens: map[string]int{}, Outcome: map[string]*Outcome{}}
	b.runs++
	runN := b.runs
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for li, l := range loads {
		o := &Outcome{}
		m.Outcome[l.Tenant] = o
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(li+1), uint64(l.Rate*1000)))
			at := time.Duration(0)
			for i := 0; ; i++ {
				at += time.Duration(r.ExpFloat64() / l.Rate * float64(time.Second))
				if at >= d {
					return
				}
				if w := time.Until(start.Add(at)); w > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(w):
					}
				}
				mu.Lock()
				o.Sent++
				mu.Unlock()
				tokens := answerTokens(r)
				wg.Go(func() {
					ttft, frames, err := b.stream(ctx, url, l, fmt.Sprintf("run %d, %s request %d", runN, l.Tenant, i), tokens, end)
					mu.Lock()
					defer mu.Unlock()
					m.Tokens[l.Tenant] += frames
					switch {
					case err == nil:
						o.Served++
						m.TTFT[l.Tenant] = append(m.TTFT[l.Tenant], ttft)
					case err == errRefused:
						o.Refused++
					default:
						o.Failed++
						if len(o.Failures) < 3 {
							o.Failures = append(o.Failures, err.Error())
						}
					}
				})
			}
		})
	}
	wg.Wait()
	m.Elapsed = time.Since(start)
	return m, ctx.Err()
}

var errRefused = fmt.Errorf("429")

// stream sends one streamed request for tenant l and returns its time to
// first frame and the frames that arrived before end (all of them for a
// zero end). A 429 is errRefused; anything but a stream that ends with
// [DONE] is a failure.
func (b *bench) stream(ctx context.Context, url string, l Load, content string, tokens int, end time.Time) (time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"ignore_eos":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, model, tokens, content)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", l.Tenant)
	if l.Priority != "" {
		req.Header.Set("X-Priority", l.Priority)
	}
	sent := time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
		io.Copy(io.Discard, resp.Body)
		return 0, 0, errRefused
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	var ttft time.Duration
	frames := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if line == "data: [DONE]" {
			return ttft, frames, nil
		}
		if ttft == 0 {
			ttft = time.Since(sent)
		}
		if end.IsZero() || time.Now().Before(end) {
			frames++
		}
	}
	return 0, frames, fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}
