// Package testbrowser drives headless Chromium (chromedp) for the pages'
// browser tests: one fresh profile per test, the page's console errors
// collected, polling for a condition, and screenshots kept under the
// test package's testdata/out (ignored by git) for a person to look at.
package testbrowser

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser is one headless Chromium with one tab.
type Browser struct {
	Ctx context.Context
	t   testing.TB
	log *console
}

// console collects the page's errors and exceptions.
type console struct {
	mu       sync.Mutex
	problems []string
}

// For returns the browser bound to t (a subtest), so that its failures end
// the right test.
func (b *Browser) For(t testing.TB) *Browser { c := *b; c.t = t; return &c }

// Path finds Chromium: $CHROMIUM, or the Debian package's binary (make
// setup installs it).
func Path(t testing.TB) string {
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

// New starts Chromium with a width×height window; it stops with the test.
func New(t testing.TB, width, height int) *Browser {
	t.Helper()
	exe := Path(t)
	profile, err := os.MkdirTemp("", "testbrowser-")
	if err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // tests may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.Env("LANG=en_US.UTF-8", "TZ=UTC"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	b := &Browser{Ctx: ctx, t: t, log: &console{}}
	consoleDone := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				b.log.mu.Lock()
				b.log.problems = append(b.log.problems, m.String())
				b.log.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-consoleDone
		cancelAlloc()
		// Chromium's helpers may write into the profile a moment longer.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return b
}

// Problems returns the console errors and exceptions so far.
func (b *Browser) Problems() []string {
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	return append([]string(nil), b.log.problems...)
}

// Do runs actions with a deadline, failing the test with what was done.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Until waits (up to 90 s: two cores are shared) for a JavaScript
// expression to be truthy.
func (b *Browser) Until(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 95*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		text, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, text)
	}
}

// Eval evaluates expr and decodes its JSON value into out.
func (b *Browser) Eval(expr string, out any) {
	b.t.Helper()
	s, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`JSON.stringify(`+expr+`)`))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		b.t.Fatalf("evaluate %s: %v in %q", expr, err, s)
	}
}

// Screenshot saves a full-page PNG as testdata/out/<test>/<name> in the
// test's package directory and returns its path.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	return b.save(name, chromedp.FullScreenshot(100))
}

// ScreenshotViewport saves what the viewport shows, as a phone user sees
// it (charts off screen are not drawn, so a full-page shot would show them
// blank).
func (b *Browser) ScreenshotViewport(name string) string {
	b.t.Helper()
	return b.save(name, chromedp.CaptureScreenshot())
}

func (b *Browser) save(name string, shot chromedp.Action[[]byte]) string {
	b.t.Helper()
	png, err := chromedp.Run(b.Ctx, shot)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("testdata", "out", strings.ReplaceAll(b.t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	abs, _ := filepath.Abs(p)
	b.t.Logf("screenshot: %s", abs)
	return abs
}
