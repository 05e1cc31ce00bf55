package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

type ctlRun struct {
	stdout, stderr string
	code           int
}

// ctl runs the mortredctl binary against the stack, configured through its
// environment as an operator's shell would be.
func ctl(t *testing.T, sup *stack.Supervisor, extraEnv []string, args ...string) ctlRun {
	t.Helper()
	cmd := exec.Command(testproc.Bin(t, "mortredctl"), args...)
	cmd.Env = stack.BaseEnv(append([]string{
		"MORTREDCTL_ADDR=" + strings.TrimPrefix(sup.Conf.APIURL(), "http://"),
		"MORTREDCTL_GATEWAY_ADDR=" + strings.TrimPrefix(sup.Conf.GatewayURL(), "http://"),
		"MORTRED_API_TOKEN=" + sup.Tokens.API,
	}, extraEnv...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return ctlRun{out.String(), errb.String(), code}
}

func (r ctlRun) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

var (
	msRe     = regexp.MustCompile(`\b\d+(\.\d+)? ms\b`)
	spacesRe = regexp.MustCompile(` {2,}`)
)

// normalise makes output comparable across runs: ports and pids become
// names, timings <ms>, and table padding inside a line (which depends on
// the width of a pid or port) a single " | ".
func normalise(sup *stack.Supervisor, s string) string {
	repl := []string{
		strings.TrimPrefix(sup.Conf.APIURL(), "http://"), "127.0.0.1:<api-port>",
		strings.TrimPrefix(sup.Conf.GatewayURL(), "http://"), "127.0.0.1:<gateway-port>",
	}
	for id, m := range sup.Conf.Models {
		repl = append(repl, strconv.Itoa(m.Port), "<port:"+id+">")
	}
	repl = append(repl, strconv.Itoa(sup.Conf.GatewayPort), "<port:gateway>")
	s = strings.NewReplacer(repl...).Replace(s)
	s = regexp.MustCompile(`\bpid \d+`).ReplaceAllString(s, "pid <pid>")
	s = msRe.ReplaceAllString(s, "<ms> ms")
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		body := strings.TrimLeft(l, " ")
		indent := l[:len(l)-len(body)]
		lines = append(lines, indent+spacesRe.ReplaceAllString(strings.TrimRight(body, " "), " | "))
	}
	return strings.Join(lines, "\n") + "\n"
}

// normaliseTable also replaces the PID column (the 4th) of a status table.
func normaliseTable(sup *stack.Supervisor, s string) string {
	s = normalise(sup, s)
	var lines []string
	for i, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		f := strings.Split(l, " | ")
		if i > 0 && len(f) > 3 && f[3] != "-" {
			f[3] = "<pid>"
		}
		lines = append(lines, strings.Join(f, " | "))
	}
	return strings.Join(lines, "\n") + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "ctl", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestSupervisor/Ctl ./test/e2e/mortred -update to create it)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs from the golden file\n--- got:\n%s--- want:\n%s", name, got, want)
	}
}

