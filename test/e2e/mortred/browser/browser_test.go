// Package browser drives the supervisor's web UI in headless Chromium
// (chromedp) against a real supervisor stack. It is its own package because
// chromedp's goroutines do not suit the leak check of the other e2e tests.
package browser

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testbrowser"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stack.CloseIdle()
	testbin.Cleanup()
	os.Exit(code)
}

// browser starts headless Chromium with a fresh profile; it ends with the
// test.
func browser(t *testing.T) *testbrowser.Browser { return testbrowser.New(t, 1280, 1100) }

// step runs actions with a deadline, failing the (sub)test t with what was
// being done.
func step(t *testing.T, b *testbrowser.Browser, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	b.For(t).Do(what, actions...)
}

// until waits for a JavaScript expression to be truthy.
func until(t *testing.T, b *testbrowser.Browser, what, expr string) {
	t.Helper()
	b.For(t).Until(what, expr)
}

func text(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// clear empties an input and fires its input event (chromedp.SetValue
// refuses the empty string).
func clear(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = ""; e.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`, sel))(ctx, t)
		return err
	})
}

func stateOf(id string) string {
	return fmt.Sprintf(`(document.querySelector('#servers tr[data-id="%s"] .state') || {}).textContent`, id)
}

func toastIs(msg string) string {
	return fmt.Sprintf(`(() => { const t = document.getElementById("toast"); return t.style.display === "block" && t.textContent === %q; })()`, msg)
}

func TestWebUI(t *testing.T) {
	conf := stack.WriteConf(t, []stack.Model{{ID: "TM"}, {ID: "OTHER"},
		// Rolled out and back by the rollout subtest only.
		{ID: "ROLL"},
		// Refused by the testmodel factory: it exits at once, every time.
		{ID: "BROKEN", ModelKeys: map[string]any{"no_such_key": true}, Policy: map[string]any{"autostart": false}}}, nil)
	sup := stack.StartSupervisor(t, conf, stack.NewTokens())
	sup.WaitReady(t, "TM", 60*time.Second)
	sup.WaitReady(t, "OTHER", 60*time.Second)
	sup.WaitReady(t, "ROLL", 60*time.Second)
	img := filepath.Join(t.TempDir(), "light.png")
	if err := os.WriteFile(img, testmodel.GrayPNG(96, 64, 230), 0o644); err != nil {
		t.Fatal(err)
	}

	b := browser(t)
	ctx := b.Ctx
	// The stop button asks for confirmation; the operator says yes.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			if !strings.HasPrefix(ev.Message, "Stop ") {
				t.Errorf("unexpected dialog %q", ev.Message)
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()

	t.Run("login", func(t *testing.T) {
		step(t, b, "open the UI",
			chromedp.Navigate(conf.APIURL()+"/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
			chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
		)
		until(t, b, "a wrong token is refused", `document.getElementById("loginErr").textContent.includes("refused")`)
		step(t, b, "log in",
			clear("#token"),
			chromedp.SendKeys(chromedp.CSS("#token"), sup.Tokens.API),
			chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#app")),
		)
		until(t, b, "models shown running", stateOf("TM")+` === "running" && `+stateOf("OTHER")+` === "running" && `+stateOf("gateway")+` === "running"`)
		// The token is kept for the session: a reload stays logged in.
		step(t, b, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#app")))
		until(t, b, "still logged in", stateOf("TM")+` === "running"`)
	})

	var stoppedPID int
	t.Run("stop and start", func(t *testing.T) {
		before := sup.Server(t, "TM")
		stoppedPID = before.PID
		step(t, b, "click stop", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="stop"]`)))
		until(t, b, "stop toast", toastIs("stop TM: ok"))
		until(t, b, "TM shown stopped", stateOf("TM")+` === "stopped"`)
		if st := sup.Server(t, "TM"); st.State != "stopped" || testproc.Alive(before.PID) {
			t.Fatalf("the UI said stopped, the supervisor says %+v", st)
		}
		if st := sup.Server(t, "OTHER"); st.State != "running" {
			t.Fatalf("OTHER changed: %+v", st)
		}
		step(t, b, "click start", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="start"]`)))
		until(t, b, "start toast", toastIs("start TM: ok"))
		until(t, b, "TM shown running and ready", stateOf("TM")+` === "running" && document.querySelector('#servers tr[data-id="TM"] td:nth-child(4)').textContent === "yes"`)
		if st := sup.WaitReady(t, "TM", 30*time.Second); st.PID == before.PID {
			t.Fatalf("not a new process: %+v", st)
		}
		step(t, b, "click restart", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="restart"]`)))
		until(t, b, "restart toast", toastIs("restart TM: ok"))
		sup.WaitReady(t, "TM", 60*time.Second)
		until(t, b, "TM running after the restart", stateOf("TM")+` === "running"`)
	})

	t.Run("a crashing child's reason", func(t *testing.T) {
		if r, err := sup.API("POST", "/api/v1/servers/BROKEN/start"); err != nil || r.Code != 200 {
			t.Fatalf("start BROKEN: %v %v", r, err)
		}
		until(t, b, "BROKEN's note quotes its last error line", `(() => {
			const e = document.querySelector('#servers tr[data-id="BROKEN"] .err');
			return !!e && /^exited( \(exit status 1\)| 6 times in a row \(last: exit status 1\)): loading model .*unknown keys \[no_such_key\]; (restarting in|giving up)/.test(e.textContent);
		})()`)
	})

	t.Run("logs", func(t *testing.T) {
		step(t, b, "pick TM's log",
			chromedp.SetValue(chromedp.CSS("#logId"), "TM"), // also fires change
		)
		until(t, b, "TM's log lines", fmt.Sprintf(`document.getElementById("log").textContent.includes("[supervisor] process stopped") && document.getElementById("log").textContent.includes("[supervisor] started pid %d")`, stoppedPID))
		step(t, b, "search", chromedp.SendKeys(chromedp.CSS("#search"), "process stopped"))
		until(t, b, "only matching lines, highlighted", `(() => {
			const pre = document.getElementById("log");
			const lines = pre.textContent.trim().split("\n");
			return pre.querySelectorAll("mark").length >= 1 && lines.every((l) => l.includes("process stopped"));
		})()`)
		step(t, b, "pause", chromedp.Click(chromedp.CSS("#follow")))
		if got := text(t, ctx, `document.getElementById("follow").textContent`); got != "Follow" {
			t.Fatalf("follow button %q after pausing", got)
		}
		step(t, b, "clear the search and follow again",
			clear("#search"),
			chromedp.Click(chromedp.CSS("#follow")),
		)
		until(t, b, "all lines again", `document.getElementById("log").textContent.includes("[supervisor] started pid")`)
	})

	t.Run("smoke test", func(t *testing.T) {
		step(t, b, "send an image",
			chromedp.SetValue(chromedp.CSS("#inferId"), "TM"),
			chromedp.SetUploadFiles(chromedp.CSS("#image"), []string{img}),
			chromedp.Click(chromedp.CSS("#send")),
		)
		until(t, b, "the answer", `document.getElementById("inferInfo").textContent.startsWith("HTTP ") && document.getElementById("result").textContent.length > 0`)
		if info := text(t, ctx, `document.getElementById("inferInfo").textContent`); !strings.HasPrefix(info, "HTTP 200 in ") {
			t.Fatalf("inference: %q\n%s", info, text(t, ctx, `document.getElementById("result").textContent`))
		}
		result := text(t, ctx, `document.getElementById("result").textContent`)
		for _, want := range []string{`"status": 0`, `"category": "light"`, `"name": "TM"`} {
			if !strings.Contains(result, want) {
				t.Fatalf("result lacks %s:\n%s", want, result)
			}
		}
		until(t, b, "the image drawn", `document.getElementById("canvas").width === 96 && document.getElementById("canvas").height === 64`)
		// The classification as bars: one row per class, the best in bold.
		until(t, b, "the class bars", `document.querySelectorAll("#classes .cls").length === 2 && document.querySelector("#classes .cls.best").textContent.startsWith("light")`)
		// A classification model's answer also lists its top classes: the
		// bars name those, the others go by index.
		if got := text(t, ctx, `(() => {
			showClasses({class_id: 2, category: "Neutral", scores: [0.1, 0, 0.9],
				top: [{class_id: 2, category: "Neutral", score: 0.9}, {class_id: 0, category: "Drawing", score: 0.1}]});
			return [...document.querySelectorAll("#classes .cls")].map((r) => r.firstChild.textContent).join(",");
		})()`); got != "Drawing,class 1,Neutral" {
			t.Fatalf("class bars named %q, want the top list's names", got)
		}
	})

	t.Run("rollout", func(t *testing.T) { testRollout(t, b, sup, "ROLL", img) })

	t.Run("screenshot", func(t *testing.T) {
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		im, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if b := im.Bounds(); b.Dx() < 600 || b.Dy() < 400 || !varied(im) {
			t.Fatalf("screenshot %v looks empty", b)
		}
		path := filepath.Join(t.ArtifactDir(), "mortred-ui.png")
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (kept with go test -artifacts)", path)
	})

	t.Run("logout", func(t *testing.T) {
		step(t, b, "log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login")))
		if tok := text(t, ctx, `sessionStorage.getItem("mortredToken") || ""`); tok != "" {
			t.Fatal("the token stayed in sessionStorage")
		}
	})
}

// varied reports whether the image has more than a handful of colours.
func varied(im image.Image) bool {
	seen := map[[3]uint32]bool{}
	b := im.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := im.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if len(seen) > 8 {
				return true
			}
		}
	}
	return false
}
