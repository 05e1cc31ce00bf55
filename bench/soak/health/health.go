// Package health samples the soak's long-lived processes from /proc and
// their Prometheus metrics, so a leak (memory, descriptors, sockets,
// threads, goroutines) shows as a trend across faults, and finds the
// processes a run left behind. Processes are restarted under the soak's
// feet, so every reading tolerates a pid that vanished or turned zombie.
package health

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// MetricsTimeout bounds one metrics fetch: a frozen process may accept
// the connection (the kernel does) yet never answer.
const MetricsTimeout = 2 * time.Second

const maxMetricsBytes = 4 << 20

// client ignores proxy settings (the endpoints are local) and keeps no
// idle connections, which would outlive a round and, across restarts,
// point at dead processes.
var client = &http.Client{
	Timeout:   MetricsTimeout,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// Target is one process to watch.
type Target struct {
	Name string
	// PID is asked every round because restarts change it; 0 means not
	// running right now.
	PID func() int
	// MetricsURL, when set, is a Prometheus text endpoint giving
	// go_goroutines; MetricsToken, when set, is sent as a bearer token.
	MetricsURL, MetricsToken string
}

// Read takes one reading of t. It returns false when t is not running
// or is a zombie, whose /proc figures would describe nothing real.
func Read(t Target) (record.Sample, bool) {
	return read(context.Background(), t)
}

func read(ctx context.Context, t Target) (record.Sample, bool) {
	pid := 0
	if t.PID != nil {
		pid = t.PID()
	}
	if pid <= 0 {
		return record.Sample{}, false
	}
	s := record.Sample{At: time.Now(), Proc: t.Name, PID: pid, Goroutines: -1}
	st, ok := status(pid)
	if !ok || st.state == "Z" || st.state == "X" {
		return record.Sample{}, false
	}
	s.RSS, s.RSSAnon, s.Threads = st.rss, st.anon, st.threads
	s.FDs, s.Conns = fds(pid)
	// A stopped process would hold the fetch for the whole timeout and
	// could not answer anyway.
	if t.MetricsURL != "" && st.state != "T" && st.state != "t" {
		if n, err := goroutines(ctx, t.MetricsURL, t.MetricsToken); err == nil {
			s.Goroutines = n
		}
	}
	return s, true
}

type procStatus struct {
	state   string
	rss     int64
	anon    int64
	threads int
}

// status parses /proc/PID/status once, so state, memory and threads
// come from the same instant (harness.RSSOf would read it again).
func status(pid int) (procStatus, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, false
	}
	var st procStatus
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "State":
			st.state = f[0]
		case "VmRSS":
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			st.rss = kb << 10
		case "RssAnon":
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			st.anon = kb << 10
		case "Threads":
			st.threads, _ = strconv.Atoi(f[0])
		}
	}
	return st, st.state != ""
}

// fds counts open descriptors and, among them, sockets; descriptors
// closed while we look are simply not counted.
func fds(pid int) (n, socks int) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range es {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		n++
		if strings.HasPrefix(l, "socket:[") {
			socks++
		}
	}
	return n, socks
}

func goroutines(ctx context.Context, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return 0, err
	}
	mf := mfs["go_goroutines"]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return 0, fmt.Errorf("GET %s: no go_goroutines", url)
	}
	m := mf.GetMetric()[0]
	v := m.GetGauge().GetValue()
	if m.GetGauge() == nil {
		v = m.GetUntyped().GetValue()
	}
	return int(v), nil
}

// Run records a reading of every target each period until ctx ends.
// Each reading runs on its own goroutine so a slow metrics endpoint
// delays only its own target; a target whose previous reading is still
// running is skipped that round, which bounds the goroutines to one per
// target. Run returns once ctx is done and every reading has ended;
// readings cut short by ctx are dropped, not recorded half-done.
func Run(ctx context.Context, rec *record.Recorder, every time.Duration, targets func() []Target) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		busy = map[string]bool{}
	)
	defer wg.Wait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		for _, t := range targets() {
			mu.Lock()
			skip := busy[t.Name]
			busy[t.Name] = true
			mu.Unlock()
			if skip {
				continue
			}
			wg.Go(func() {
				s, ok := read(ctx, t)
				if ok && ctx.Err() == nil {
					rec.Sample(s)
				}
				mu.Lock()
				delete(busy, t.Name)
				mu.Unlock()
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Proc is a process found by Orphans.
type Proc struct {
	PID int
	Cmd string
}

// Orphans returns the live processes whose environment holds marker
// (e.g. "SOAK_RUN=abc123"), except the pids in exclude. The soak marks
// every process it starts and children inherit the mark, so whatever
// still carries it after shutdown was leaked, however it was started.
// Processes that exit or hide their environment while we scan are
// skipped: only listing /proc itself can fail.
func Orphans(marker string, exclude ...int) ([]Proc, error) {
	es, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want := []byte(marker)
	var out []Proc
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || slices.Contains(exclude, pid) {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !hasEntry(env, want) {
			continue
		}
		if st, ok := status(pid); !ok || st.state == "Z" || st.state == "X" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmd = bytes.TrimRight(cmd, "\x00")
		if len(cmd) > 200 {
			cmd = cmd[:200]
		}
		out = append(out, Proc{PID: pid, Cmd: string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))})
	}
	slices.SortFunc(out, func(a, b Proc) int { return a.PID - b.PID })
	return out, nil
}

func hasEntry(env, want []byte) bool {
	for e := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.Equal(e, want) {
			return true
		}
	}
	return false
}
