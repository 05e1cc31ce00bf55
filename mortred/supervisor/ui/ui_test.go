package ui_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/supervisor"
	"github.com/fe64bb06/frontdoor/mortred/supervisor/ui"
)

const apiTok, metricsTok = "ui-api-secret-0123", "ui-metrics-secret-0123"

// startSupervisorAPI serves the supervisor's API and this page (no child
// is started) with its gateway address on gwAddr.
func startSupervisorAPI(t *testing.T, gwAddr string) *httptest.Server {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"mortred.toml":  "[supervisor]\nlog_dir = \"logs\"\n",
		"server/a.toml": "[A]\nport = 19001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/a.toml\"\n",
		"models/a.toml": "type = \"testmodel\"\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := config.LoadControlPlane(filepath.Join(dir, "mortred.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(gwAddr)
	exe, _ := os.Executable()
	m, err := supervisor.NewManager(cp, cat, envconf.Map(map[string]string{
		"MORTRED_API_TOKEN": apiTok, "MORTRED_METRICS_TOKEN": metricsTok, "MORTRED_LISTEN_HOST": host, "MORTRED_LISTEN_PORT": port,
	}), supervisor.Options{ServerBin: exe, GatewayBin: exe}, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(ui.Handler()))
	t.Cleanup(srv.Close)
	return srv
}

// TestKeysSection drives the page's Keys section in headless Chromium
// against a stand-in gateway that answers GET /stats.json (with the
// metrics token) with a recorded answer, then with no keys, then not at
// all.
func TestKeysSection(t *testing.T) {
	recorded, err := os.ReadFile("../testdata/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	var answer atomic.Pointer[[]byte]
	answer.Store(&recorded)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stats.json" || r.Header.Get("Authorization") != "Bearer "+metricsTok {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*answer.Load())
	}))
	defer gw.Close()
	api := startSupervisorAPI(t, gw.Listener.Addr().String())

	b := testbrowser.New(t, 1280, 1400)
	b.Do("log in", chromedp.Navigate(api.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), apiTok), chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#keyTable")))
	b.Until("a row per key and team-a's chart", `document.querySelectorAll("#keyTable tbody tr").length === 2 &&
		document.querySelectorAll('#keyCharts [data-key="team-a"] path.ln').length === 3`)

	var rows [][]string
	b.Eval(`Array.from(document.querySelectorAll("#keyTable tbody tr")).map((tr) => Array.from(tr.cells).map((c) => c.textContent))`, &rows)
	want := [][]string{
		{"team-a", "active", "critical · weight 2", "600 req/min, 1,200 images/min, 4 at once", "588 req, 1,170 images", "1", "57", "4", "0", "61", "model_scope 1, rpm 3"},
		{"batch-jobs", "disabled", "sheddable", "none", "no limit", "0", "9", "0", "0", "9", "none"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %q", rows)
	}
	for i := range want {
		if strings.Join(rows[i], " | ") != strings.Join(want[i], " | ") {
			t.Errorf("row %d:\n got %q\nwant %q", i, rows[i], want[i])
		}
	}
	var doc supervisor.UsageDocument
	if err := json.Unmarshal(recorded, &doc); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"team-a", "batch-jobs"} {
		s := doc.Series.Keys[id]
		lines := b.Lines(`#keyCharts [data-key="` + id + `"]`)
		testbrowser.CheckLines(t, id+"'s chart", lines, doc.Series.Times,
			map[string]series.Values{"requests": s.Requests, "units": s.Units, "rejections": s.Rejections})
		if len(lines) != 3 {
			t.Errorf("%s's chart has %d lines, want requests, images and rejections", id, len(lines))
		}
	}
	var legend string
	b.Eval(`document.querySelector('#keyCharts [data-key="team-a"] .legend').textContent`, &legend)
	if !strings.Contains(legend, "requests/s") || !strings.Contains(legend, "images/s") || !strings.Contains(legend, "rejections/s") {
		t.Errorf("legend %q", legend)
	}
	b.Screenshot("keys.png")
	noSecret(t, b)

	empty := []byte(`{"keys":[],"series":{"times":[],"keys":{}}}`)
	answer.Store(&empty)
	b.Until("the page says there is no keys file", `document.getElementById("keyTable").hidden &&
		document.getElementById("keysNote").textContent.includes("without a keys file") && document.querySelectorAll("#keyCharts *").length === 0`)

	gw.Close()
	b.Until("the page says the gateway did not answer", `document.getElementById("keyTable").hidden &&
		document.getElementById("keysNote").textContent.startsWith("No per-key usage: the gateway did not answer GET /stats.json")`)
	// The servers table is still drawn and refreshed meanwhile.
	b.Until("the servers table", `document.querySelector('#servers tr[data-id="A"]') !== null`)
	noSecret(t, b)
	// Chromium logs each 502 of /api/v1/usage as a failed load; that is
	// the gateway being down, which the page shows. Anything else is not.
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 502 (Bad Gateway)") {
			t.Errorf("the page logged an error: %s", p)
		}
	}
}

