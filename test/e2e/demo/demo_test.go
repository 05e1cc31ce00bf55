// Package demo runs scripts/demo.sh (what `make demo` runs) against the
// binaries built by internal/testbin, once non-interactively and once
// stopped the way a terminal's Ctrl-C stops it, and checks that it proves
// every line it prints and leaves no process behind.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var binaries = []string{"mentatd", "mentatd-serve", "enginesim", "mortred-supervisor", "mortred-gateway", "mortred-server", "mortredctl"}

// setup builds the binaries into one directory and returns it with the
// repository root.
func setup(t *testing.T) (root, binDir string) {
	t.Helper()
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	ort := os.Getenv("MORTRED_ORT_LIB")
	if ort == "" {
		ort = filepath.Join(root, ".deps/onnxruntime/libonnxruntime.so.1")
	}
	if _, err := os.Stat(ort); err != nil {
		t.Skipf("demo test skipped: ONNX Runtime not found at %s; run `make setup-models`", ort)
	}
	for _, b := range binaries {
		p, err := testbin.Path(b)
		if err != nil {
			t.Fatal(err)
		}
		binDir = filepath.Dir(p)
	}
	return root, binDir
}

// buffer is an io.Writer safe to read while the script writes to it.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// run is a started demo script.
type run struct {
	cmd  *exec.Cmd
	out  *buffer
	done chan struct{}
	err  error
}

// wait waits for the script to exit and returns its exit code.
func (r *run) wait() int {
	<-r.done
	return r.cmd.ProcessState.ExitCode()
}

// demo starts the script in its own process group, as a shell would.
func demo(t *testing.T, root, binDir string, extra ...string) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts/demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), append([]string{"BIN_DIR=" + binDir, "DEMO_DIR=" + t.TempDir(), "DEMO_FREE_PORTS=1"}, extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On a timeout the script gets SIGTERM, which its trap turns into a
	// clean stop of everything it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out := &buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &run{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// leftovers lists live processes running one of our binaries from binDir,
// by pid.
func leftovers(binDir string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Dir(exe) != binDir {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out[pid] = strings.ReplaceAll(string(cmdline), "\x00", " ")
	}
	return out
}

func checkNoLeftovers(t *testing.T, binDir, output string) {
	t.Helper()
	// A process the script stopped may take a moment to be reaped by init.
	var left map[int]string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if left = leftovers(binDir); len(left) == 0 {
			return
		}
	}
	var lines []string
	for pid, cmdline := range left {
		lines = append(lines, fmt.Sprintf("%d: %s", pid, cmdline))
		_ = syscall.Kill(pid, syscall.SIGKILL) // leave the machine clean for the next test
	}
	t.Fatalf("processes left behind by the demo:\n%s\noutput:\n%s", strings.Join(lines, "\n"), output)
}

// wants are lines of the script's output that prove the parts worked (the
// script itself checks each proven line's whole output, e.g. that the
// stream ends with data: [DONE]; it shows only the first lines).
var wants = []string{
	`{"id":"alpha-7b","owned_by":"alpha"}`,
	`{"id":"beta-1b","owned_by":"beta"}`,
	`"object":"chat.completion.chunk"`,
	`"input_tokens":`,
	"alpha__engine_status",
	"beta__engine_status",
	"Token to paste: ",
	"infer PPOCR --image ",
	"HELLO WORLD 2026",
	"Frontdoor 99",
	"demo: ready",
	"demo: stopped",
}

func TestDemoExitAfterReady(t *testing.T) {
	root, binDir := setup(t)
	r := demo(t, root, binDir, "DEMO_EXIT_AFTER_READY=1")
	out := r.out
	if code := r.wait(); code != 0 {
		t.Fatalf("scripts/demo.sh with DEMO_EXIT_AFTER_READY=1 exited %d (%v)\n%s", code, r.err, out)
	}
	for _, w := range wants {
		if !strings.Contains(out.String(), w) {
			t.Errorf("demo output lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	checkNoLeftovers(t, binDir, out.String())
}

// Interrupted like a terminal's Ctrl-C: SIGINT to the script's process
// group. Where this test process was started with SIGINT ignored (a
// background job), the script inherits that and cannot trap it, so SIGTERM
// (the same trap) stands in.
func TestDemoStopsOnInterrupt(t *testing.T) {
	root, binDir := setup(t)
	r := demo(t, root, binDir)
	out := r.out
	ready := time.NewTicker(200 * time.Millisecond)
	defer ready.Stop()
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case <-r.done:
			t.Fatalf("the demo exited before it was ready:\n%s", out)
		case <-ready.C:
		}
	}
	sig, want := syscall.SIGINT, 130
	if signal.Ignored(os.Interrupt) {
		t.Log("SIGINT is ignored in this process (and so in the script); stopping with SIGTERM instead")
		sig, want = syscall.SIGTERM, 143
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(); code != want {
		t.Fatalf("demo exited %d (%v) after %v, want %d\n%s", code, r.err, sig, want, out)
	}
	if !strings.Contains(out.String(), "demo: stopped") {
		t.Fatalf("demo did not report a clean stop:\n%s", out)
	}
	checkNoLeftovers(t, binDir, out.String())
}
