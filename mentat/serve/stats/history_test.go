package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// counting is an engine whose totals the test sets before each sample; a
// scrape answers 503 while down.
type counting struct {
	mu                 sync.Mutex
	prompt, gen        float64
	ttftSum, ttftCount float64
	down               bool
}

func (c *counting) set(f func(*counting)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} %g
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} %g
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} %g
vllm:time_to_first_token_seconds_sum{model_name="m"} %g
vllm:time_to_first_token_seconds_count{model_name="m"} %g
`, c.prompt, c.gen, c.ttftCount, c.ttftSum, c.ttftCount)
}

func TestHistorySamplesRatesMeansAndGaps(t *testing.T) {
	eng := &counting{}
	srv := httptest.NewServer(eng)
	defer srv.Close()
	rt, err := routes.NewRoute("m", "g1", srv.URL+"/v1", "vllm")
	if err != nil {
		t.Fatal(err)
	}
	var h routes.Holder
	h.Store(routes.New(time.Now(), map[string]*routes.Route{"m": rt},
		map[string]*routes.Group{"g1": {Name: "g1", Healthy: true, Models: []string{"m"}}}, nil))
	reg := prometheus.NewRegistry()
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mentat_serve_requests_total"}, []string{"model", "code"})
	reg.MustRegister(answers)
	inflight := &registry{}
	st := New(&h, inflight, nil, nil)
	st.scraper.ttl = 0 // every sample scrapes
	hist := st.NewHistory(reg, 2*time.Second, 10*time.Second)

	t0 := time.UnixMilli(1_800_000_000_000)
	sample := func(i int) { hist.Sample(context.Background(), t0.Add(time.Duration(i)*2*time.Second)) }

	eng.set(func(c *counting) { c.prompt, c.gen, c.ttftSum, c.ttftCount = 1000, 100, 1, 10 })
	sample(0)
	id := inflight.add(Request{Model: "m", Group: "g1"})
	eng.set(func(c *counting) { c.prompt, c.gen, c.ttftSum, c.ttftCount = 1400, 140, 3, 20 })
	answers.WithLabelValues("m", "200").Add(6)
	answers.WithLabelValues("m", "503").Add(2)
	answers.WithLabelValues("m", "429").Add(1)
	sample(1)
	inflight.remove(id)
	eng.set(func(c *counting) { c.down = true })
	sample(2)                                                                                             // the engine's scrape fails: its series have a gap
	eng.set(func(c *counting) { c.down, c.prompt, c.gen, c.ttftSum, c.ttftCount = false, 10, 2, 0.5, 1 }) // restarted
	sample(3)                                                                                             // no base after the gap: rates are gaps, gauges are back
	eng.set(func(c *counting) { c.prompt, c.gen, c.ttftSum, c.ttftCount = 30, 6, 0.5, 1 })
	sample(4) // counted from the restart; no request finished: TTFT is a gap
	sample(5) // the window holds 5: sample 0 leaves

	doc := hist.Document(0, nil)
	if len(doc.T) != 5 || doc.T[0] != t0.Add(2*time.Second).UnixMilli() || doc.IntervalS != 2 || doc.WindowS != 10 {
		t.Fatalf("times %v interval %v window %v", doc.T, doc.IntervalS, doc.WindowS)
	}
	if len(doc.Models) != 1 || doc.Models[0].Model != "m" || len(doc.Models[0].Groups) != 1 || doc.Models[0].Groups[0].Group != "g1" {
		t.Fatalf("models %+v", doc.Models)
	}
	nan := math.NaN()
	m, g := doc.Models[0].Series, doc.Models[0].Groups[0].Series
	for name, c := range map[string]struct{ got, want series.Values }{
		"proxied":        {m[FieldProxied], series.Values{1, 0, 0, 0, 0}},
		"running":        {m[FieldRunning], series.Values{3, nan, 3, 3, 3}},
		"kv":             {m[FieldKV], series.Values{0.25, nan, 0.25, 0.25, 0.25}},
		"prompt_tps":     {m[FieldPromptTPS], series.Values{200, nan, nan, 10, 0}},
		"generation_tps": {m[FieldGenTPS], series.Values{20, nan, nan, 2, 0}},
		"ttft_s":         {m[FieldTTFT], series.Values{0.2, nan, nan, nan, nan}},
		"requests_ps":    {m[FieldRequestsPS], series.Values{4.5, 0, 0, 0, 0}},
		"errors_4xx_ps":  {m[Field4xxPS], series.Values{0.5, 0, 0, 0, 0}},
		"errors_5xx_ps":  {m[Field5xxPS], series.Values{1, 0, 0, 0, 0}},
		"group running":  {g[FieldRunning], series.Values{3, nan, 3, 3, 3}},
		"group prompt":   {g[FieldPromptTPS], series.Values{200, nan, nan, 10, 0}},
		"group ttft":     {g[FieldTTFT], series.Values{0.2, nan, nan, nan, nan}},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if _, ok := g[FieldRequestsPS]; ok {
		t.Errorf("the router's answers are per model, yet group g1 has them")
	}
	for _, k := range hist.win.Keys() {
		if isInternal(k.Field) {
			t.Errorf("internal series %v stored", k)
		}
	}

	// The route: since, model filter, bad input.
	rec := httptest.NewRecorder()
	hist.Handler().ServeHTTP(rec, httptest.NewRequest("GET", fmt.Sprintf("/stats/series.json?since=%d", doc.T[3]), nil))
	var inc SeriesDocument
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &inc) != nil || len(inc.T) != 1 || inc.T[0] != doc.T[4] ||
		!inc.Models[0].Series[FieldPromptTPS].Equal(series.Values{0}) {
		t.Errorf("since: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	hist.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/stats/series.json?model=other", nil))
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &inc) != nil || len(inc.Models) != 0 || len(inc.T) != 5 {
		t.Errorf("model filter: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{"since=yesterday", "since=-1"} {
		rec = httptest.NewRecorder()
		hist.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/stats/series.json?"+bad, nil))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d", bad, rec.Code)
		}
	}
	rec = httptest.NewRecorder()
	hist.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/stats/series.json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// BenchmarkSeriesDocument is a page's first read with 300 models and a
// full window: everything (all), and the 20 models a screen shows (screen,
// as the page asks). It reports the body size and the window's values.
func BenchmarkSeriesDocument(b *testing.B) {
	st := New(&routes.Holder{}, nil, nil, nil)
	hist := st.NewHistory(nil, 0, 0)
	fields := []string{FieldProxied, FieldRunning, FieldWaiting, FieldKV, FieldPromptTPS, FieldGenTPS, FieldTTFT, FieldITL}
	t0 := time.Now()
	for i := range hist.win.Cap() {
		values := map[seriesKey]float64{}
		for m := range 300 {
			model := fmt.Sprintf("model-%03d", m)
			for j, f := range fields {
				v := float64(i*7+m*3+j) * 1.37
				values[seriesKey{Model: model, Field: f}] = v
				values[seriesKey{Model: model, Group: "g-" + model, Field: f}] = v
			}
			for _, f := range []string{FieldRequestsPS, Field4xxPS, Field5xxPS} {
				values[seriesKey{Model: model, Field: f}] = float64(i % 5)
			}
		}
		hist.win.Add(t0.Add(time.Duration(i)*2*time.Second), values)
	}
	windowMiB := float64(len(hist.win.Keys())*hist.win.Cap()*8) / (1 << 20)
	for _, c := range []struct {
		name string
		keep func(string) bool
	}{{"all", nil}, {"screen", func(m string) bool { return m < "model-020" }}} {
		b.Run(c.name, func(b *testing.B) {
			var n int
			for b.Loop() {
				body, err := json.Marshal(hist.Document(0, c.keep))
				if err != nil {
					b.Fatal(err)
				}
				n = len(body)
			}
			b.ReportMetric(float64(n)/(1<<20), "body-MiB")
			b.ReportMetric(windowMiB, "window-MiB")
		})
	}
}
