package mortredhosts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/fe64bb06/frontdoor/bench/internal/compare"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
	"github.com/fe64bb06/frontdoor/internal/testnet"
)

// HostsResult is part 3: the edge in front of two hosts against one.
type HostsResult struct {
	// NotMeasured says why the part did not run ("" when it did).
	NotMeasured string
	// Ratio is the two hosts' req/s over the one host's, through the
	// same kind of edge, at Conns.
	Ratio          float64
	OneRPS, TwoRPS float64
	// Share is the first host's part of the requests the two hosts
	// answered (from the gateways' request counters); 0.5 is an even
	// split.
	Share float64
	Conns int
}

// Path names of part 3.
const (
	pathOne = "edge → 1 host"
	pathTwo = "edge → 2 hosts"
)

// notRoot is part 3's verdict without the privilege namespaces need.
const notRoot = "needs root for network namespaces"

// runHosts puts two hosts (network namespaces on one LAN, each with its
// own supervisor, gateway and PPOCR_CLS) behind Nginx from init-edge
// --gateways, and measures the edge to one of them and to both.
// Everything it made is removed when it returns, failed or not.
func runHosts(ctx context.Context, cfg Config, dir string) (res HostsResult, md string, err error) {
	res.Conns = cfg.HostConns
	lib, _, err := findORT(cfg.Root)
	if err != nil {
		return res, "", fmt.Errorf("PPOCR_CLS needs ONNX Runtime and the PP-OCR models (make setup-models): %w", err)
	}
	lt := &testnet.Adapter{}
	// Registered first, so it runs last: after every process in the
	// namespaces has stopped.
	defer func() {
		if cerr := lt.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the network namespaces: %w", cerr))
		}
	}()
	var hosts [2]*testnet.Host
	if err := lt.Do(func() {
		lan := testnet.NewLAN(lt, cfg.LANOctet)
		hosts[0], hosts[1] = lan.AddHost(), lan.AddHost()
	}); err != nil {
		var skip *testnet.SkipError
		if errors.As(err, &skip) {
			res.NotMeasured = notRoot
			return res, fmt.Sprintf("**Not measured: %s** (%s).\n", notRoot, mdLine(skip.Msg)), nil
		}
		return res, "", fmt.Errorf("the hosts' network: %w", err)
	}
	ids := []string{"h1", "h2"}
	peers := map[string]string{}
	for i, h := range hosts {
		peers[ids[i]] = h.Addr + ":8080"
	}
	sups := make([]*supervisor, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each namespace has every port free: the manual's defaults,
			// the model on its own loopback.
			p, err := writePlane(filepath.Join(dir, ids[i]), h.Addr, 8787, 8080, map[string]any{"host_id": ids[i], "peers": peers},
				[]model{clsModel(cfg.Root, 9002, nil)})
			if err != nil {
				errs[i] = err
				return
			}
			sups[i], errs[i] = startSupervisor(ctx, dir, "mortred-supervisor-"+ids[i], cfg.BinDir, h.Command(), p,
				childEnv("MORTRED_ORT_LIB="+lib), "PPOCR_CLS")
		}()
	}
	wg.Wait()
	for _, s := range sups {
		if s != nil {
			defer s.stop()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, "", err
	}
	var edges [2]*edge
	for i, gws := range []string{peers["h1"], peers["h1"] + "," + peers["h2"]} {
		port, err := harness.FreePort()
		if err != nil {
			return res, "", err
		}
		name := fmt.Sprintf("edge-%dhost", i+1)
		e, err := startEdge(ctx, dir, "nginx-"+name, cfg.BinDir, filepath.Join(dir, name), "", port, "--gateways", gws)
		if err != nil {
			return res, "", fmt.Errorf("the edge to %s: %w", gws, err)
		}
		defer e.stop()
		edges[i] = e
	}

	const uri = "/v1/models/PPOCR_CLS/infer"
	body := lightEnvelope()
	// Both edges answer; the one of two hosts reaches both.
	for i, e := range edges {
		seen := map[string]int{}
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					r, err := want200(ctx, e.client, "POST", e.url(uri), apiToken, body)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						seen[r.header.Get("X-Mortred-Host")]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return res, "", fmt.Errorf("through the edge to %d host(s): %w", i+1, err)
		}
		if len(seen) != i+1 {
			return res, "", fmt.Errorf("through the edge to %d host(s), answers by host %v", i+1, seen)
		}
	}
	var procs [2][]compare.Proc
	for i, s := range sups {
		for _, id := range []string{"gateway", "PPOCR_CLS"} {
			st, err := s.status(ctx, id)
			if err != nil {
				return res, "", err
			}
			label := ids[i] + " model server"
			if id == "gateway" {
				label = ids[i] + " gateway"
			}
			procs[i] = append(procs[i], compare.Proc{Label: label, PID: st.PID})
		}
	}
	auth := map[string]string{"Authorization": "Bearer " + apiToken}
	paths := map[string]compare.Path{
		pathOne: {Name: pathOne, URL: edges[0].url(uri), Headers: auth,
			Procs: append([]compare.Proc{{Label: "nginx", PID: edges[0].worker}}, procs[0]...)},
		pathTwo: {Name: pathTwo, URL: edges[1].url(uri), Headers: auth,
			Procs: append(append([]compare.Proc{{Label: "nginx", PID: edges[1].worker}}, procs[0]...), procs[1]...)},
	}
	names := []string{pathOne, pathTwo}
	got := map[string][]compare.Measured{}
	served := map[string][2]float64{}
	var commands []string
	for round := range cfg.Rounds {
		for _, n := range names {
			before, err := counts(ctx, peers, ids)
			if err != nil {
				return res, "", err
			}
			m, err := compare.Run(ctx, dir, paths[n], wrk.Opts{Body: body, Conns: cfg.HostConns, Duration: cfg.Duration,
				MaxRequests: 1_000_000, Name: "hosts-" + fileName(n)})
			if err != nil {
				return res, "", err
			}
			after, err := counts(ctx, peers, ids)
			if err != nil {
				return res, "", err
			}
			s := served[n]
			for i := range s {
				s[i] += after[i] - before[i]
			}
			served[n] = s
			got[n] = append(got[n], m)
			if round == 0 {
				commands = append(commands, fmt.Sprintf("%s   # %s", m.Command, n))
			}
		}
	}
	aggs := map[string]compare.Agg{}
	for _, n := range names {
		aggs[n] = compare.Aggregate(got[n])
	}
	res.OneRPS, res.TwoRPS = aggs[pathOne].RPS, aggs[pathTwo].RPS
	res.Ratio = ratio(res.TwoRPS, res.OneRPS)
	two := served[pathTwo]
	res.Share = ratio(two[0], two[0]+two[1])
	return res, hostsMarkdown(cfg, res, aggs, names, served, hosts, edges, commands), nil
}

