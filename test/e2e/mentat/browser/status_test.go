// Package browser loads the router's status page in headless Chromium
// against a real cluster (mentatd daemon, agents running enginesim,
// mentatd-serve) while traffic flows. It is its own package because
// chromedp's goroutines do not suit the leak check of the other e2e tests.
package browser

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
)

func TestMain(m *testing.M) {
	code := m.Run()
	client.CloseIdleConnections()
	testbin.Cleanup()
	os.Exit(code)
}

var client = &http.Client{Timeout: 30 * time.Second}

func itoa(n int) string { return strconv.Itoa(n) }

func baseEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LOG_LEVEL=info"}, extra...)
}

func start(t *testing.T, name string, env []string, argv ...string) {
	t.Helper()
	testproc.Start(t, testproc.Options{Name: name, Env: env, MustStop: true}, argv...)
}

// cluster starts one daemon, one agent per model (each running enginesim)
// and a router, and returns the router's URL once it routes every model.
func cluster(t *testing.T, models ...string) string {
	t.Helper()
	dport := testproc.FreePort(t)
	daemon := "127.0.0.1:" + itoa(dport)
	start(t, "daemon", baseEnv("MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT="+itoa(dport), "MENTAT_ANNOUNCE_IFACES=lo",
		"MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S=0.3", "MENTAT_AGENT_TIMEOUT_S=6"), testproc.Bin(t, "mentatd"), "daemon")
	testproc.Until(t, 45*time.Second, "the daemon", func() bool {
		var s map[string]any
		return testproc.GetJSON(client, "http://"+daemon+"/status", &s) == nil
	})
	for i, model := range models {
		port := testproc.FreePort(t)
		group := "g" + itoa(i+1)
		start(t, "agent-"+group, baseEnv("MENTAT_DAEMON="+daemon, "MENTAT_GROUP="+group, "MENTAT_CONTAINER=c-"+group,
			"MENTAT_OPENAI_API="+itoa(port)+"/v1", "MENTAT_MODEL_PROVIDER=vLLM", "MENTAT_BIND_CHECK_S=0.2"),
			testproc.Bin(t, "mentatd"), "agent", "--",
			testproc.Bin(t, "enginesim"), "--model", model, "--host", "127.0.0.1", "--port", itoa(port),
			"--ttft", itoa(30+20*i)+"ms", "--itl", itoa(8+4*i)+"ms")
	}
	rport := testproc.FreePort(t)
	url := "http://127.0.0.1:" + itoa(rport)
	start(t, "router", baseEnv("SERVE_PORT="+itoa(rport), "MENTAT_ANNOUNCE_PORT=0", "MENTAT_DAEMONS="+daemon,
		"POLL_INTERVAL_S=0.5", "PROBE_INTERVAL_S=0.3", "PROBE_TIMEOUT_S=1"), testproc.Bin(t, "mentatd-serve"))
	testproc.Until(t, 60*time.Second, "the router to route "+strings.Join(models, ", "), func() bool {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		return testproc.GetJSON(client, url+"/v1/models", &list) == nil && len(list.Data) == len(models)
	})
	return url
}

