package stats

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The vLLM metric names the page reads. Where vLLM renamed a metric, the
// current name comes first and the older one is the fallback, so one router
// reads engines of every version in the field.
var (
	nameRunning     = []string{"vllm:num_requests_running"}
	nameWaiting     = []string{"vllm:num_requests_waiting"}
	nameKV          = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	namePrompt      = []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens"}
	nameGeneration  = []string{"vllm:generation_tokens_total", "vllm:generation_tokens"}
	namePreemptions = []string{"vllm:num_preemptions_total", "vllm:num_preemptions"}
	nameSuccess     = []string{"vllm:request_success_total", "vllm:request_success"}
	nameTTFT        = []string{"vllm:time_to_first_token_seconds"}
	nameQueue       = []string{"vllm:request_queue_time_seconds"}
	nameITL         = []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}
)

// Label names. Engines disagree on the finish label's spelling.
const (
	labelModel = "model_name"
)

var labelReason = []string{"finished_reason", "finish_reason"}

// maxMetricsBytes bounds one /metrics answer; a vLLM exposition is tens of
// KiB, so this only stops a misbehaving endpoint from filling memory.
const maxMetricsBytes = 16 << 20

// Families is one parsed exposition, keyed by family name.
type Families map[string]*dto.MetricFamily

// ParseMetrics reads a Prometheus exposition in the format contentType
// names (text when empty or unknown; OpenMetrics and protobuf too).
func ParseMetrics(r io.Reader, contentType string) (Families, error) {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	dec := expfmt.NewDecoder(r, expfmt.ResponseFormat(h))
	fams := Families{}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse metrics: %w", err)
		}
		if prev, ok := fams[mf.GetName()]; ok {
			prev.Metric = append(prev.Metric, mf.Metric...)
			continue
		}
		fams[mf.GetName()] = &mf
	}
}

// Numbers is what one engine reports for one model, summed over the engine
// label. A nil field is a metric the engine does not publish for it.
type Numbers struct {
	Running          *float64
	Waiting          *float64
	KV               *float64 // 0–1, mean over engines
	PromptTokens     *float64
	GenerationTokens *float64
	Preemptions      *float64
	// Finished counts finished requests by reason; nil when the engine
	// publishes no success counter.
	Finished map[string]float64
	// Mean latencies in seconds (histogram _sum/_count); nil when the
	// histogram is missing or has no observations yet.
	TTFT  *float64
	Queue *float64
	ITL   *float64
	// The TTFT and ITL histograms' totals, from which the history takes
	// the mean over each sampling interval; nil like the means.
	TTFTTotals *HistTotals
	ITLTotals  *HistTotals
}

// HistTotals is a histogram's _sum and _count over every matching series.
type HistTotals struct{ Sum, Count float64 }

// Extract computes model's numbers from one engine's exposition. Samples
// labelled with another model_name are left out. When no sample names the
// model at all (an alias or adapter the engine labels under its base name),
// every sample counts: the numbers are then what the engine serving the
// model is doing.
func (f Families) Extract(model string) Numbers {
	match := f.matcher(model)
	var n Numbers
	n.Running = f.sum(nameRunning, match)
	n.Waiting = f.sum(nameWaiting, match)
	n.KV = f.mean(nameKV, match)
	n.PromptTokens = f.sum(namePrompt, match)
	n.GenerationTokens = f.sum(nameGeneration, match)
	n.Preemptions = f.sum(namePreemptions, match)
	n.Finished = f.byReason(nameSuccess, match)
	n.TTFTTotals = f.histTotals(nameTTFT, match)
	n.ITLTotals = f.histTotals(nameITL, match)
	n.TTFT = n.TTFTTotals.mean()
	n.Queue = f.histTotals(nameQueue, match).mean()
	n.ITL = n.ITLTotals.mean()
	return n
}

func (f Families) matcher(model string) func(*dto.Metric) bool {
	named := false
	for _, mf := range f {
		for _, m := range mf.Metric {
			if v, ok := label(m, labelModel); ok && v == model {
				named = true
				break
			}
		}
		if named {
			break
		}
	}
	if !named {
		return func(*dto.Metric) bool { return true }
	}
	return func(m *dto.Metric) bool {
		v, ok := label(m, labelModel)
		return !ok || v == model
	}
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.Label {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

// family returns the first of names the exposition has.
func (f Families) family(names []string) *dto.MetricFamily {
	for _, n := range names {
		if mf, ok := f[n]; ok {
			return mf
		}
	}
	return nil
}

// value reads a scalar sample whatever type the engine declared it as.
func value(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Counter != nil:
		v = m.Counter.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

func (f Families) collect(names []string, match func(*dto.Metric) bool) (sum float64, n int) {
	mf := f.family(names)
	if mf == nil {
		return 0, 0
	}
	for _, m := range mf.Metric {
		if !match(m) {
			continue
		}
		if v, ok := value(m); ok {
			sum += v
			n++
		}
	}
	return sum, n
}

func (f Families) sum(names []string, match func(*dto.Metric) bool) *float64 {
	s, n := f.collect(names, match)
	if n == 0 {
		return nil
	}
	return finite(s)
}

// Total sums every series of the family name (0 when the exposition has
// none): a counter's or gauge's value over all its label sets.
func (f Families) Total(name string) float64 {
	s, _ := f.collect([]string{name}, func(*dto.Metric) bool { return true })
	return s
}

// finite drops sums that overflowed: JSON has no Inf or NaN.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// mean is for fractions such as KV usage, where summing data-parallel
// engines would read above 100%.
func (f Families) mean(names []string, match func(*dto.Metric) bool) *float64 {
	s, n := f.collect(names, match)
	if n == 0 {
		return nil
	}
	return finite(s / float64(n))
}

func (f Families) byReason(names []string, match func(*dto.Metric) bool) map[string]float64 {
	mf := f.family(names)
	if mf == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range mf.Metric {
		if !match(m) {
			continue
		}
		v, ok := value(m)
		if !ok {
			continue
		}
		reason := "unknown"
		for _, l := range labelReason {
			if r, ok := label(m, l); ok {
				reason = r
				break
			}
		}
		out[reason] += v
	}
	for r, v := range out {
		if math.IsInf(v, 0) {
			delete(out, r)
		}
	}
	return out
}

// histTotals sums _sum and _count over every matching series; nil when
// the histogram is missing. An engine that exposes the histogram untyped
// leaves it as separate _sum and _count families; those are read too.
func (f Families) histTotals(names []string, match func(*dto.Metric) bool) *HistTotals {
	var sum, count float64
	found := false
	for _, name := range names {
		if mf, ok := f[name]; ok && mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, m := range mf.Metric {
				if m.Histogram == nil || !match(m) {
					continue
				}
				sum += m.Histogram.GetSampleSum()
				count += float64(m.Histogram.GetSampleCount())
				found = true
			}
		} else {
			s, ns := f.collect([]string{name + "_sum"}, match)
			c, nc := f.collect([]string{name + "_count"}, match)
			if ns > 0 && nc > 0 {
				sum, count, found = s, c, true
			}
		}
		if found {
			break
		}
	}
	if !found || math.IsInf(sum, 0) || math.IsNaN(sum) {
		return nil
	}
	return &HistTotals{Sum: sum, Count: count}
}

// mean is _sum/_count: nil without a histogram or observations.
func (h *HistTotals) mean() *float64 {
	if h == nil || h.Count <= 0 {
		return nil
	}
	return finite(h.Sum / h.Count)
}
