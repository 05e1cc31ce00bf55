package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// TestRollout: PPOCR_CLS (real ONNX Runtime) behind the supervisor's
// gateway, under about 50 requests/s of sync inferences and async jobs.
// A rollout to a new model file, then a rollback, fail no request, and
// every answer carries the old or the new version; a corrupt ONNX file and
// a config whose answers break the contract are refused before any traffic
// sees them; the replaced version stops once drained.
func TestRollout(t *testing.T) {
	t.Parallel()
	lib := orttest.Lib(t)
	repo, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	modelConf := filepath.Join(repo, "conf", "models", "ppocr_cls.toml")
	// The model's own warm-up images: a text line, upright and upside down.
	dir := t.TempDir()
	upright, flipped := filepath.Join(dir, "line.png"), filepath.Join(dir, "line-180.png")
	line := textimg.Line("warm up 123", 32, 6)
	writePNG(t, upright, line)
	writePNG(t, flipped, textimg.Rotate180(line))
	conf := stack.WriteConf(t, []stack.Model{{ID: "PPOCR_CLS", Keys: map[string]any{
		"model_config_file_path": modelConf, "worker_nums": 1, "intra_op_threads": 1,
		// Finished jobs stay fetchable for 3 s: the drained version stops soon.
		"async_job_ttl": 3000,
		"warmup_images": []string{upright, flipped},
	}}}, nil)
	tk := stack.NewTokens()
	sup := stack.StartSupervisorWith(t, conf, tk, nil, "MORTRED_ORT_LIB="+lib)
	before := sup.WaitReady(t, "PPOCR_CLS", 90*time.Second)
	const v1 = "ch_ppocr_mobile_v2.0_cls"

	// The new version: the same graph under another path, so its answers
	// are the old one's and its version is v1+<its SHA-256 prefix>.
	onnx := filepath.Join(dir, "cls-v2.onnx")
	copyFile(t, filepath.Join(orttest.ModelDir(t), "ppocr", "ch_ppocr_mobile_v2.0_cls_infer.onnx"), onnx)

	gw := sup.Conf.GatewayURL() + "/v1/models/PPOCR_CLS"
	image := stack.Envelope("", "", stack.LightPNG)
	var seq atomic.Int64
	call := func() (stack.Reply, error) {
		if seq.Add(1)%4 != 0 {
			return stack.Do(stack.Req{Method: "POST", URL: gw + "/infer", Token: tk.API, CType: "application/json", Body: image})
		}
		// An async job: submitted, waited for and fetched.
		sub, err := stack.Do(stack.Req{Method: "POST", URL: gw + "/jobs", Token: tk.API, CType: "application/json", Body: image})
		if err != nil || sub.Code != 202 {
			return sub, err
		}
		var j struct {
			PollURL   string `json:"poll_url"`
			ResultURL string `json:"result_url"`
		}
		if err := sub.JSON(&j); err != nil {
			return sub, err
		}
		base := sup.Conf.GatewayURL()
		if w, err := stack.Do(stack.Req{URL: base + j.PollURL + "/wait?timeout=30000", Token: tk.API}); err != nil || w.Code != 200 || !bytes.Contains(w.Body, []byte(`"state":"done"`)) {
			return w, fmt.Errorf("job wait: %v", err)
		}
		return stack.Do(stack.Req{URL: base + j.ResultURL, Token: tk.API})
	}
	versionOf := func(r stack.Reply) string {
		var env struct {
			Status int `json:"status"`
			Model  struct {
				Version string `json:"version"`
			} `json:"model"`
		}
		if json.Unmarshal(r.Body, &env) != nil || env.Status != 0 {
			return ""
		}
		return env.Model.Version
	}
	// check: every answer of a load run was served, by an allowed version.
	check := func(what string, outs []outcome, allowed ...string) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for _, o := range outs {
			v := versionOf(o.rep)
			if o.err != nil || o.rep.Code != 200 || !contains(allowed, v) {
				t.Errorf("%s: a request failed or was served by an unexpected version: %v %v (version %q, allowed %q)", what, o.rep, o.err, v, allowed)
				continue
			}
			seen[v]++
		}
		t.Logf("%s: %d requests, by version %v", what, len(outs), seen)
		return seen
	}
	loadWhile := func(action func()) []outcome {
		done := make(chan []outcome)
		stop := make(chan struct{})
		go func() {
			done <- runLoadUntil(5, 3000, 2*time.Minute, 95*time.Millisecond, stop, call)
		}()
		time.Sleep(time.Second)
		action()
		time.Sleep(2 * time.Second)
		close(stop)
		return <-done
	}

	// Broken versions are refused at warm-up; traffic never sees them.
	badOnnx := filepath.Join(dir, "corrupt.onnx")
	if err := os.WriteFile(badOnnx, bytes.Repeat([]byte("not a graph "), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	mc, err := os.ReadFile(modelConf)
	if err != nil {
		t.Fatal(err)
	}
	// Three labels for a two-way output: the answers break the contract.
	badConf := filepath.Join(dir, "bad_labels.toml")
	badText := strings.Replace(string(mc), `labels = ["0", "180"]`, `labels = ["0", "90", "180"]`, 1)
	badText = strings.Replace(badText, `model_dir = "../../.deps/models"`, `model_dir = "`+orttest.ModelDir(t)+`"`, 1)
	badText = strings.Replace(badText, `version = "ch_ppocr_mobile_v2.0_cls"`, `version = "bad-labels"`, 1)
	if badText == string(mc) {
		t.Fatal("could not make the bad config: conf/models/ppocr_cls.toml changed shape")
	}
	if err := os.WriteFile(badConf, []byte(badText), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another model that loads and answers well, but with five class
	// scores where the version in service gives two.
	nsfw, err := os.ReadFile(filepath.Join(repo, "conf", "models", "nsfw_mobilenet_v2.toml"))
	if err != nil {
		t.Fatal(err)
	}
	otherConf := filepath.Join(dir, "other_shape.toml")
	if err := os.WriteFile(otherConf, []byte(strings.Replace(string(nsfw), `model_dir = "../../.deps/models"`, `model_dir = "`+orttest.ModelDir(t)+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	outs := loadWhile(func() {
		for _, c := range []struct{ flag, file, want string }{
			{"--model-file", badOnnx, "did not start"},
			{"--config", badConf, `version "bad-labels" did not start`},
			{"--config", otherConf, "failed warm-up"},
		} {
			r := ctl(t, sup, nil, "rollout", "PPOCR_CLS", c.flag, c.file)
			if r.code != 1 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, `version "`+v1+`" keeps serving`) {
				t.Errorf("rollout %s %s: %s; want it refused (%q)", c.flag, c.file, r, c.want)
			}
			t.Logf("refused: %s", strings.TrimSpace(r.stderr))
			st := sup.Server(t, "PPOCR_CLS")
			if st.PID != before.PID {
				t.Errorf("after a refused rollout PPOCR_CLS is pid %d, want %d still serving", st.PID, before.PID)
			}
		}
	})
	check("refused rollouts", outs, v1)

	// The rollout under load.
	var v2 string
	outs = loadWhile(func() {
		r := ctl(t, sup, nil, "rollout", "PPOCR_CLS", "--model-file", onnx)
		if r.code != 0 || !strings.Contains(r.stdout, `serves; it passed warm-up on 2 samples`) {
			t.Fatalf("rollout: %s", r)
		}
		var rs struct {
			Version  string `json:"version"`
			Instance int    `json:"instance"`
		}
		rr, err := sup.API("GET", "/api/v1/servers/PPOCR_CLS")
		if err != nil || rr.JSON(&rs) != nil {
			t.Fatalf("status after the rollout: %v %v", rr, err)
		}
		v2 = rs.Version
		if !strings.HasPrefix(v2, v1+"+") || rs.Instance != 1 {
			t.Fatalf("after the rollout: version %q instance %d; want %s+<sha> and instance 1", v2, rs.Instance, v1)
		}
	})
	seen := check("rollout", outs, v1, v2)
	if seen[v2] == 0 {
		t.Errorf("no answer from the new version after the switch: %v", seen)
	}
	// The old version drains and stops (its jobs outlive the 3 s TTL).
	testproc.Eventually(t, 60*time.Second, "the old version stopped", func() error {
		if testproc.Alive(before.PID) {
			return fmt.Errorf("pid %d still runs", before.PID)
		}
		return nil
	})
	// The rollout is done once the stopped process is reaped.
	testproc.Eventually(t, 10*time.Second, "the rollout done", func() error {
		if r, err := sup.API("GET", "/api/v1/servers/PPOCR_CLS"); err != nil || !bytes.Contains(r.Body, []byte(`"state":"done"`)) || bytes.Contains(r.Body, []byte(`"draining"`)) {
			return fmt.Errorf("status once drained: %v %v", r, err)
		}
		return nil
	})

	// And back.
	outs = loadWhile(func() {
		if r := ctl(t, sup, nil, "rollback", "PPOCR_CLS"); r.code != 0 || !strings.Contains(r.stdout, `version "`+v1+`" (instance 2) serves`) {
			t.Fatalf("rollback: %s", r)
		}
	})
	if seen := check("rollback", outs, v1, v2); seen[v1] == 0 {
		t.Errorf("no answer from the old version after the rollback: %v", seen)
	}

	// A supervisor that restarts serves the version in service (instance
	// 2, v1 again) on a fresh port, and can still roll back to v2.
	if err := sup.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, ok := sup.ExitCode(60 * time.Second); !ok || code != 0 {
		t.Fatalf("supervisor exit %d (exited %v)", code, ok)
	}
	sup = stack.StartSupervisorWith(t, conf, tk, nil, "MORTRED_ORT_LIB="+lib)
	st := sup.WaitReady(t, "PPOCR_CLS", 90*time.Second)
	var rs struct {
		Version  string `json:"version"`
		Instance int    `json:"instance"`
		Port     int    `json:"port"`
	}
	if rr, err := sup.API("GET", "/api/v1/servers/PPOCR_CLS"); err != nil || rr.JSON(&rs) != nil || rs.Version != v1 || rs.Instance != 2 || rs.Port == conf.Models["PPOCR_CLS"].Port {
		t.Fatalf("after a restart: %+v (pid %d) %v; want version %s, instance 2, not the catalog's port", rs, st.PID, err, v1)
	}
	if r, err := call(); err != nil || r.Code != 200 || versionOf(r) != v1 {
		t.Fatalf("an inference after the restart: %v %v", r, err)
	}
	if r := ctl(t, sup, nil, "rollback", "PPOCR_CLS"); r.code != 0 || !strings.Contains(r.stdout, `version "`+v2+`" (instance 3) serves`) {
		t.Fatalf("rollback after a restart: %s", r)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s && s != "" {
			return true
		}
	}
	return false
}

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
