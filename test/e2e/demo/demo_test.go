// Package demo runs scripts/demo.sh (what `make demo` runs) against the
// binaries built by internal/testbin, once non-interactively and once
// stopped the way a terminal's Ctrl-C stops it, and checks that it proves
// every line it prints and leaves no process behind.
package demo

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) { testproc.Main(m, testproc.Suite{}) }

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
		t.Fatalf("ONNX Runtime not found at %s: run `make setup-models` (make test does)", ort)
	}
	for _, b := range binaries {
		binDir = filepath.Dir(testproc.Bin(t, b))
	}
	return root, binDir
}

// demo starts the script in its own process group, as a shell would. Six
// minutes after the start it gets SIGTERM, which its trap turns into a
// clean stop of everything it started; 30 s later its group is killed.
func demo(t *testing.T, root, binDir string, extra ...string) *testproc.Proc {
	t.Helper()
	env := append(os.Environ(), append([]string{"BIN_DIR=" + binDir, "DEMO_DIR=" + t.TempDir(), "DEMO_FREE_PORTS=1"}, extra...)...)
	return testproc.Start(t, testproc.Options{Name: "scripts/demo.sh", Env: env, Dir: root, Timeout: 6 * time.Minute, Grace: 30 * time.Second},
		filepath.Join(root, "scripts/demo.sh"))
}

// wait waits for the script to exit and returns its exit code and how it
// ended.
func wait(p *testproc.Proc) (int, *os.ProcessState) {
	<-p.Done()
	st, _ := p.State(0)
	return st.ExitCode(), st
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
	if code, st := wait(r); code != 0 {
		t.Fatalf("scripts/demo.sh with DEMO_EXIT_AFTER_READY=1 exited %d (%v)\n%s", code, st, r.Output())
	}
	for _, w := range wants {
		if !strings.Contains(r.Output(), w) {
			t.Errorf("demo output lacks %q", w)
		}
	}
	checkNoLeftovers(t, binDir, r.Output())
}

// Interrupted like a terminal's Ctrl-C: SIGINT to the script's process
// group. Where this test process was started with SIGINT ignored (a
// background job), the script inherits that and cannot trap it, so SIGTERM
// (the same trap) stands in.
func TestDemoStopsOnInterrupt(t *testing.T) {
	root, binDir := setup(t)
	r := demo(t, root, binDir)
	ready := time.NewTicker(200 * time.Millisecond)
	defer ready.Stop()
	for !strings.Contains(r.Output(), "press Ctrl-C") {
		select {
		case <-r.Done():
			t.Fatalf("the demo exited before it was ready:\n%s", r.Output())
		case <-ready.C:
		}
	}
	sig, want := syscall.SIGINT, 130
	if signal.Ignored(os.Interrupt) {
		t.Log("SIGINT is ignored in this process (and so in the script); stopping with SIGTERM instead")
		sig, want = syscall.SIGTERM, 143
	}
	if err := r.SignalGroup(sig); err != nil {
		t.Fatal(err)
	}
	if code, st := wait(r); code != want {
		t.Fatalf("demo exited %d (%v) after %v, want %d\n%s", code, st, sig, want, r.Output())
	}
	if !strings.Contains(r.Output(), "demo: stopped") {
		t.Fatalf("demo did not report a clean stop:\n%s", r.Output())
	}
	checkNoLeftovers(t, binDir, r.Output())
}
