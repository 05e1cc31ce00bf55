package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
	"github.com/fe64bb06/frontdoor/mentat/serve/ui"
)

const exposition = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="glm53"} 2.0
vllm:num_requests_running{engine="1",model_name="glm53"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="glm53"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="glm53"} 0.5
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="glm53"} 4.5476058e+07
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="glm53"} 210549.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="glm53"} 0.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="glm53"} 1170.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="glm53"} 3.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="glm53"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="glm53"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="glm53"} 84.0
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="glm53"} 100.0
vllm:request_queue_time_seconds_count{engine="0",model_name="glm53"} 100.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="glm53"} 827.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="glm53"} 1000.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="glm53"} 1000.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="glm53"} 31.0
`

const whyNot = "endpoint probe failed: http://10.0.0.9:8000/v1: dial tcp 10.0.0.9:8000: connection refused (agent reports: bound to 10.0.0.1 only)"

// carrying is a fake of the proxy's in-flight table.
type carrying struct {
	mu   sync.Mutex
	reqs []stats.Request
}

func (c *carrying) Requests() []stats.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]stats.Request(nil), c.reqs...)
}

func (c *carrying) Proxied(model, group string) int {
	n := 0
	for _, r := range c.Requests() {
		if r.Model == model && r.Group == group {
			n++
		}
	}
	return n
}

func (c *carrying) drop(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.reqs {
		if r.ID == id {
			c.reqs = append(c.reqs[:i], c.reqs[i+1:]...)
			return
		}
	}
}

// router stands in for mentatd-serve's HTTP surface that the page touches:
// / and /stats.json over one routable model and one failing group.
func router(t *testing.T, inflight stats.Inflight, k stats.Keys, configure ...func(*stats.Stats)) (*httptest.Server, *routes.Holder) {
	t.Helper()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, exposition)
	}))
	t.Cleanup(engine.Close)
	rt, err := routes.NewRoute("glm53", "glm53", engine.URL+"/v1", "vllm")
	if err != nil {
		t.Fatal(err)
	}
	h := &routes.Holder{}
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{"glm53": rt},
		map[string]*routes.Group{
			"glm53": {Name: "glm53", Healthy: true, Provider: "vllm", OpenAI: engine.URL + "/v1", Models: []string{"glm53"}},
			"qwen":  {Name: "qwen", Healthy: false, Provider: "vllm", WhyNot: whyNot, Models: []string{"qwen3"}},
		}, nil))
	st := stats.New(h, inflight, nil, nil)
	for _, c := range configure {
		c(st)
	}
	hist := st.NewHistory(nil, 0, 0)
	for i := range 3 {
		hist.Sample(context.Background(), time.Now().Add(time.Duration(i-3)*2*time.Second))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /stats/series.json", hist.Handler())
	mux.Handle("GET /{$}", ui.Handler(func() any { return map[string]any{"uptime_s": 1} }))
	mux.Handle("GET /stats.json", st.Handler())
	if k != nil {
		st.SetKeys(k)
		mux.Handle("GET /stats/keys/series.json", stats.KeysSeriesHandler(k))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, h
}

func TestStatusPageInBrowser(t *testing.T) {
	now := time.Now()
	inflight := &carrying{reqs: []stats.Request{
		{ID: 41, Model: "glm53", Group: "glm53", Started: now.Add(-12 * time.Second), BodyBytes: 5120, Stream: true,
			FirstByte: now.Add(-11 * time.Second), OutBytes: 20480},
		{ID: 42, Model: "glm53", Group: "glm53", Started: now.Add(-3 * time.Second), BodyBytes: 1234567},
	}}
	srv, holder := router(t, inflight, nil)

	br := testbrowser.New(t, 1400, 900)
	bctx := br.Ctx
	poll := br.Until
	eval := br.Eval
	screenshot := func(name string) { br.Screenshot(name) }

	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	poll("the model rows", `document.querySelectorAll("tr.model").length === 2`)

	cells := func(sel string) string {
		var s string
		eval(`Array.from(document.querySelectorAll(`+"`"+sel+"`"+`)).map(td => td.textContent.trim()).join(" | ")`, &s)
		return s
	}
	good := cells(`tr.model[data-model="glm53"] > td`)
	for _, want := range []string{"glm53", "glm53 (vllm)", "| 2 |", "| 3 |", "50%", "45,476,058", "210,549", "length 3", "stop 1,170", "840 ms", "8,270 ms", "31 ms"} {
		if !strings.Contains(" "+good+" ", want) {
			t.Errorf("glm53 row %q lacks %q", good, want)
		}
	}
	var cls string
	eval(`document.querySelector('tr.model[data-group="qwen"]').className`, &cls)
	if !strings.Contains(cls, "down") {
		t.Errorf("failing row class %q, want down", cls)
	}
	bad := cells(`tr.model[data-group="qwen"] > td`)
	if !strings.Contains(bad, whyNot) || !strings.HasPrefix(bad, "qwen3 | qwen (vllm) | 0 | ") {
		t.Errorf("failing row %q lacks its reason", bad)
	}
	var n float64
	eval(`document.querySelectorAll('tr.model[data-group="qwen"] > td').length`, &n)
	if n != 4 {
		t.Errorf("failing row has %v cells, want 4 (model, group, proxied, reason)", n)
	}
	var opacity string
	eval(`getComputedStyle(document.querySelector('tr.model[data-group="qwen"]')).opacity`, &opacity)
	if opacity == "1" || opacity == "" {
		t.Errorf("failing row is not dimmed (opacity %q)", opacity)
	}
	eval(`getComputedStyle(document.querySelector('tr.model[data-model="glm53"]')).opacity`, &opacity)
	if opacity != "1" {
		t.Errorf("healthy row is dimmed (opacity %q)", opacity)
	}

	// Click the model: its in-flight requests are listed.
	if err := chromedp.Do(bctx, chromedp.Click(`tr.model[data-model="glm53"] td.name`)); err != nil {
		t.Fatal(err)
	}
	poll("the request rows", `document.querySelectorAll("tr.detail tr.req").length === 2`)
	first := cells(`tr.req[data-id="41"] > td`)
	for _, want := range []string{"#41", "5 KiB", "yes", "1.0 s", "20 KiB"} {
		if !strings.Contains(first, want) {
			t.Errorf("request 41 %q lacks %q", first, want)
		}
	}
	second := cells(`tr.req[data-id="42"] > td`)
	for _, want := range []string{"#42", "1.2 MiB", "no", "\u2014", "0 B"} {
		if !strings.Contains(second, want) {
			t.Errorf("request 42 %q lacks %q", second, want)
		}
	}
	screenshot("status-wide.png")

	// A request that ends leaves the list at the next poll, and the
	// selection survives the refresh.
	inflight.drop(41)
	poll("request 41 to leave", `document.querySelectorAll("tr.detail tr.req").length === 1 && !!document.querySelector('tr.req[data-id="42"]')`)
	poll("proxied to drop to 1", `document.querySelector('tr.model[data-model="glm53"] > td:nth-child(3)').textContent === "1"`)

	// Click the failing group: it has nothing in flight.
	if err := chromedp.Do(bctx, chromedp.Click(`tr.model[data-group="qwen"] td.name`)); err != nil {
		t.Fatal(err)
	}
	poll("the failing group's empty list", `(document.querySelector('tr.detail[data-for="g:qwen"]') || {}).textContent === "No requests in flight for group qwen."`)

	// On a phone each model is a labelled card that fits the screen.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	poll("the card layout", `getComputedStyle(document.querySelector("table.models > thead")).display === "none"`)
	var width float64
	eval(`Math.max(document.documentElement.scrollWidth, document.querySelector("table.models").getBoundingClientRect().right)`, &width)
	if width > 390 {
		t.Errorf("the page is %v px wide on a 390 px phone screen", width)
	}
	screenshot("status-phone.png")

	// Every daemon lost and nothing known: the page says why, in place of
	// the empty table.
	holder.Store(routes.New(time.Now(), nil, nil, map[string]*routes.Daemon{"127.0.0.1:6380": {Error: "GET /status: connection refused"}}))
	poll("the discovery note", `!document.getElementById("discovery").hidden && document.getElementById("none").hidden &&
		document.getElementById("discovery").textContent === "Nothing to route: no mentatd daemon is reachable (127.0.0.1:6380: GET /status: connection refused)."`)

	// The chart store (internal/charts, inlined): answers merge by time, so
	// an overlapping answer neither repeats a sample nor blanks values; a
	// null stays a gap; the span is trimmed and an all-gap series dropped.
	var store string
	eval(`(() => {
		const s = new Charts.Store(3000);
		s.merge([1000, 2000], [["a", [1, null]], ["gone", [9, null]]]);
		s.merge([2000, 3000], [["a", [null, 3]], ["b", [7, 8]]]);   // overlaps 2000: a stays a gap there
		s.merge([1000, 2000, 3000], [["b", [6, 7, 8]]]);            // a first read of b: nothing repeats
		s.merge([4000, 5000], [["a", [4, null]]]);                    // 1000 and 2000 leave the span
		return JSON.stringify({t: s.t, a: s.get("a"), b: s.get("b"), gone: s.get("gone"), range: s.range()});
	})()`, &store)
	if want := `{"t":[3000,4000,5000],"a":[3,4,null],"b":[8,null,null],"gone":null,"range":[2000,5000]}`; store != want {
		t.Errorf("chart store:\n got %s\nwant %s", store, want)
	}

	if problems := br.Problems(); len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
}

// usage is a fake of the key store's usage and series (stats.Keys).
type usage struct {
	mu   sync.Mutex
	keys []keys.Usage
	snap keys.SeriesSnapshot
}

func (u *usage) Usage() []keys.Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]keys.Usage(nil), u.keys...)
}

func (u *usage) Series(since int64) keys.SeriesSnapshot {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := keys.SeriesSnapshot{Times: []int64{}, Keys: map[string]keys.KeySeries{}}
	for i, t := range u.snap.Times {
		if t <= since {
			continue
		}
		out.Times = append(out.Times, t)
		for id, s := range u.snap.Keys {
			ks := out.Keys[id]
			ks.Requests = append(ks.Requests, s.Requests[i])
			ks.Units = append(ks.Units, s.Units[i])
			ks.Rejections = append(ks.Rejections, s.Rejections[i])
			out.Keys[id] = ks
		}
	}
	return out
}

// TestKeysSectionInBrowser: with keys on, the page shows a row per key
// (limits, what is left, answers by class, tokens, rejections) and a chart
// per key of its series; with keys off there is no Keys section at all.
func TestKeysSectionInBrowser(t *testing.T) {
	now := time.Now().UnixMilli()
	u := &usage{
		keys: []keys.Usage{
			{ID: "team-a", Priority: "critical", Weight: 2, Models: []string{"glm*"}, State: "active", RPM: 600, Units: 100000, Unit: keys.Tokens,
				MaxConcurrent: 8, RemainingRequests: 590, RemainingUnits: 97500, InFlight: 3,
				Requests: map[string]uint64{"200": 40, "429": 5, "499": 1, "502": 2}, PromptTokens: 2000, CompletionTokens: 500, CachedTokens: 1200, CountedTokens: 30,
				Rejections: map[string]uint64{"rpm": 4, "model_scope": 1}},
			{ID: "batch", Priority: "sheddable", Weight: 1, State: "disabled", Unit: keys.Tokens, RemainingRequests: -1, RemainingUnits: -1,
				Requests: map[string]uint64{}, Rejections: map[string]uint64{}},
		},
		snap: keys.SeriesSnapshot{Times: []int64{now - 20000, now - 10000, now}, Keys: map[string]keys.KeySeries{
			"team-a": {Requests: series.Values{1, 2, 3}, Units: series.Values{100, 200, 250}, Rejections: series.Values{0, 0.5, 0}},
			"batch":  {Requests: series.Values{0, 0, 0}, Units: series.Values{0, 0, 0}, Rejections: series.Values{0, 0, 0}},
		}},
	}
	srv, _ := router(t, &carrying{}, u)
	off, _ := router(t, &carrying{}, nil)
	br := testbrowser.New(t, 1400, 900)
	if err := chromedp.Do(br.Ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	br.Until("the key rows", `document.querySelectorAll("#keyRows tr.key").length === 2 && !document.getElementById("keys").hidden`)
	var row string
	br.Eval(`Array.from(document.querySelectorAll('tr.key[data-id="team-a"] > td')).map(td => td.textContent.trim()).join(" | ")`, &row)
	want := "team-a | active | critical \u00b7 weight 2 | 600 req/min, 100,000 tokens/min, 8 at once | 590 req, 97,500 tokens | 3 | 40 | 5 | 3 | 2,000 | 500 | 1,200 | 30 | model_scope 1 \u00b7 rpm 4"
	if row != want {
		t.Errorf("team-a row\n got %q\nwant %q", row, want)
	}
	br.Eval(`Array.from(document.querySelectorAll('tr.key[data-id="batch"] > td')).map(td => td.textContent.trim()).join(" | ")`, &row)
	if want := "batch | disabled | sheddable | none | no limit | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | none"; row != want {
		t.Errorf("batch row\n got %q\nwant %q", row, want)
	}
	var title string
	br.Eval(`document.querySelector('tr.key[data-id="team-a"] > td:nth-child(4)').title`, &title)
	if title != "models: glm*" {
		t.Errorf("limits cell title %q, want the key's models", title)
	}
	// The chart draws the key's series: three lines, the latest values in
	// the legend.
	br.Until("team-a's chart", `(() => { const b = document.querySelector('#keyCharts .chartbox[data-key="team-a"]');
		return !!b && b.querySelectorAll("svg path").length >= 3 && b.querySelector(".legend").textContent.includes("250/s"); })()`)
	var legend string
	br.Eval(`document.querySelector('#keyCharts .chartbox[data-key="team-a"] .legend').textContent`, &legend)
	for _, w := range []string{"requests/s 3/s", "tokens/s 250/s", "rejections/s 0/s"} {
		if !strings.Contains(legend, w) {
			t.Errorf("team-a legend %q lacks %q", legend, w)
		}
	}
	br.Screenshot("status-keys.png")

	// Keys off: no section, no series route read.
	if err := chromedp.Do(br.Ctx, chromedp.Navigate(off.URL+"/")); err != nil {
		t.Fatal(err)
	}
	br.Until("the model rows", `document.querySelectorAll("tr.model").length === 2`)
	var hidden bool
	br.Eval(`document.getElementById("keys").hidden`, &hidden)
	if !hidden {
		t.Error("keys off, yet the page shows a Keys section")
	}
	if problems := br.Problems(); len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
}

// queues is a fake of flow control's queues.
type queues struct {
	mu sync.Mutex
	q  [flow.NumBands]int
}

func (f *queues) Queued(model string) [flow.NumBands]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if model != "glm53" {
		return [flow.NumBands]int{}
	}
	return f.q
}

// TestFlowSectionInBrowser: with flow control on, the page shows what
// waits per model and band, the total in the summary, and a chart of the
// queue; the section follows the queue as it changes.
func TestFlowSectionInBrowser(t *testing.T) {
	q := &queues{q: [flow.NumBands]int{1, 4, 7}}
	srv, _ := router(t, &carrying{}, nil, func(st *stats.Stats) { st.SetFlow(q) })
	br := testbrowser.New(t, 1400, 900)
	if err := chromedp.Do(br.Ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	br.Until("the queue row", `!document.getElementById("flow").hidden && !!document.querySelector('tr.queue[data-model="glm53"]')`)
	var row, summary string
	br.Eval(`Array.from(document.querySelectorAll('tr.queue[data-model="glm53"] > td')).map(td => td.textContent).join(" | ")`, &row)
	if row != "glm53 | 1 | 4 | 7" {
		t.Errorf("queue row %q", row)
	}
	br.Eval(`document.getElementById("summary").textContent`, &summary)
	if !strings.Contains(summary, "12 queued") {
		t.Errorf("summary %q lacks the 12 queued", summary)
	}
	br.Until("the queue chart with three bands", `(() => { const b = document.querySelector('#flowCharts .chartbox[data-model="glm53"]');
		return !!b && b.querySelectorAll("svg path").length >= 3 && b.querySelector(".legend").textContent.includes("sheddable 7"); })()`)
	q.mu.Lock()
	q.q = [flow.NumBands]int{}
	q.mu.Unlock()
	br.Until("the queue to empty", `document.querySelector('tr.queue[data-model="glm53"] > td:nth-child(4)').textContent === "0"`)
	br.Screenshot("status-flow.png")
	if problems := br.Problems(); len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
}
