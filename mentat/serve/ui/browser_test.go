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

	"github.com/fe64bb06/frontdoor/internal/testbrowser"
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
func router(t *testing.T, inflight stats.Inflight) (*httptest.Server, *routes.Holder) {
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
	hist := st.NewHistory(nil, 0, 0)
	for i := range 3 {
		hist.Sample(context.Background(), time.Now().Add(time.Duration(i-3)*2*time.Second))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /stats/series.json", hist.Handler())
	mux.Handle("GET /{$}", ui.Handler(func() any { return map[string]any{"uptime_s": 1} }))
	mux.Handle("GET /stats.json", st.Handler())
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
	srv, holder := router(t, inflight)

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
