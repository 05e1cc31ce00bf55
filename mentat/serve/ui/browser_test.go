package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium found (looked for /usr/bin/chromium, chromium, chromium-browser, google-chrome; or set CHROMIUM): run make setup")
	return ""
}

// router stands in for mentatd-serve's HTTP surface that the page touches:
// / and /stats.json over one routable model and one failing group.
func router(t *testing.T, inflight stats.Inflight) *httptest.Server {
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
	var h routes.Holder
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{"glm53": rt},
		map[string]*routes.Group{
			"glm53": {Name: "glm53", Healthy: true, Provider: "vllm", OpenAI: engine.URL + "/v1", Models: []string{"glm53"}},
			"qwen":  {Name: "qwen", Healthy: false, Provider: "vllm", WhyNot: whyNot, Models: []string{"qwen3"}},
		}, nil))
	st := stats.New(&h, inflight, nil, nil)
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", ui.Handler(func() any { return map[string]any{"uptime_s": 1} }))
	mux.Handle("GET /stats.json", st.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestStatusPageInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	now := time.Now()
	inflight := &carrying{reqs: []stats.Request{
		{ID: 41, Model: "glm53", Group: "glm53", Started: now.Add(-12 * time.Second), BodyBytes: 5120, Stream: true,
			FirstByte: now.Add(-11 * time.Second), OutBytes: 20480},
		{ID: 42, Model: "glm53", Group: "glm53", Started: now.Add(-3 * time.Second), BodyBytes: 1234567},
	}}
	srv := router(t, inflight)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // tests may run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.Env("LANG=en_US.UTF-8", "TZ=UTC"),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	var consoleMu sync.Mutex
	var problems []string
	consoleDone := make(chan struct{})
	messages := chromedp.Console(bctx)
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				consoleMu.Lock()
				problems = append(problems, m.String())
				consoleMu.Unlock()
			}
		}
	}()
	defer func() { cancelBrowser(); <-consoleDone }()

	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			html, _ := chromedp.Run(bctx, chromedp.OuterHTML("main"))
			t.Fatalf("waiting for %s: %v\npage: %s", what, err, html)
		}
	}
	eval := func(expr string, out any) {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		switch o := out.(type) {
		case *string:
			*o, _ = v.(string)
		case *float64:
			*o, _ = v.(float64)
		case *bool:
			*o, _ = v.(bool)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(t.ArtifactDir(), name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}

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

	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
}
