package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// TestServerFindsSetupWithoutVariables runs the real mortred-server with
// the real PP-OCR classifier and no MORTRED_* variable, the way an
// operator runs it from a checkout after `make setup`: it finds .deps/
// beside the working directory, else beside the binary's directory
// (bin/../.deps), and with neither it exits saying every path it tried
// and to run `make setup`.
func TestServerFindsSetupWithoutVariables(t *testing.T) {
	lib, store := orttest.Lib(t), orttest.ModelDir(t)
	root := t.TempDir()
	// A .deps of our own, the shape `make setup` leaves, pointing at the
	// installed files.
	fullDeps := filepath.Join(root, "deps-full")
	libOnly := filepath.Join(root, "deps-lib-only")
	for _, d := range []string{fullDeps, libOnly} {
		mkdir(t, d)
		symlink(t, filepath.Dir(lib), filepath.Join(d, "onnxruntime"))
	}
	symlink(t, store, filepath.Join(fullDeps, "models"))

	// The shipped configuration, copied where its model_dir
	// (../../.deps/models) finds nothing, so only the search can succeed.
	repo, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "conf")
	copyFile(t, filepath.Join(repo, "conf/server/ppocr_cls.toml"), filepath.Join(conf, "server/ppocr_cls.toml"))
	copyFile(t, filepath.Join(repo, "conf/models/ppocr_cls.toml"), filepath.Join(conf, "models/ppocr_cls.toml"))
	serverConf := filepath.Join(conf, "server/ppocr_cls.toml")

	built := testproc.Bin(t, "mortred-server")
	// A checkout-like directory with the binary in bin/ and .deps beside it.
	app := filepath.Join(root, "app")
	copyFile(t, built, filepath.Join(app, "bin/mortred-server"))
	if err := os.Chmod(filepath.Join(app, "bin/mortred-server"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, fullDeps, filepath.Join(app, ".deps"))
	work := filepath.Join(root, "work") // a working directory with .deps
	mkdir(t, work)
	symlink(t, fullDeps, filepath.Join(work, ".deps"))
	workLibOnly := filepath.Join(root, "work-lib-only")
	mkdir(t, workLibOnly)
	symlink(t, libOnly, filepath.Join(workLibOnly, ".deps"))
	empty := filepath.Join(root, "empty")
	mkdir(t, empty)

	env := stack.BaseEnv("MORTRED_LISTEN_PORT=0", "MORTRED_AUTH_TOKEN=deps-test-token", "MORTRED_LISTEN_HOST=127.0.0.1")
	run := func(t *testing.T, bin, dir string) *testproc.Proc {
		return testproc.Start(t, testproc.Options{Env: env, Dir: dir, Name: "mortred-server"}, bin, "--config", serverConf)
	}
	ready := func(t *testing.T, p *testproc.Proc) {
		addr := p.WaitOutput(t, 30*time.Second, `mortred-server listening on (\S+)`)[1]
		testproc.Eventually(t, 60*time.Second, "/ready", func() error {
			if p.Exited() {
				t.Fatalf("exited: %s", p.Output())
			}
			r, err := stack.Do(stack.Req{URL: "http://" + addr + "/ready"})
			if err == nil && r.Code != 200 {
				err = errString(r.String())
			}
			return err
		})
	}
	fails := func(t *testing.T, p *testproc.Proc, wants ...string) {
		code, ok := p.ExitCode(60 * time.Second)
		if !ok || code != 1 {
			t.Fatalf("exit code %d (exited %v), want 1:\n%s", code, ok, p.Output())
		}
		out := p.Output()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}

	t.Run(".deps beside the working directory", func(t *testing.T) {
		ready(t, run(t, built, work))
	})
	t.Run(".deps beside the binary's directory", func(t *testing.T) {
		ready(t, run(t, filepath.Join(app, "bin/mortred-server"), empty))
	})
	t.Run("nothing found: every path tried and make setup", func(t *testing.T) {
		fails(t, run(t, built, empty),
			"no ONNX Runtime library found",
			"MORTRED_ORT_LIB (unset)",
			filepath.Join(empty, ".deps/onnxruntime/libonnxruntime.so.1")+" (beside the working directory)",
			filepath.Join(filepath.Dir(filepath.Dir(built)), ".deps/onnxruntime/libonnxruntime.so.1")+" (beside the binary's directory",
			"run `make setup` in the checkout")
	})
	t.Run("library but no models: the model store's paths and make setup", func(t *testing.T) {
		fails(t, run(t, built, workLibOnly),
			"no model store holding ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx found",
			"MORTRED_MODEL_DIR (unset)",
			filepath.Join(root, ".deps/models")+" (model_dir in ",
			filepath.Join(workLibOnly, ".deps/models")+" (beside the working directory)",
			"run `make setup` in the checkout")
	})
	t.Run("under the supervisor: the status note says what to run", func(t *testing.T) {
		testproc.Bin(t, "mortred-gateway")
		api, gwPort := testproc.FreePort(t), testproc.FreePort(t)
		writeFile(t, filepath.Join(conf, "mortred.toml"), fmt.Sprintf(`[supervisor]
api_port = %d
log_dir = "logs"
server_conf_dir = "server"
[gateway]
port = %d
`, api, gwPort))
		tk := stack.NewTokens()
		p := testproc.Start(t, testproc.Options{Env: tk.Env(), Dir: empty, Name: "mortred-supervisor"},
			testproc.Bin(t, "mortred-supervisor"), "--config", filepath.Join(conf, "mortred.toml"))
		sup := &stack.Supervisor{Proc: p, Conf: &stack.Conf{Dir: conf, APIPort: api, GatewayPort: gwPort}, Tokens: tk}
		testproc.Eventually(t, 60*time.Second, "the supervisor's API", func() error {
			if p.Exited() {
				t.Fatalf("supervisor exited: %s", p.Output())
			}
			_, err := sup.API("GET", "/api/v1/status")
			return err
		})
		st := sup.WaitFor(t, "PPOCR_CLS", 60*time.Second, "a note after the first exit", func(s stack.Status) bool { return s.RestartCount >= 1 })
		for _, w := range []string{"exited (exit status 1): loading model ", "no ONNX Runtime library found", "run `make setup` in the checkout"} {
			if !strings.Contains(st.Error, w) {
				t.Errorf("status note lacks %q: %q", w, st.Error)
			}
		}
	})
	t.Run("a wrong MORTRED_ORT_LIB is an error, not a guess", func(t *testing.T) {
		bad := filepath.Join(empty, "nope.so")
		p := testproc.Start(t, testproc.Options{Env: append(env, "MORTRED_ORT_LIB="+bad), Dir: work, Name: "mortred-server"}, built, "--config", serverConf)
		fails(t, p, bad, "MORTRED_ORT_LIB")
	})
}

type errString string

func (e errString) Error() string { return string(e) }

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	mkdir(t, filepath.Dir(to))
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
