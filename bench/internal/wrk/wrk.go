// Package wrk drives Debian's wrk with a Lua script that POSTs a fixed
// body, stops each thread after its share of a request budget (so a run
// is bounded in count as well as time) and prints its summary as JSON.
package wrk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Opts is one wrk run. Zero values take the defaults in their comments.
type Opts struct {
	// URL is the target; only loopback targets are ever passed here.
	URL string
	// Body is POSTed on every request (written to a file the script reads).
	Body []byte
	// Headers are added to every request; Content-Type defaults to JSON.
	Headers map[string]string
	// Threads (default 1) and Conns (default Threads) are wrk's -t and -c.
	Threads, Conns int
	// Duration is wrk's -d (default 5 s).
	Duration time.Duration
	// MaxRequests bounds the run's requests (default 1,000,000); each
	// thread stops after its share.
	MaxRequests int
	// Timeout is wrk's --timeout per request (default 10 s).
	Timeout time.Duration
	// CPUs pins wrk with taskset ("" = no pin).
	CPUs string
	// Name names the script and body files, NAME.lua and NAME.body in
	// the run's directory (default "post"), so commands read the same in
	// every run.
	Name string
}

// Result is what wrk measured.
type Result struct {
	Requests int64
	Duration time.Duration
	// Errors counts socket errors (connect, read, write, timeout);
	// Status counts answers that were not 2xx or 3xx.
	Errors, Status int64
	// FirstBad is the status and the start of the body of one answer
	// that was 4xx or 5xx (one per thread is written; the last is kept),
	// so that a report can say why a path failed.
	FirstBad                 string
	P50, P90, P99, Mean, Max time.Duration
	// BudgetHit is true when the run stopped on MaxRequests before the
	// duration ran out. wrk still reports the full duration then, so RPS
	// is a lower bound.
	BudgetHit bool
	// Command is the exact command line run.
	Command string
}

// RPS is completed requests per second.
func (r Result) RPS() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Duration.Seconds()
}

// Script is the Lua script's template: the body file, header lines and
// the per-thread request budget are filled in.
const Script = `-- written by bench/internal/wrk
local f = assert(io.open(%q, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
%s
local budget = %d
local count = 0
local bad = false
function response(status, headers, body)
  count = count + 1
  if status >= 400 and not bad then
    bad = true
    io.write(string.format("\nWRKBAD %%d %%s\n", status, (string.gsub(string.sub(body or "", 1, 300), "%%c", " "))))
  end
  if count >= budget then wrk.thread:stop() end
end
function done(summary, latency, requests)
  io.write(string.format('\nWRKJSON {"requests":%%d,"duration_us":%%d,"connect":%%d,"read":%%d,"write":%%d,"status":%%d,"timeout":%%d,"p50":%%d,"p90":%%d,"p99":%%d,"mean":%%d,"max":%%d}\n',
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), math.floor(latency.mean), latency.max))
end
`

// Run runs wrk once with o, writing its script and body into dir.
func Run(ctx context.Context, dir string, o Opts) (Result, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return Result{}, fmt.Errorf("wrk not found: install it with `apt-get install -y wrk` (scripts/setup-deb.sh lists it)")
	}
	o = withDefaults(o)
	f, err := os.Create(filepath.Join(dir, o.Name+".lua"))
	if err != nil {
		return Result{}, err
	}
	bodyPath := filepath.Join(dir, o.Name+".body")
	if err := os.WriteFile(bodyPath, o.Body, 0o644); err != nil {
		return Result{}, err
	}
	var hdr strings.Builder
	for k, v := range o.Headers {
		fmt.Fprintf(&hdr, "wrk.headers[%q] = %q\n", k, v)
	}
	perThread := (o.MaxRequests + o.Threads - 1) / o.Threads
	if _, err := fmt.Fprintf(f, Script, bodyPath, hdr.String(), perThread); err != nil {
		return Result{}, err
	}
	f.Close()

	args := []string{"-t", strconv.Itoa(o.Threads), "-c", strconv.Itoa(o.Conns), "-d", dur(o.Duration),
		"--timeout", dur(o.Timeout), "-s", filepath.Base(f.Name()), o.URL}
	bin := "wrk"
	if o.CPUs != "" {
		bin, args = "taskset", append([]string{"-c", o.CPUs, "wrk"}, args...)
	}
	// The wall clock bounds a wrk that does not stop by itself.
	ctx, cancel := context.WithTimeout(ctx, o.Duration+o.Timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	res := Result{Command: strings.Join(append([]string{bin}, args...), " ")}
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("%s: %v: %s", res.Command, err, strings.TrimSpace(errb.String()+out.String()))
	}
	i := bytes.LastIndex(out.Bytes(), []byte("WRKJSON "))
	if i < 0 {
		return res, fmt.Errorf("%s: no summary in wrk's output: %s", res.Command, out.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()[i+len("WRKJSON "):]))
	var raw map[string]int64
	if err := dec.Decode(&raw); err != nil {
		return res, fmt.Errorf("%s: summary: %v", res.Command, err)
	}
	us := func(k string) time.Duration { return time.Duration(raw[k]) * time.Microsecond }
	res.Requests = raw["requests"]
	res.Duration = us("duration_us")
	res.Errors = raw["connect"] + raw["read"] + raw["write"] + raw["timeout"]
	res.Status = raw["status"]
	res.BudgetHit = res.Requests >= int64(perThread*o.Threads)
	res.P50, res.P90, res.P99, res.Mean, res.Max = us("p50"), us("p90"), us("p99"), us("mean"), us("max")
	if j := bytes.LastIndex(out.Bytes(), []byte("\nWRKBAD ")); j >= 0 {
		line, _, _ := bytes.Cut(out.Bytes()[j+len("\nWRKBAD "):], []byte("\n"))
		res.FirstBad = string(line)
	}
	return res, nil
}

func withDefaults(o Opts) Opts {
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.Conns < o.Threads {
		o.Conns = o.Threads
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = 1_000_000
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Name == "" {
		o.Name = "post"
	}
	if o.Headers == nil {
		o.Headers = map[string]string{}
	}
	if _, ok := o.Headers["Content-Type"]; !ok {
		o.Headers["Content-Type"] = "application/json"
	}
	return o
}

// dur renders d for wrk, which takes whole seconds: rounded up, at least 1.
func dur(d time.Duration) string {
	return strconv.Itoa(max(int((d+time.Second-1)/time.Second), 1)) + "s"
}
