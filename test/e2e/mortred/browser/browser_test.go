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
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

const chromiumBin = "/usr/bin/chromium"

func TestMain(m *testing.M) {
	code := m.Run()
	stack.CloseIdle()
	testbin.Cleanup()
	os.Exit(code)
}

// browser starts headless Chromium with a fresh profile; the context ends
// with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumBin); err != nil {
		t.Fatalf("%s is missing (Debian package chromium): run make setup", chromiumBin)
	}
	profile, err := os.MkdirTemp("", "mortred-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumBin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1100),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// Chromium's helpers may write into the profile a moment longer.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return ctx
}

// step runs actions with a deadline, failing the test with what was being done.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript expression to be truthy.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(80*time.Second))); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, state)
	}
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
	conf := stack.WriteConf(t, []stack.Model{{ID: "TM"}, {ID: "OTHER"}}, nil)
	sup := stack.StartSupervisor(t, conf, stack.NewTokens())
	sup.WaitReady(t, "TM", 60*time.Second)
	sup.WaitReady(t, "OTHER", 60*time.Second)
	img := filepath.Join(t.TempDir(), "light.png")
	if err := os.WriteFile(img, testmodel.GrayPNG(96, 64, 230), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t)
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
		step(t, ctx, "open the UI",
			chromedp.Navigate(conf.APIURL()+"/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
			chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
		)
		until(t, ctx, "a wrong token is refused", `document.getElementById("loginErr").textContent.includes("refused")`)
		step(t, ctx, "log in",
			clear("#token"),
			chromedp.SendKeys(chromedp.CSS("#token"), sup.Tokens.API),
			chromedp.Click(chromedp.CSS(`#loginForm button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS("#app")),
		)
		until(t, ctx, "models shown running", stateOf("TM")+` === "running" && `+stateOf("OTHER")+` === "running" && `+stateOf("gateway")+` === "running"`)
		// The token is kept for the session: a reload stays logged in.
		step(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#app")))
		until(t, ctx, "still logged in", stateOf("TM")+` === "running"`)
	})

	var stoppedPID int
	t.Run("stop and start", func(t *testing.T) {
		before := sup.Server(t, "TM")
		stoppedPID = before.PID
		step(t, ctx, "click stop", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="stop"]`)))
		until(t, ctx, "stop toast", toastIs("stop TM: ok"))
		until(t, ctx, "TM shown stopped", stateOf("TM")+` === "stopped"`)
		if st := sup.Server(t, "TM"); st.State != "stopped" || testproc.Alive(before.PID) {
			t.Fatalf("the UI said stopped, the supervisor says %+v", st)
		}
		if st := sup.Server(t, "OTHER"); st.State != "running" {
			t.Fatalf("OTHER changed: %+v", st)
		}
		step(t, ctx, "click start", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="start"]`)))
		until(t, ctx, "start toast", toastIs("start TM: ok"))
		until(t, ctx, "TM shown running and ready", stateOf("TM")+` === "running" && document.querySelector('#servers tr[data-id="TM"] td:nth-child(4)').textContent === "yes"`)
		if st := sup.WaitReady(t, "TM", 30*time.Second); st.PID == before.PID {
			t.Fatalf("not a new process: %+v", st)
		}
		step(t, ctx, "click restart", chromedp.Click(chromedp.CSS(`#servers tr[data-id="TM"] button[data-action="restart"]`)))
		until(t, ctx, "restart toast", toastIs("restart TM: ok"))
		sup.WaitReady(t, "TM", 60*time.Second)
		until(t, ctx, "TM running after the restart", stateOf("TM")+` === "running"`)
	})

	t.Run("logs", func(t *testing.T) {
		step(t, ctx, "pick TM's log",
			chromedp.SetValue(chromedp.CSS("#logId"), "TM"), // also fires change
		)
		until(t, ctx, "TM's log lines", fmt.Sprintf(`document.getElementById("log").textContent.includes("[supervisor] process stopped") && document.getElementById("log").textContent.includes("[supervisor] started pid %d")`, stoppedPID))
		step(t, ctx, "search", chromedp.SendKeys(chromedp.CSS("#search"), "process stopped"))
		until(t, ctx, "only matching lines, highlighted", `(() => {
			const pre = document.getElementById("log");
			const lines = pre.textContent.trim().split("\n");
			return pre.querySelectorAll("mark").length >= 1 && lines.every((l) => l.includes("process stopped"));
		})()`)
		step(t, ctx, "pause", chromedp.Click(chromedp.CSS("#follow")))
		if got := text(t, ctx, `document.getElementById("follow").textContent`); got != "Follow" {
			t.Fatalf("follow button %q after pausing", got)
		}
		step(t, ctx, "clear the search and follow again",
			clear("#search"),
			chromedp.Click(chromedp.CSS("#follow")),
		)
		until(t, ctx, "all lines again", `document.getElementById("log").textContent.includes("[supervisor] started pid")`)
	})

	t.Run("smoke test", func(t *testing.T) {
		step(t, ctx, "send an image",
			chromedp.SetValue(chromedp.CSS("#inferId"), "TM"),
			chromedp.SetUploadFiles(chromedp.CSS("#image"), []string{img}),
			chromedp.Click(chromedp.CSS("#send")),
		)
		until(t, ctx, "the answer", `document.getElementById("inferInfo").textContent.startsWith("HTTP ") && document.getElementById("result").textContent.length > 0`)
		if info := text(t, ctx, `document.getElementById("inferInfo").textContent`); !strings.HasPrefix(info, "HTTP 200 in ") {
			t.Fatalf("inference: %q\n%s", info, text(t, ctx, `document.getElementById("result").textContent`))
		}
		result := text(t, ctx, `document.getElementById("result").textContent`)
		for _, want := range []string{`"status": 0`, `"category": "light"`, `"name": "TM"`} {
			if !strings.Contains(result, want) {
				t.Fatalf("result lacks %s:\n%s", want, result)
			}
		}
		until(t, ctx, "the image drawn", `document.getElementById("canvas").width === 96 && document.getElementById("canvas").height === 64`)
		// The classification as bars: one row per class, the best in bold.
		until(t, ctx, "the class bars", `document.querySelectorAll("#classes .cls").length === 2 && document.querySelector("#classes .cls.best").textContent.startsWith("light")`)
	})

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
		step(t, ctx, "log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#login")))
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
