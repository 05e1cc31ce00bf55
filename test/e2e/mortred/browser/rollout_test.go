package browser

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/mortred/supervisor"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// serverStatus is GET /api/v1/servers/{id}, with the rollout fields.
func serverStatus(t *testing.T, sup *stack.Supervisor, id string) supervisor.ServerStatus {
	t.Helper()
	rep, err := sup.API("GET", "/api/v1/servers/"+id)
	if err != nil || rep.Code != 200 {
		t.Fatalf("GET /api/v1/servers/%s: %v %v", id, rep, err)
	}
	var st supervisor.ServerStatus
	if err := json.Unmarshal(rep.Body, &st); err != nil {
		t.Fatalf("GET /api/v1/servers/%s: %v in %s", id, err, rep.Body)
	}
	return st
}

// testRollout drives model id's rollout form (in its opened row): a
// rollout to a version only (testmodel's config takes no model_file), a
// refused one (a model file testmodel does not load) and a rollback, each
// answer checked against the API. modelFile is any file that exists.
func testRollout(t *testing.T, b *testbrowser.Browser, sup *stack.Supervisor, id, modelFile string) {
	ctx := b.Ctx
	row := fmt.Sprintf(`#servers tr[data-id="%s"]`, id)
	form := fmt.Sprintf(`#servers tr.detail[data-for="%s"] form.rollout`, id)
	msg := `document.querySelector('` + form + ` .msg')`
	vers := `Array.from(document.querySelectorAll('` + row + ` .state ~ div')).map((d) => d.textContent)`
	if st := serverStatus(t, sup, id); st.Version != "1" || st.Instance != 0 || st.Rollout != nil {
		t.Fatalf("%s before any rollout: version %q instance %d rollout %+v", id, st.Version, st.Instance, st.Rollout)
	}
	step(t, b, "open "+id+"'s row", chromedp.Click(chromedp.CSS(row+` td:first-child`)))
	until(t, b, "the rollout form", `!!document.querySelector('`+form+` input[name="version"]')`)
	if n := text(t, ctx, `String(document.querySelectorAll('#servers form.rollout').length)`); n != "1" {
		t.Fatalf("%s rollout forms on the page, want only the open row's", n)
	}

	// The table is redrawn every 2 s; a field being typed in keeps its
	// text and the focus.
	step(t, b, "type half the version", chromedp.SendKeys(chromedp.CSS(form+` input[name="version"]`), "v"),
		chromedp.Evaluate[chromedp.Void](`window.rollRow = document.querySelector('`+row+`')`))
	until(t, b, "a redraw of the table, the field still focused", `document.querySelector('`+row+`') !== window.rollRow &&
		document.activeElement === document.querySelector('`+form+` input[name="version"]')`)
	step(t, b, "type the rest", chromedp.SendKeys(chromedp.CSS(form+` input[name="version"]`), "2"))
	if v := text(t, ctx, `document.querySelector('`+form+` input[name="version"]').value`); v != "v2" {
		t.Fatalf("version field %q after a redraw, want v2", v)
	}

	// Both a model file and a config: refused before asking the server.
	step(t, b, "fill both paths",
		chromedp.SetValue(chromedp.CSS(form+` input[name="model_file"]`), "/tmp/a.onnx"),
		chromedp.SetValue(chromedp.CSS(form+` input[name="config"]`), "/tmp/a.toml"),
		chromedp.Click(chromedp.CSS(form+` button[data-roll="rollout"]`)))
	until(t, b, "the form says not both", msg+`.textContent === "Give a model file or a config, not both: a config names its own model file." && `+msg+`.classList.contains("err")`)
	if st := serverStatus(t, sup, id); st.Rollout != nil {
		t.Fatalf("the supervisor was asked anyway: %+v", st.Rollout)
	}
	step(t, b, "clear the paths", clear(form+` input[name="model_file"]`), clear(form+` input[name="config"]`))

	// A rollout to v2: the buttons are disabled and the form says so
	// while the new version loads and warms up.
	var busy struct {
		Msg      string
		Disabled []bool
	}
	b.For(t).Eval(`(() => {
		const f = document.querySelector('`+form+`');
		f.querySelector('button[data-roll="rollout"]').click();
		return {Msg: f.querySelector(".msg").textContent, Disabled: Array.from(f.querySelectorAll("button")).map((b) => b.disabled)};
	})()`, &busy)
	if !strings.HasPrefix(busy.Msg, "rolling out version v2 \u2026 ") || fmt.Sprint(busy.Disabled) != "[true true]" {
		t.Fatalf("while rolling out: message %q, buttons disabled %v", busy.Msg, busy.Disabled)
	}
	until(t, b, "the rollout's answer", `!document.querySelector('`+form+` button[data-roll="rollout"]').disabled && !`+msg+`.textContent.startsWith("rolling")`)
	st := serverStatus(t, sup, id)
	got := text(t, ctx, msg+`.textContent`)
	want := fmt.Sprintf("rollout %s: version v2 (instance 1) serves after ", id)
	if st.Version != "v2" || st.Instance != 1 || !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " warm-up samples; version 1 drains") ||
		text(t, ctx, msg+`.className`) != "msg ok" {
		t.Fatalf("after the rollout the form says %q (want %q…), the API version %q instance %d, rollout %+v", got, want, st.Version, st.Instance, st.Rollout)
	}
	if toast := text(t, ctx, `document.getElementById("toast").textContent`); toast != got {
		t.Errorf("toast %q, want the form's message", toast)
	}
	if v := text(t, ctx, `document.querySelector('`+form+` input[name="version"]').value`); v != "" {
		t.Errorf("version field %q after a rollout that succeeded, want it cleared", v)
	}
	until(t, b, "the row shows v2", vers+`.includes("version v2 (instance 1)")`)

	// A model file testmodel's config refuses: the new version does not
	// start (422), the server's reason is shown and v2 serves on.
	step(t, b, "roll out a model file testmodel refuses",
		chromedp.SetValue(chromedp.CSS(form+` input[name="model_file"]`), modelFile),
		chromedp.Click(chromedp.CSS(form+` button[data-roll="rollout"]`)))
	until(t, b, "the refusal", `!document.querySelector('`+form+` button[data-roll="rollout"]').disabled && `+msg+`.classList.contains("err")`)
	st = serverStatus(t, sup, id)
	got = text(t, ctx, msg+`.textContent`)
	if st.Rollout == nil || st.Rollout.State != "failed" || !strings.Contains(st.Rollout.Error, "did not start") || got != "rollout "+id+" failed: "+st.Rollout.Error {
		t.Fatalf("the form says %q; the API's rollout %+v", got, st.Rollout)
	}
	if st.Version != "v2" || st.Instance != 1 {
		t.Fatalf("a refused rollout changed the version in service: %q instance %d", st.Version, st.Instance)
	}
	until(t, b, "the row still shows v2, and the refusal", vers+`.includes("version v2 (instance 1)") && `+vers+`.some((s) => s.startsWith("rollout to `+st.Rollout.Version+` refused: ") && s.includes("did not start"))`)
	if v := text(t, ctx, `document.querySelector('`+form+` input[name="model_file"]').value`); v != modelFile {
		t.Errorf("model file field %q after a refused rollout, want it kept", v)
	}
	step(t, b, "clear the model file", clear(form+` input[name="model_file"]`))

	// Roll back: the version v2 replaced ("1", the stack's model config's)
	// serves again.
	step(t, b, "roll back", chromedp.Click(chromedp.CSS(form+` button[data-roll="rollback"]`)))
	until(t, b, "the rollback's answer", `!document.querySelector('`+form+` button[data-roll="rollback"]').disabled && `+msg+`.textContent.startsWith("rollback ")`)
	st = serverStatus(t, sup, id)
	got = text(t, ctx, msg+`.textContent`)
	want = fmt.Sprintf("rollback %s: version 1 (instance %d) serves after ", id, st.Instance)
	if st.Version != "1" || st.Instance < 2 || !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; version v2 drains") {
		t.Fatalf("after the rollback the form says %q (want %q…), the API version %q instance %d", got, want, st.Version, st.Instance)
	}
	until(t, b, "the row shows version 1 again, without the refusal", fmt.Sprintf(`%s.includes("version 1 (instance %d)") && !%s.some((s) => s.includes("refused"))`, vers, st.Instance, vers))
	b.For(t).Screenshot("rollout-wide.png")

	// On a phone the form fits the screen.
	step(t, b, "phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('`+form+`').scrollIntoView()`))
	until(t, b, "the narrow layout", `getComputedStyle(document.querySelector("#servers th.hide-sm")).display === "none"`)
	var width, right float64
	b.For(t).Eval(`document.documentElement.scrollWidth`, &width)
	b.For(t).Eval(`Math.max(...Array.from(document.querySelectorAll('`+form+` input, `+form+` button')).map((e) => e.getBoundingClientRect().right))`, &right)
	if width > 390 || right > 390 {
		var wide []string
		b.For(t).Eval(`Array.from(document.querySelectorAll("#app *")).filter((e) => e.getBoundingClientRect().right > 390 && e.getBoundingClientRect().width > 0).slice(-8).map((e) => e.tagName + "." + e.className + ": " + e.textContent.slice(0, 80))`, &wide)
		t.Errorf("on a 390 px phone screen the page is %v px wide, the rollout form reaches %v px; wider than the screen: %q", width, right, wide)
	}
	b.For(t).ScreenshotViewport("rollout-phone.png")
	// chromedp.ResetViewport leaves the emulated width; clear it.
	if _, err := chromedp.Call(ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{}); err != nil {
		t.Fatal(err)
	}
	until(t, b, "the wide layout", `getComputedStyle(document.querySelector("#servers th.hide-sm")).display !== "none"`)
}