func noSecret(t *testing.T, b *testbrowser.Browser) {
	t.Helper()
	var html string
	b.Eval(`document.documentElement.outerHTML`, &html)
	for _, s := range []string{"sk-mortred-", metricsTok} {
		if strings.Contains(html, s) {
			t.Errorf("the page shows %q", s)
		}
	}
}

// TestRolloutForm drives a model's rollout form against a supervisor
// whose model has never been rolled out: the gateway's row has none, the
// page refuses a model file with a config itself, a rollback's refusal
// (409) is the server's text, and the form fits a phone's screen.
func TestRolloutForm(t *testing.T) {
	gw := httptest.NewServer(http.NotFoundHandler())
	defer gw.Close()
	api := startSupervisorAPI(t, gw.Listener.Addr().String())

	b := testbrowser.New(t, 1280, 1000)
	b.Do("log in", chromedp.Navigate(api.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), apiTok), chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#app")))
	b.Until("the servers table", `!!document.querySelector('#servers tr[data-id="A"]')`)
	b.Do("open the gateway's row", chromedp.Click(`#servers tr[data-id="gateway"] td:first-child`))
	b.Until("the gateway's charts, with no rollout form", `!!document.querySelector('#servers tr.detail[data-for="gateway"] .chartbox') && !document.querySelector("form.rollout")`)

	form := `#servers tr.detail[data-for="A"] form.rollout`
	msg := `document.querySelector('` + form + ` .msg')`
	b.Do("open A's row", chromedp.Click(`#servers tr[data-id="A"] td:first-child`))
	b.Until("A's rollout form", `!!document.querySelector('`+form+` button[data-roll="rollback"]')`)
	b.Do("give both a model file and a config",
		chromedp.SetValue(chromedp.CSS(form+` input[name="model_file"]`), "/srv/m.onnx"),
		chromedp.SetValue(chromedp.CSS(form+` input[name="config"]`), "/srv/m.toml"),
		chromedp.Click(chromedp.CSS(form+` button[data-roll="rollout"]`)))
	b.Until("the page refuses them", msg+`.textContent === "Give a model file or a config, not both: a config names its own model file."`)

	b.Do("roll back", chromedp.Click(chromedp.CSS(form+` button[data-roll="rollback"]`)))
	b.Until("the refusal", msg+`.textContent.startsWith("rollback A failed: ")`)
	req, _ := http.NewRequest("POST", api.URL+"/api/v1/servers/A/rollback", nil)
	req.Header.Set("Authorization", "Bearer "+apiTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&refusal)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("POST rollback: %d %v", resp.StatusCode, err)
	}
	var shown, toast, cls string
	b.Eval(msg+`.textContent`, &shown)
	b.Eval(`document.getElementById("toast").textContent`, &toast)
	b.Eval(msg+`.className`, &cls)
	if want := "rollback A failed: " + refusal.Error; shown != want || toast != want || cls != "msg err" {
		t.Errorf("the form says %q (%s), the toast %q; want %q", shown, cls, toast, want)
	}
	var values []string
	b.Eval(`Array.from(document.querySelectorAll('`+form+` input')).map((i) => i.value)`, &values)
	if strings.Join(values, ",") != "/srv/m.onnx,/srv/m.toml," {
		t.Errorf("fields %q after a refusal, want them kept", values)
	}

	b.Do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.Until("the narrow layout", `getComputedStyle(document.querySelector("#servers th.hide-sm")).display === "none"`)
	var width, right float64
	b.Eval(`document.documentElement.scrollWidth`, &width)
	b.Eval(`Math.max(...Array.from(document.querySelectorAll('`+form+` input, `+form+` button')).map((e) => e.getBoundingClientRect().right))`, &right)
	if width > 390 || right > 390 {
		t.Errorf("on a 390 px phone screen the page is %v px wide, the rollout form reaches %v px", width, right)
	}
	b.ScreenshotViewport("rollout-phone.png")
}