// traffic sends streaming chats for model from a few clients, and now and
// then one the engine refuses (400), until stop is called: at most 3000
// requests or 5 minutes.
func traffic(t *testing.T, url, model string, clients int) (stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for c := range clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				mu.Lock()
				sent++
				n := sent
				mu.Unlock()
				if n > 3000 {
					return
				}
				maxTokens := 24 + 8*c
				if i%7 == 3 {
					maxTokens = 100000 // beyond the context: the engine answers 400
				}
				body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"tell me about charts %d"}]}`, model, maxTokens, i)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func seriesDoc(t *testing.T, url string) stats.SeriesDocument {
	t.Helper()
	var doc stats.SeriesDocument
	if err := testproc.GetJSON(client, url+"/stats/series.json", &doc); err != nil {
		t.Fatalf("GET /stats/series.json: %v", err)
	}
	return doc
}

// modelSeries returns a model's series and those of one group serving it.
func modelSeries(t *testing.T, doc stats.SeriesDocument, model, group string) (m, g map[string]series.Values) {
	t.Helper()
	for _, ms := range doc.Models {
		if ms.Model != model {
			continue
		}
		for _, gs := range ms.Groups {
			if gs.Group == group {
				return ms.Series, gs.Series
			}
		}
		t.Fatalf("/stats/series.json has no group %s for %s: %+v", group, model, ms.Groups)
	}
	t.Fatalf("/stats/series.json has no model %s", model)
	return nil, nil
}

func TestStatusPageChartsUnderTraffic(t *testing.T) {
	url := cluster(t, "alpha-7b", "beta-1b")
	defer traffic(t, url, "alpha-7b", 4)()
	defer traffic(t, url, "beta-1b", 1)()

	b := testbrowser.New(t, 1400, 1000)
	b.Do("open the status page", chromedp.Navigate(url+"/"))
	b.Until("both model rows", `document.querySelectorAll("tr.model").length === 2`)
	spark := `tr.model[data-model="alpha-7b"] td.spark`
	// Two samples with tokens flowing: the rate needs two engine scrapes.
	b.Until("alpha's sparkline with two points", `(() => { const p = document.querySelector('`+spark+` path.ln'); return !!p && +p.dataset.n >= 2; })()`)

	b.Do("expand alpha", chromedp.Click(`tr.model[data-model="alpha-7b"] td.name`))
	detail := `tr.detail[data-for^="m:alpha-7b"]` // keyed by model and group
	b.Until("alpha's charts with two samples of every engine series", `(() => {
		const ps = Array.from(document.querySelectorAll('`+detail+` path.ln'));
		const n = (f) => { const p = ps.find((p) => p.dataset.field === f); return p ? +p.dataset.n : 0; };
		return ps.length >= 11 && ["proxied", "running", "kv", "generation_tps", "prompt_tps", "ttft_s", "itl_s", "requests_ps", "errors_4xx_ps"].every((f) => n(f) >= 2);
	})()`)
	// A few more samples, so the screenshots show lines, not dots.
	b.Until("eight samples", `+document.querySelector('`+spark+` path.ln').dataset.n >= 8`)

	// Stop the clock of the page (no further poll lands between reading
	// the charts and the route) by reading both inside one poll interval:
	// the route keeps 15 minutes, so the points the page drew are all
	// still there when the test reads it.
	sparkLines, detailLines := b.Lines(spark), b.Lines(detail)
	doc := seriesDoc(t, url)
	alpha, alphaG1 := modelSeries(t, doc, "alpha-7b", "g1")
	// The row's sparkline is its group's; the expanded charts the model's.
	testbrowser.CheckLines(t, "sparkline", sparkLines, doc.T, alphaG1)
	testbrowser.CheckLines(t, "detail", detailLines, doc.T, alpha)
	fields := testbrowser.Fields(detailLines)
	for _, want := range []string{"proxied", "running", "waiting", "kv", "prompt_tps", "generation_tps", "ttft_s", "itl_s", "requests_ps", "errors_4xx_ps", "errors_5xx_ps"} {
		if !slices.Contains(fields, want) {
			t.Errorf("the expanded model has no %s chart line (drew %v)", want, fields)
		}
	}
	// The numbers are real: tokens flowed and the refused requests count.
	if testbrowser.Max(alpha["generation_tps"]) <= 0 || testbrowser.Max(alpha["errors_4xx_ps"]) <= 0 || testbrowser.Max(alpha["ttft_s"]) <= 0 {
		t.Errorf("alpha's series show no traffic: generation %v, 4xx %v, ttft %v", alpha["generation_tps"], alpha["errors_4xx_ps"], alpha["ttft_s"])
	}
	// Pointing at a chart reads out the sample under the pointer; the
	// readout survives the next poll's redraw.
	hoverJS := `(() => {
		const box = document.querySelectorAll('` + detail + ` .chartbox')[3], svg = box.querySelector("svg"), r = svg.getBoundingClientRect();
		svg.dispatchEvent(new PointerEvent("pointermove", {clientX: r.left + r.width * 0.9, clientY: r.top + r.height / 2, bubbles: true}));
		return true;
	})()`
	var hovered bool
	b.Eval(hoverJS, &hovered)
	b.Until("the hover readout", `(() => { const box = document.querySelectorAll('`+detail+` .chartbox')[3];
		return box.querySelector(".at").textContent.endsWith(" ago") && box.querySelector(".cursor").getAttribute("visibility") === "visible"; })()`)
	var before string
	b.Eval(`document.querySelector('`+detail+` .chartbox:nth-child(4) .at').textContent`, &before)
	b.Until("a redraw that keeps the readout", `(() => { const box = document.querySelectorAll('`+detail+` .chartbox')[3];
		return box.querySelector(".at").textContent !== `+strconv.Quote(before)+` && box.querySelector(".at").textContent.endsWith(" ago"); })()`)
	b.Screenshot("status-charts-wide.png")

	// A phone: the cards stack; charts below the screen are not drawn
	// until they scroll into view.
	b.Do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	b.Until("the card layout", `getComputedStyle(document.querySelector("table.models > thead")).display === "none"`)
	b.Until("beta's sparkline, off screen, not drawn", `!document.querySelector('tr.model[data-model="beta-1b"] td.spark svg')`)
	var width float64
	b.Eval(`Math.max(document.documentElement.scrollWidth, document.querySelector("table.models").getBoundingClientRect().right)`, &width)
	if width > 390 {
		t.Errorf("the page is %v px wide on a 390 px phone screen", width)
	}
	b.ScreenshotViewport("status-charts-phone.png")
	b.Do("scroll to beta", chromedp.Evaluate[chromedp.Void](`document.querySelector('tr.model[data-model="beta-1b"]').scrollIntoView()`))
	b.Until("beta's sparkline drawn once visible", `!!document.querySelector('tr.model[data-model="beta-1b"] td.spark svg path.ln')`)
	b.Do("scroll to alpha's latency charts", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('`+detail+` .chartbox')[3].scrollIntoView()`))
	b.Until("alpha's TTFT chart drawn", `!!document.querySelectorAll('`+detail+` .chartbox')[3].querySelector("path.ln")`)
	b.ScreenshotViewport("status-charts-phone-latency.png")

	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(p, "\n"))
	}
}
