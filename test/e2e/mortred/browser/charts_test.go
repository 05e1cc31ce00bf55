package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/mortred/supervisor"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// seriesOf is one server's series in GET /api/v1/series.
func seriesOf(d supervisor.SeriesDocument, id string) map[string]series.Values {
	for _, s := range d.Servers {
		if s.ID == id {
			return s.Series
		}
	}
	return nil
}

// load sends inferences through the gateway from a few clients — a slow
// one now and then, so TM's small queue fills and refuses (429), and a bad
// param now and then (4xx) — until stop: at most 20000 requests or 5 min.
// A client whose request is refused or fails backs off for 100 ms, as a
// client told 429 or 5xx should.
func load(sup *stack.Supervisor, clients map[string]int) (stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for id, n := range clients {
		for c := range n {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					mu.Lock()
					sent++
					over := sent > 20000
					mu.Unlock()
					if over {
						return
					}
					params := fmt.Sprintf(`{"delay_ms":%d}`, 5+(i*7+c*13)%40)
					switch {
					case i%11 == 5:
						params = `{"no_such_param":1}`
					case i%5 == 2:
						params = `{"delay_ms":150}`
					}
					rep, err := stack.Do(stack.Req{URL: sup.Conf.GatewayURL() + "/v1/models/" + id + "/infer", Token: sup.Tokens.API,
						Body: stack.Envelope(fmt.Sprintf("%s-%d-%d", id, c, i), params, stack.LightPNG)})
					if err != nil || rep.Code != 200 {
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
		}
	}
	return func() { cancel(); wg.Wait() }
}

func TestWebUIChartsUnderTraffic(t *testing.T) {
	conf := stack.WriteConf(t, []stack.Model{
		{ID: "TM", Keys: map[string]any{"worker_nums": 1, "max_queue_depth": 2, "max_batch_size": 2, "max_batch_delay_ms": 5}},
		{ID: "OTHER"},
	}, nil)
	sup := stack.StartSupervisor(t, conf, stack.NewTokens())
	sup.WaitReady(t, "TM", 60*time.Second)
	sup.WaitReady(t, "OTHER", 60*time.Second)
	defer load(sup, map[string]int{"TM": 10, "OTHER": 1})()

	b := testbrowser.New(t, 1280, 1000)
	b.Do("log in", chromedp.Navigate(conf.APIURL()+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), sup.Tokens.API), chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#app")))
	spark := `#servers tr[data-id="TM"] td.spark`
	b.Until("TM's sparkline with two samples", `(() => { const p = document.querySelector('`+spark+` path.ln'); return !!p && +p.dataset.n >= 2; })()`)

	// A crash: the supervisor restarts TM, the restarts chart steps up and
	// TM's scraped series have a gap while it is down.
	before := sup.Server(t, "TM")
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sup.WaitFor(t, "TM", 90*time.Second, "restarted and ready", func(st stack.Status) bool {
		return st.RestartCount == before.RestartCount+1 && st.Ready && st.PID != before.PID
	})

	b.Do("expand TM", chromedp.Click(`#servers tr[data-id="TM"] td:first-child`))
	detail := `#servers tr.detail[data-for="TM"]`
	b.Until("TM's charts with two samples of every series after the restart", `(() => {
		const ps = Array.from(document.querySelectorAll('`+detail+` path.ln'));
		const line = (f) => ps.find((p) => p.dataset.field === f);
		const n = (f) => line(f) ? +line(f).dataset.n : 0;
		return ["requests_2xx_ps", "requests_4xx_ps", "latency_p50_ms", "latency_p99_ms", "queue_depth", "rejected_ps", "batch_size", "restarts"].every((f) => n(f) >= 2)
			&& line("restarts").dataset.last === "`+fmt.Sprint(before.RestartCount+1)+`" && n("requests_2xx_ps") >= 8;
	})()`)

	sparkLines, detailLines, gwLines := b.Lines(spark), b.Lines(detail), b.Lines(`#servers tr[data-id="gateway"] td.spark`)
	rep, err := sup.API("GET", "/api/v1/series")
	if err != nil || rep.Code != 200 {
		t.Fatalf("GET /api/v1/series: %v %v", rep, err)
	}
	var doc supervisor.SeriesDocument
	if err := json.Unmarshal(rep.Body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.IntervalS != 2 || doc.WindowS != 900 || len(doc.Servers) != 2 || doc.Gateway.ID != "gateway" {
		t.Fatalf("series document: interval %v window %v servers %d gateway %q", doc.IntervalS, doc.WindowS, len(doc.Servers), doc.Gateway.ID)
	}
	tm := seriesOf(doc, "TM")
	testbrowser.CheckLines(t, "TM sparkline", sparkLines, doc.T, tm)
	testbrowser.CheckLines(t, "TM charts", detailLines, doc.T, tm)
	testbrowser.CheckLines(t, "gateway sparkline", gwLines, doc.T, doc.Gateway.Series)
	for _, want := range []string{"requests_2xx_ps", "requests_4xx_ps", "requests_5xx_ps", "latency_p50_ms", "latency_p99_ms", "queue_depth", "rejected_ps", "batch_size", "restarts"} {
		if !slices.Contains(testbrowser.Fields(detailLines), want) {
			t.Errorf("TM's charts have no %s line (drew %v)", want, testbrowser.Fields(detailLines))
		}
	}
	// The numbers are the traffic's: answers, refusals of the full queue,
	// batches of more than one, the gateway's rate.
	for f, min := range map[string]float64{"requests_2xx_ps": 1, "requests_4xx_ps": 0.01, "rejected_ps": 0.01, "latency_p99_ms": 5, "batch_size": 1} {
		if got := testbrowser.Max(tm[f]); got < min {
			t.Errorf("TM's %s peaks at %v, want at least %v: %v", f, got, min, tm[f])
		}
	}
	if got := testbrowser.Max(doc.Gateway.Series["requests_ps"]); got < 1 {
		t.Errorf("the gateway's requests_ps peaks at %v", got)
	}
	b.Screenshot("supervisor-charts-wide.png")

	b.Do("open the gateway's charts", chromedp.Click(`#servers tr[data-id="gateway"] td:first-child`))
	b.Until("the gateway's charts", `(() => { const p = Array.from(document.querySelectorAll('#servers tr.detail[data-for="gateway"] path.ln')).find((p) => p.dataset.field === "requests_ps"); return !!p && +p.dataset.n >= 2; })()`)
	gwDetail := b.Lines(`#servers tr.detail[data-for="gateway"]`)
	rep, err = sup.API("GET", "/api/v1/series")
	if err != nil || json.Unmarshal(rep.Body, &doc) != nil {
		t.Fatalf("GET /api/v1/series: %v %v", rep, err)
	}
	testbrowser.CheckLines(t, "gateway charts", gwDetail, doc.T, doc.Gateway.Series)

	b.Do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	b.Until("the narrow layout", `getComputedStyle(document.querySelector("#servers th.hide-sm")).display === "none"`)
	var width float64
	b.Eval(`document.documentElement.scrollWidth`, &width)
	if width > 390 {
		t.Errorf("the page is %v px wide on a 390 px phone screen", width)
	}
	b.ScreenshotViewport("supervisor-charts-phone.png")

	// The route's filters: since, id; bad ones are refused.
	rep, err = sup.API("GET", fmt.Sprintf("/api/v1/series?id=TM&since=%d", doc.T[len(doc.T)-2]))
	var some supervisor.SeriesDocument
	if err != nil || rep.Code != 200 || json.Unmarshal(rep.Body, &some) != nil || len(some.T) < 1 || some.T[0] != doc.T[len(doc.T)-1] ||
		len(seriesOf(some, "TM")) == 0 || len(seriesOf(some, "OTHER")) != 0 || len(some.Gateway.Series) != 0 {
		t.Errorf("id=TM&since: %v %v", rep, err)
	}
	if rep, err := sup.API("GET", "/api/v1/series?since=soon"); err != nil || rep.Code != 400 || !strings.Contains(string(rep.Body), "since") {
		t.Errorf("since=soon: %v %v", rep, err)
	}
	if rep, err := sup.API("GET", "/api/v1/series?id=NOPE"); err != nil || rep.Code != 404 || !strings.Contains(string(rep.Body), "NOPE") {
		t.Errorf("id=NOPE: %v %v", rep, err)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(p, "\n"))
	}
}