func testCtl(t *testing.T, sup *stack.Supervisor) {
	dir := t.TempDir()
	dark := filepath.Join(dir, "dark.png")
	notImage := filepath.Join(dir, "notes.png")
	if err := os.WriteFile(dark, testmodel.GrayPNG(16, 16, 30), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notImage, []byte("not an image at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := func(t *testing.T, args ...string) ctlRun {
		t.Helper()
		r := ctl(t, sup, nil, args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("mortredctl %v: %s", args, r)
		}
		return r
	}

	t.Run("status", func(t *testing.T) {
		golden(t, "status", normaliseTable(sup, ok(t, "status").stdout))
	})
	t.Run("catalog", func(t *testing.T) {
		golden(t, "catalog", normalise(sup, ok(t, "catalog").stdout))
	})
	t.Run("logs", func(t *testing.T) {
		golden(t, "logs-first-line", normalise(sup, ok(t, "logs", "TM", "--offset", "0", "--limit", "1").stdout))
		r := ok(t, "logs", "TM", "--limit", "3")
		var page struct {
			Total int64    `json:"total"`
			Lines []string `json:"lines"`
		}
		rep, _ := sup.API("GET", "/api/v1/servers/TM/logs?offset=99999999")
		if err := rep.JSON(&page); err != nil {
			t.Fatal(err)
		}
		rep, _ = sup.API("GET", fmt.Sprintf("/api/v1/servers/TM/logs?offset=%d&limit=3", page.Total-3))
		if err := rep.JSON(&page); err != nil {
			t.Fatal(err)
		}
		if r.stdout != strings.Join(page.Lines, "\n")+"\n" {
			t.Fatalf("logs --limit 3:\n%s\nAPI's last three:\n%q", r.stdout, page.Lines)
		}
		r = ok(t, "--json", "logs", "TM", "--offset", "0", "--limit", "2")
		var p struct {
			Offset int64    `json:"offset"`
			Lines  []string `json:"lines"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || p.Offset != 0 || len(p.Lines) != 2 {
			t.Fatalf("logs --json: %v %s", err, r)
		}
	})
	t.Run("infer", func(t *testing.T) {
		golden(t, "infer", normalise(sup, ok(t, "infer", "TM", "--image", dark).stdout))
		r := ok(t, "--json", "infer", "TM", "--image", dark)
		var env stack.Response
		if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || env.Status != 0 || env.TaskID != "mortredctl" || len(env.Results) != 1 {
			t.Fatalf("infer --json: %v %s", err, r)
		}
	})
	t.Run("json", func(t *testing.T) {
		var st struct {
			Gateway stack.Status   `json:"gateway"`
			Servers []stack.Status `json:"servers"`
		}
		r := ok(t, "status", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Gateway.State != "running" || len(st.Servers) != len(sup.Conf.Models) {
			t.Fatalf("status --json: %v %s", err, r)
		}
		var cat struct {
			Servers []struct{ ID, URI string } `json:"servers"`
		}
		r = ok(t, "--json", "catalog")
		if err := json.Unmarshal([]byte(r.stdout), &cat); err != nil || len(cat.Servers) != len(sup.Conf.Models) || cat.Servers[0].ID != "BROKEN" {
			t.Fatalf("catalog --json: %v %s", err, r)
		}
	})
	t.Run("exit codes", func(t *testing.T) {
		free := testproc.FreePort(t)
		cases := []struct {
			name   string
			env    []string
			args   []string
			code   int
			stderr string
		}{
			{"no command", nil, nil, 2, "mortredctl: no command\nusage: mortredctl"},
			{"unknown command", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
			{"unknown flag", nil, []string{"--bogus", "status"}, 2, "flag provided but not defined: -bogus"},
			{"start without id", nil, []string{"start"}, 2, "start takes one server id"},
			{"logs limit 0", nil, []string{"logs", "TM", "--limit", "0"}, 2, "--limit must be from 1 to 1000"},
			{"infer without image", nil, []string{"infer", "TM"}, 2, "infer takes one model id and --image PATH"},
			{"init-edge bad mode", nil, []string{"init-edge", "--mode", "magic", "--out", t.TempDir()}, 2, "--mode must be lan, acme or files"},
			{"unknown id", nil, []string{"start", "NOPE"}, 1, `answered 404 Not Found: no server "NOPE"; GET /api/v1/catalog lists them`},
			{"disabled", nil, []string{"start", "DISABLED"}, 1, "answered 500 Internal Server Error: DISABLED is disabled in"},
			{"wrong token", []string{"MORTREDCTL_TOKEN=wrong"}, []string{"status"}, 1, "refused the token (401): check --token / MORTRED_API_TOKEN"},
			{"no token", []string{"MORTRED_API_TOKEN="}, []string{"catalog"}, 1, "no token: pass --token, or set MORTREDCTL_TOKEN or MORTRED_API_TOKEN"},
			{"supervisor down", nil, []string{"--addr", fmt.Sprintf("127.0.0.1:%d", free), "status"}, 1, "(connection refused): is it running?"},
			{"gateway down", nil, []string{"--gateway", fmt.Sprintf("127.0.0.1:%d", free), "infer", "TM", "--image", dark}, 1, "cannot reach the gateway at"},
			{"missing image", nil, []string{"infer", "TM", "--image", filepath.Join(dir, "nope.png")}, 1, "cannot read the image: stat " + filepath.Join(dir, "nope.png") + ": no such file or directory (sample images: `go run ./mortred/model/ppocr/textimg/gen -out DIR`"},
			{"not an image", nil, []string{"infer", "TM", "--image", notImage}, 1, "answered 400 Bad Request: empty input image: unsupported or undecodable image"},
			{"unknown model", nil, []string{"infer", "NOPE", "--image", dark}, 1, "answered 404 Not Found: no model with catalog id 'NOPE'"},
			{"help", nil, []string{"help"}, 0, ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := ctl(t, sup, c.env, c.args...)
				if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
					t.Fatalf("want exit %d and stderr containing %q; got %s", c.code, c.stderr, r)
				}
				if c.code != 0 && r.stderr == "" {
					t.Fatal("failure without a message")
				}
			})
		}
		golden(t, "error-unknown-id", normalise(sup, ctl(t, sup, nil, "start", "NOPE").stderr))
	})
	t.Run("init-trust", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mortred.env")
		r := ok(t, "init-trust", "--out", path)
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 || !strings.Contains(r.stdout, "set -a; . "+path+"; set +a") {
			t.Fatalf("%v %v %s", st, err, r)
		}
		data, _ := os.ReadFile(path)
		tokens := map[string]bool{}
		for _, name := range []string{"MORTRED_API_TOKEN", "MORTRED_METRICS_TOKEN", "MORTRED_AUTH_TOKEN"} {
			m := regexp.MustCompile(`(?m)^` + name + `=(\S{40,})$`).FindStringSubmatch(string(data))
			if m == nil || tokens[m[1]] {
				t.Fatalf("%s missing or not distinct:\n%s", name, data)
			}
			tokens[m[1]] = true
		}
		if r := ctl(t, sup, nil, "init-trust", "--out", path); r.code != 1 || !strings.Contains(r.stderr, "exists; pass --force") {
			t.Fatalf("overwrite without --force: %s", r)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
			t.Fatal("the file changed without --force")
		}
		ok(t, "init-trust", "--out", path, "--force")
		if after, _ := os.ReadFile(path); bytes.Equal(after, data) {
			t.Fatal("--force kept the old tokens")
		}
	})
	t.Run("lifecycle", func(t *testing.T) {
		before := sup.WaitReady(t, "TM", 30*time.Second)
		golden(t, "stop", normalise(sup, ok(t, "stop", "TM").stdout))
		st := sup.Server(t, "TM")
		if st.State != "stopped" || st.PID != 0 || testproc.Alive(before.PID) {
			t.Fatalf("after stop: %+v (old pid alive: %v)", st, testproc.Alive(before.PID))
		}
		if r := ok(t, "status"); !regexp.MustCompile(`(?m)^TM +stopped +no +- +0 +\d+ +last exit: `).MatchString(r.stdout) {
			t.Fatalf("status after stop:\n%s", r.stdout)
		}
		rep := mustDo(t, stack.Req{URL: sup.Conf.GatewayURL() + "/v1/models/TM/infer", Token: sup.Tokens.API, Body: stack.Envelope("x", "", stack.DarkPNG)})
		wantEnvelope(t, rep, 503, 65)
		golden(t, "start", normalise(sup, ok(t, "start", "TM").stdout))
		started := sup.WaitReady(t, "TM", 60*time.Second)
		r := ok(t, "--json", "restart", "TM")
		var res struct {
			OK bool `json:"ok"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.OK {
			t.Fatalf("restart --json: %s", r)
		}
		after := sup.WaitReady(t, "TM", 60*time.Second)
		if after.PID == started.PID || after.RestartCount != 0 {
			t.Fatalf("restart: before %+v after %+v", started, after)
		}
		inferOK(t, sup, "TM")
	})
}