// hostsMarkdown is part 3's text.
func hostsMarkdown(cfg Config, res HostsResult, aggs map[string]compare.Agg, names []string, served map[string][2]float64,
	hosts [2]*testnet.Host, edges [2]*edge, commands []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Two hosts, each a network namespace on one bridged LAN (internal/testnet: %s and %s, the bench in the root namespace), "+
		"each with its own `mortred-supervisor`, gateway (`host_id` h1/h2, `peers` listing both) and PPOCR_CLS (real ONNX Runtime, "+
		"`worker_nums = 1`, `intra_op_threads = 1`). Nginx from `mortredctl init-edge --mode lan --gateways …` (TLS; least_conn, passive "+
		"health) in the root namespace, once with h1's gateway alone and once with both; wrk speaks HTTPS to it, %d connections, "+
		"`POST /v1/models/PPOCR_CLS/infer` with one 8×8 light gray PNG, closed loop. %d round(s) of %s per path, interleaved; medians shown. "+
		"Nothing is pinned. **Both hosts share this machine's %s**, with Nginx and wrk: the second host brings a second model "+
		"worker but no CPU of its own, so the ratio shows what the edge does with two hosts on the same CPUs (its overhead and its "+
		"balance), not what a second machine would add.\n\n",
		hosts[0].Addr, hosts[1].Addr, cfg.HostConns, cfg.Rounds, cfg.Duration, cpus())
	b.WriteString(compare.Table(names, aggs, []string{"nginx", "h1 gateway", "h1 model server", "h2 gateway", "h2 model server"}) + "\n")
	two := served[pathTwo]
	fmt.Fprintf(&b, "Two hosts reach %.2f× the requests per second of one. Through the edge to both, h1 answered %s and h2 %s of the "+
		"requests (the gateways' `mortred_gateway_requests_total`, over all rounds). %s\n\n",
		res.Ratio, pct(two[0], two[0]+two[1]), pct(two[1], two[0]+two[1]), hostsLimit(aggs[pathOne], aggs[pathTwo]))
	b.WriteString(compare.CPUNote + "\nCommands:\n\n```\n")
	for _, e := range edges {
		b.WriteString(e.init + "\n")
	}
	b.WriteString(strings.Join(commands, "\n") + "\n```\n\nThe two-host edge's server blocks (`mortred-edge.conf`, as written):\n\n```nginx\n" +
		edges[1].site + "```\n")
	return b.String()
}

