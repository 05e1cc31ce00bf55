package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/doccmd"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// The examples of the mentat manuals, run as written: every command of
// their sh blocks, in order, with the real binaries first on PATH. The
// default ports the examples use are moved to free ones, in the text and
// through the environment the commands inherit, so that the test cannot
// meet (or disturb) anything else on the machine. A command ending in &
// runs in the background until the test ends; any other must exit 0 and,
// when the manual gives "# → text", print text. A foreground command is
// re-run until it does (a reader waits for the router to find the
// engine), up to the e2e deadline.
func TestManualExamples(t *testing.T) {
	for _, doc := range []string{"mentatd-serve.md", "mentatd.md"} {
		t.Run(doc, func(t *testing.T) { runManual(t, doc) })
	}
}

// envAssign matches the variable assignments that may start a command.
var envAssign = regexp.MustCompile(`^((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)(.*)$`)

// defaultPort matches the default ports the examples are written with.
var defaultPort = regexp.MustCompile(`\b(6380|6381|6382|8000)\b`)

func runManual(t *testing.T, name string) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	cmds := doccmd.Commands(text, "sh")
	if len(cmds) < 4 {
		t.Fatalf("docs/%s has %d example commands in sh blocks; the test expects its examples there", name, len(cmds))
	}
	ports := map[string]string{
		"6380": itoa(testproc.FreePort(t)), "6381": itoa(testproc.FreePort(t)),
		"6382": itoa(testproc.FreeUDPPort(t)), "8000": itoa(testproc.FreePort(t)),
	}
	moved := func(s string) string {
		return defaultPort.ReplaceAllStringFunc(s, func(p string) string { return ports[p] })
	}
	bin := filepath.Dir(testproc.Bin(t, "mentatd"))
	testproc.Bin(t, "mentatd-serve")
	testproc.Bin(t, "enginesim")
	env := append(baseEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"MENTAT_HTTP_PORT="+ports["6380"], "SERVE_PORT="+ports["6381"], "MENTAT_ANNOUNCE_PORT="+ports["6382"],
		"MENTAT_DAEMONS=127.0.0.1:"+ports["6380"], "MENTAT_DAEMON=127.0.0.1:"+ports["6380"],
		// Faster rounds than the defaults, so the test waits less for what
		// a reader waits for; and a short drain, since no balancer waits
		// for the router's stop.
		"POLL_INTERVAL_S=0.5", "PROBE_INTERVAL_S=0.3", "SERVE_DRAIN_S=0.2")
	dir := t.TempDir()

	for _, c := range cmds {
		line := moved(c.Text)
		where := "docs/" + name + ":" + itoa(c.Line)
		if c.Background {
			m := envAssign.FindStringSubmatch(strings.TrimSpace(strings.TrimSuffix(line, "&")))
			// exec, so that stopping the process stops the program itself.
			testproc.Start(t, testproc.Options{Name: where, Env: env, Dir: dir}, "sh", "-c", m[1]+"exec "+m[2])
			continue
		}
		want := ""
		if s, ok := strings.CutPrefix(c.Comment, "→"); ok {
			want = moved(strings.TrimSpace(s))
		}
		testproc.Eventually(t, deadline, where+": "+c.Text+"\n(run as: "+line+")", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", line)
			cmd.Env, cmd.Dir = env, dir
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), want) {
				return fmt.Errorf("err %v, want output containing %q; output:\n%s", err, want, out)
			}
			return nil
		})
	}
}