// hostsLimit says, from the CPU each process used, what held each path:
// the cores the model servers and everything measured kept busy.
func hostsLimit(one, two compare.Agg) string {
	cores := func(a compare.Agg, labels ...string) float64 {
		var us float64
		for _, l := range labels {
			us += a.CPUus[l]
		}
		return us * a.RPS / 1e6
	}
	models := []string{"h1 model server", "h2 model server"}
	all := append([]string{"nginx", "h1 gateway", "h2 gateway"}, models...)
	if cores(one, all...) == 0 || cores(two, all...) == 0 {
		return ""
	}
	return fmt.Sprintf("With one host its model server kept %.2f cores busy (one worker of one thread can use one) and Nginx, "+
		"its gateway and it together %.2f; with two, the model servers kept %.2f cores busy and everything measured %.2f, beside wrk, "+
		"of the machine's %s.", cores(one, models...), cores(one, all...), cores(two, models...), cores(two, all...), cpus())
}

// counts is each host's gateway's count of PPOCR_CLS requests answered.
func counts(ctx context.Context, peers map[string]string, ids []string) ([2]float64, error) {
	var out [2]float64
	for i, id := range ids[:2] {
		r, err := want200(ctx, client, "GET", "http://"+peers[id]+"/metrics", metricsToken, nil)
		if err != nil {
			return out, err
		}
		out[i] = requestsOf(string(r.body), "PPOCR_CLS")
	}
	return out, nil
}

// requestsOf sums mortred_gateway_requests_total over every status of
// model in a Prometheus text exposition.
func requestsOf(text, model string) float64 {
	var n float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := sc.Text()
		rest, ok := strings.CutPrefix(l, "mortred_gateway_requests_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || !hasLabel(labels, "model", model) {
			continue
		}
		f := strings.Fields(value)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			n += v
		}
	}
	return n
}

// hasLabel reports whether a label list (`a="x",b="y"`) has name="value".
func hasLabel(labels, name, value string) bool {
	for _, kv := range strings.Split(labels, ",") {
		if kv == name+"="+strconv.Quote(value) {
			return true
		}
	}
	return false
}

// pct formats a/b as a percentage, "–" when b is 0.
func pct(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

// cpus names the CPUs the hosts share.
func cpus() string {
	if n := runtime.NumCPU(); n != 1 {
		return fmt.Sprintf("%d CPUs", n)
	}
	return "one CPU"
}
