package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// The real binaries: two model servers on real ONNX models (the PP-OCR
// direction classifier and BlazeFace) behind mortred-gateway with a key
// file, over loopback, as an operator runs them.

func TestMain(m *testing.M) {
	testproc.Main(m, testproc.Suite{
		Build: []string{"mortred-server", "mortred-gateway"},
		AtEnd: []func(){client.CloseIdleConnections},
	})
}

const (
	operatorTok = "operator-token-0123456789abcdef"
	metricsTok  = "metrics-token-0123456789abcdef"
	modelTok    = "model-token-0123456789abcdef"
)

var client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// key is one [[key]] of the file: its id, secret and TOML lines.
type key struct{ id, secret, toml string }

func newKey(t *testing.T, id, toml string) key {
	t.Helper()
	s, _, err := keys.NewSecret(keys.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	return key{id, s, toml}
}

func keyFile(ks ...key) string {
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "[[key]]\nid = %q\nhash = %q\n%s\n\n", k.id, keys.HashSecret(k.secret), k.toml)
	}
	return b.String()
}

// replace writes path atomically (a rename, as mortredctl keys does).
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rig is the deployment: its directory, the gateway's URL and process.
type rig struct {
	dir, url, keys string
	gw             *testproc.Proc
}

// models are the two catalog entries: id, model file, server_uri.
var models = []struct{ id, conf, uri string }{
	{"PPOCR_CLS", "ppocr_cls.toml", "/mortred_ai_server_v1/ocr/ppocr_cls"},
	{"BLAZEFACE", "blazeface.toml", "/mortred_ai_server_v1/face_detection/blazeface"},
}

// deploy writes conf (mortred.toml with keys_file relative to it, the two
// model-server files), starts both model servers and waits until they are
// ready. The gateway is started by startGateway.
func deploy(t *testing.T, keyText string) *rig {
	t.Helper()
	lib, modelDir := orttest.Lib(t), orttest.ModelDir(t)
	root := orttest.RepoRoot()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "server"), 0o755); err != nil {
		t.Fatal(err)
	}
	gwPort := testproc.FreePort(t)
	r := &rig{dir: dir, url: fmt.Sprintf("http://127.0.0.1:%d", gwPort), keys: filepath.Join(dir, "keys.toml")}
	replace(t, r.keys, keyText)
	writeFile(t, filepath.Join(dir, "mortred.toml"), fmt.Sprintf("[supervisor]\napi_port = %d\nserver_conf_dir = \"server\"\n[gateway]\nhost = \"127.0.0.1\"\nport = %d\nkeys_file = \"keys.toml\"\n",
		testproc.FreePort(t), gwPort))
	var wg sync.WaitGroup
	for _, m := range models {
		port := testproc.FreePort(t)
		conf := filepath.Join(dir, "server", m.id+".toml")
		writeFile(t, conf, fmt.Sprintf("[%s]\nhost = \"127.0.0.1\"\nport = %d\nserver_uri = %q\nworker_nums = 1\nintra_op_threads = 1\nasync_enabled = true\nmodel_config_file_path = %q\n",
			m.id, port, m.uri, filepath.Join(root, "conf", "models", m.conf)))
		p := testproc.Start(t, testproc.Options{Name: m.id, Env: testproc.CleanEnv([]string{"MORTRED"},
			"MORTRED_AUTH_TOKEN="+modelTok, "MORTRED_ORT_LIB="+lib, "MORTRED_MODEL_DIR="+modelDir)},
			testproc.Bin(t, "mortred-server"), "--config", conf)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(90 * time.Second)
			for time.Now().Before(deadline) && !p.Exited() {
				if resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", port)); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						return
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Errorf("model server %s never ready:\n%s", m.id, testproc.Tail(p.Output(), 3000))
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return r
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func gatewayEnv() []string {
	return testproc.CleanEnv([]string{"MORTRED"}, "MORTRED_API_TOKEN="+operatorTok, "MORTRED_METRICS_TOKEN="+metricsTok, "MORTRED_AUTH_TOKEN="+modelTok)
}

func (r *rig) startGateway(t *testing.T) {
	t.Helper()
	r.gw = testproc.Start(t, testproc.Options{Name: "mortred-gateway", Env: gatewayEnv(), MustStop: true},
		testproc.Bin(t, "mortred-gateway"), "--config", filepath.Join(r.dir, "mortred.toml"))
	testproc.Until(t, 30*time.Second, "the gateway's /healthz", func() bool {
		if r.gw.Exited() {
			t.Fatalf("the gateway exited:\n%s", r.gw.Output())
		}
		resp, err := client.Get(r.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

type reply struct {
	code int
	hdr  http.Header
	body []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %.400s", r.code, r.body) }

func (r *rig) do(t *testing.T, method, path, secret string, body []byte) reply {
	t.Helper()
	rep, err := r.try(method, path, secret, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return rep
}

func (r *rig) try(method, path, secret string, body []byte) (reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, r.url+path, rd)
	if err != nil {
		return reply{}, err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}, err
}

// envelopeStatus is the answer's top-level status, -1 when none.
func envelopeStatus(rep reply) int {
	var env struct {
		Status *int `json:"status"`
	}
	if json.Unmarshal(rep.body, &env) != nil || env.Status == nil {
		return -1
	}
	return *env.Status
}

// images is an envelope of n copies of one photograph.
func images(t *testing.T, photo string, n int) []byte {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString(modeltest.Photo(t, photo))
	q := make([]string, n)
	for i := range q {
		q[i] = `"` + b64 + `"`
	}
	return []byte(`{"images":[` + strings.Join(q, ",") + `]}`)
}

type usage struct {
	Keys   []keys.Usage        `json:"keys"`
	Series keys.SeriesSnapshot `json:"series"`
}

func (r *rig) usage(t *testing.T, id string) keys.Usage {
	t.Helper()
	rep := r.do(t, "GET", "/stats.json", metricsTok, nil)
	var u usage
	if rep.code != 200 || json.Unmarshal(rep.body, &u) != nil {
		t.Fatalf("/stats.json: %s", rep)
	}
	for _, k := range u.Keys {
		if k.ID == id {
			return k
		}
	}
	t.Fatalf("/stats.json has no key %s: %s", id, rep)
	return keys.Usage{}
}

// exhaust sends body until the key is refused (at most limit+3 times) and
// returns the 429.
func (r *rig) exhaust(t *testing.T, path, secret string, body []byte, limit int) reply {
	t.Helper()
	for i := 0; i < limit+3; i++ {
		rep := r.do(t, "POST", path, secret, body)
		if rep.code == http.StatusTooManyRequests {
			return rep
		}
		if rep.code != 200 {
			t.Fatalf("request %d before the limit: %s", i+1, rep)
		}
	}
	t.Fatalf("no 429 within %d requests", limit+3)
	return reply{}
}

// waitRetryAfter checks a 429's headers, sleeps its Retry-After and
// checks that the request is then admitted.
func (r *rig) waitRetryAfter(t *testing.T, rep reply, unit, path, secret string, body []byte) {
	t.Helper()
	if envelopeStatus(rep) != int(envelope.StatusRateLimited) {
		t.Fatalf("429 envelope: %s", rep)
	}
	for _, h := range []string{"Retry-After", "Retry-After-Ms", "X-Ratelimit-Limit-" + unit, "X-Ratelimit-Remaining-" + unit, "X-Ratelimit-Reset-" + unit} {
		if rep.hdr.Get(h) == "" {
			t.Fatalf("429 without %s: %v", h, rep.hdr)
		}
	}
	ms, err := strconv.ParseInt(rep.hdr.Get("Retry-After-Ms"), 10, 64)
	secs, err2 := strconv.Atoi(rep.hdr.Get("Retry-After"))
	if err != nil || err2 != nil || ms <= 0 || ms > 61_000 || int64(secs)*1000 < ms || int64(secs-1)*1000 >= ms {
		t.Fatalf("Retry-After %q, retry-after-ms %q: want whole seconds rounding up 1..61000 ms", rep.hdr.Get("Retry-After"), rep.hdr.Get("Retry-After-Ms"))
	}
	// Asked again at once, it is still refused: the wait is not made up.
	if again := r.do(t, "POST", path, secret, body); again.code != http.StatusTooManyRequests {
		t.Fatalf("right after the 429: %s", again)
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	if after := r.do(t, "POST", path, secret, body); after.code != 200 {
		t.Fatalf("after waiting Retry-After (%d ms): %s", ms, after)
	}
}

func TestGatewayKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("real model servers and the gateway binary")
	}
	ocr := newKey(t, "ocr", `models = ["PPOCR_*"]`)
	ocr2 := newKey(t, "ocr-two", `models = ["PPOCR_CLS"]`)
	face := newKey(t, "face", `models = ["BLAZEFACE"]`)
	rpm := newKey(t, "rpm", "rpm = 3")
	ipm := newKey(t, "ipm", "ipm = 40")
	conc := newKey(t, "conc", "max_concurrent = 1")
	load := newKey(t, "load", "")
	gone := newKey(t, "gone", "")
	all := []key{ocr, ocr2, face, rpm, ipm, conc, load, gone}
	r := deploy(t, keyFile(all...))
	r.startGateway(t)
	text := images(t, "text.png", 1)
	astro := images(t, "astronaut.png", 1)
	const cls, bf = "/v1/models/PPOCR_CLS/infer", "/v1/models/BLAZEFACE/infer"

	t.Run("scopes", func(t *testing.T) {
		for _, c := range []struct {
			what, path, secret string
			body               []byte
			code, status       int
			want               string
		}{
			{"ocr key on PPOCR_CLS", cls, ocr.secret, text, 200, 0, `"category":"`},
			{"ocr key on PPOCR_CLS, legacy route", models[0].uri, ocr.secret, text, 200, 0, `"category":"`},
			{"ocr key on BLAZEFACE", bf, ocr.secret, astro, 403, int(envelope.StatusForbidden), "ocr"},
			{"face key on BLAZEFACE", bf, face.secret, astro, 200, 0, `"keypoints":[[`},
			{"face key on PPOCR_CLS", cls, face.secret, text, 403, int(envelope.StatusForbidden), "face"},
			{"face key on the legacy PPOCR_CLS route", models[0].uri, face.secret, text, 403, int(envelope.StatusForbidden), ""},
			{"unknown key", cls, "sk-mortred-" + strings.Repeat("x", 43), text, 401, int(envelope.StatusUnauthorized), ""},
			{"no key", cls, "", text, 401, int(envelope.StatusUnauthorized), ""},
			{"metrics token", cls, metricsTok, text, 401, int(envelope.StatusUnauthorized), ""},
			{"operator on PPOCR_CLS", cls, operatorTok, text, 200, 0, `"category":"`},
			{"operator on BLAZEFACE", bf, operatorTok, astro, 200, 0, `"keypoints":[[`},
		} {
			rep := r.do(t, "POST", c.path, c.secret, c.body)
			if rep.code != c.code || envelopeStatus(rep) != c.status || !strings.Contains(string(rep.body), c.want) {
				t.Errorf("%s: %s, want HTTP %d status %d with %q", c.what, rep, c.code, c.status, c.want)
			}
			if rep.hdr.Get(envelope.HeaderItems) != "" {
				t.Errorf("%s: %s reached the client", c.what, envelope.HeaderItems)
			}
		}
		if u := r.usage(t, "face"); u.Images != 1 || u.Requests["200"] != 1 || u.Rejections[string(keys.ModelScope)] != 2 {
			t.Errorf("face usage %+v: want 1 image, one 200, two scope rejections", u)
		}
	})

	t.Run("jobs are their tenant's", func(t *testing.T) {
		rep := r.do(t, "POST", "/v1/models/PPOCR_CLS/jobs", ocr.secret, images(t, "text.png", 2))
		var acc envelope.JobAccepted
		if rep.code != 202 || json.Unmarshal(rep.body, &acc) != nil || !strings.HasPrefix(acc.PollURL, "/v1/models/PPOCR_CLS/jobs/") {
			t.Fatalf("submit: %s", rep)
		}
		if rep := r.do(t, "GET", acc.PollURL+"/wait?timeout=30000", ocr.secret, nil); rep.code != 200 || !strings.Contains(string(rep.body), `"state":"done"`) {
			t.Fatalf("own wait: %s", rep)
		}
		for _, p := range []string{acc.PollURL, acc.PollURL + "/wait?timeout=10", acc.ResultURL} {
			if rep := r.do(t, "GET", p, ocr2.secret, nil); rep.code != 404 || envelopeStatus(rep) != int(envelope.StatusNotFound) {
				t.Errorf("another tenant's read of %s: %s, want 404", p, rep)
			}
			if rep := r.do(t, "GET", p, face.secret, nil); rep.code != 403 {
				t.Errorf("a key without PPOCR_CLS in scope reads %s: %s, want 403", p, rep)
			}
			for _, s := range []string{ocr.secret, operatorTok} {
				if rep := r.do(t, "GET", p, s, nil); rep.code != 200 {
					t.Errorf("read of %s: %s", p, rep)
				}
			}
		}
		res := r.do(t, "GET", acc.ResultURL, ocr.secret, nil)
		if !strings.Contains(string(res.body), `"category":"`) {
			t.Errorf("result: %s", res)
		}
		if u := r.usage(t, "ocr-two"); u.Requests["404"] != 3 {
			t.Errorf("ocr-two usage %+v: want three 404", u)
		}
	})

	t.Run("limits", func(t *testing.T) {
		t.Run("rpm", func(t *testing.T) {
			t.Parallel()
			rep := r.exhaust(t, cls, rpm.secret, text, 3)
			r.waitRetryAfter(t, rep, "Requests", cls, rpm.secret, text)
		})
		t.Run("ipm", func(t *testing.T) {
			t.Parallel()
			many := images(t, "text.png", 25) // 25 of 40, then 50 of 40: the third is refused
			rep := r.exhaust(t, cls, ipm.secret, many, 2)
			r.waitRetryAfter(t, rep, "Images", cls, ipm.secret, text)
			if u := r.usage(t, "ipm"); u.Images < 51 || u.Rejections[string(keys.IPMLimit)] < 2 {
				t.Errorf("ipm usage %+v", u)
			}
		})
		t.Run("max_concurrent", func(t *testing.T) {
			t.Parallel()
			// The first request holds its slot while its body trickles in.
			pr, pw := io.Pipe()
			req, _ := http.NewRequest("POST", r.url+cls, pr)
			req.Header.Set("Authorization", "Bearer "+conc.secret)
			req.Header.Set("Content-Type", "application/json")
			first := make(chan int, 1)
			go func() {
				resp, err := client.Do(req)
				if err != nil {
					first <- 0
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				first <- resp.StatusCode
			}()
			_, _ = pw.Write(text[:100])
			testproc.Until(t, 10*time.Second, "the first request in flight", func() bool { return r.usage(t, "conc").InFlight == 1 })
			rep := r.do(t, "POST", cls, conc.secret, text)
			if rep.code != 429 || rep.hdr.Get("Retry-After") == "" {
				t.Errorf("second while the first is in flight: %s %v", rep, rep.hdr)
			}
			_, _ = pw.Write(text[100:])
			pw.Close()
			if code := <-first; code != 200 {
				t.Fatalf("first: %d", code)
			}
			if rep := r.do(t, "POST", cls, conc.secret, text); rep.code != 200 {
				t.Errorf("after the first ended: %s", rep)
			}
		})
	})

	t.Run("rewrite under load", func(t *testing.T) {
		// Four clients, 40 requests each, while the file is rewritten (keys
		// added, one removed, limits changed), SIGHUP'd and once broken:
		// every request of the load key is answered 200.
		var wg sync.WaitGroup
		errs := make(chan string, 200)
		stop := make(chan struct{})
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 40; i++ {
					select {
					case <-stop:
						return
					default:
					}
					rep, err := r.try("POST", cls, load.secret, text)
					if err != nil || rep.code != 200 {
						errs <- fmt.Sprintf("%v %v", rep, err)
					}
				}
			}()
		}
		added := newKey(t, "added", `models = ["PPOCR_CLS"]`)
		steps := [][]key{
			append(append([]key(nil), all...), added),
			{ocr, ocr2, face, rpm, ipm, conc, load, added}, // gone removed
			{ocr, ocr2, face, rpm, ipm, conc, {load.id, load.secret, "rpm = 100000"}, added},
		}
		for i, ks := range steps {
			replace(t, r.keys, keyFile(ks...))
			if i == 1 {
				if err := r.gw.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(700 * time.Millisecond)
		}
		testproc.Until(t, 10*time.Second, "the added key", func() bool {
			return r.do(t, "POST", cls, added.secret, text).code == 200
		})
		testproc.Until(t, 10*time.Second, "the removed key refused", func() bool {
			return r.do(t, "POST", cls, gone.secret, text).code == 401
		})
		// A broken file: the keys in force stay.
		broken := newKey(t, "broken", "")
		replace(t, r.keys, keyFile(steps[2]...)+"[[key]]\nid = \"broken\"\nhash = \""+keys.HashSecret(broken.secret)+"\"\nrpm = \"many\"\n")
		r.gw.WaitOutput(t, 10*time.Second, "keys_reload_failed")
		if err := r.gw.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		wg.Wait()
		close(stop)
		close(errs)
		for e := range errs {
			t.Errorf("a request of the load key failed during the rewrites: %s", e)
		}
		if rep := r.do(t, "POST", cls, added.secret, text); rep.code != 200 {
			t.Errorf("a key in force before the broken rewrite: %s", rep)
		}
		if rep := r.do(t, "POST", cls, broken.secret, text); rep.code != 401 {
			t.Errorf("a key of the broken file: %s", rep)
		}
		if u := r.usage(t, "load"); u.Requests["200"] != 160 {
			t.Errorf("load usage %+v: want 160 answered 200", u)
		}
		if r.gw.Exited() {
			t.Fatal("the gateway exited on SIGHUP")
		}
		// Disabling a key takes effect without a restart.
		replace(t, r.keys, keyFile(ocr, ocr2, face, rpm, ipm, conc, key{load.id, load.secret, "disabled = true"}, added))
		testproc.Until(t, 10*time.Second, "the disabled key refused", func() bool {
			return r.do(t, "POST", cls, load.secret, text).code == 401
		})
	})

	t.Run("usage", func(t *testing.T) {
		rep := r.do(t, "GET", "/stats.json", operatorTok, nil)
		if rep.code != 401 {
			t.Errorf("/stats.json with the inference token: %s", rep)
		}
		rep = r.do(t, "GET", "/metrics", metricsTok, nil)
		if rep.code != 200 || !strings.Contains(string(rep.body), `key="ocr"`) {
			t.Errorf("/metrics has no per-key series: %.2000s", rep.body)
		}
	})

	t.Run("no secret in the log", func(t *testing.T) {
		out := r.gw.Output()
		for _, s := range []string{operatorTok, metricsTok, modelTok} {
			if strings.Contains(out, s) {
				t.Errorf("the gateway's log holds a token")
			}
		}
		for _, k := range all {
			if strings.Contains(out, k.secret) || strings.Contains(out, keys.HashSecret(k.secret)) {
				t.Errorf("the gateway's log holds key %s's secret or hash", k.id)
			}
		}
	})
}

// TestGatewayBadKeyFileStops: a key file that does not parse at start
// stops the gateway with the file, the line and the reason.
func TestGatewayBadKeyFileStops(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mortred.toml"), fmt.Sprintf("[gateway]\nport = %d\nkeys_file = \"keys.toml\"\n", testproc.FreePort(t)))
	if err := os.Mkdir(filepath.Join(dir, "server"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A catalog that loads, so that the key file is what stops the start.
	conf, err := os.ReadFile(filepath.Join("..", "..", "conf", "server", "blazeface.toml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "server", "blazeface.toml"), string(conf))
	if err := os.Mkdir(filepath.Join(dir, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	mconf, err := os.ReadFile(filepath.Join("..", "..", "conf", "models", "blazeface.toml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "models", "blazeface.toml"), string(mconf))
	ok := newKey(t, "ok", "")
	replace(t, filepath.Join(dir, "keys.toml"), keyFile(ok)+"[[key]]\nid = \"second\"\nhash = \"abc\"\n")
	p := testproc.Start(t, testproc.Options{Env: gatewayEnv()}, testproc.Bin(t, "mortred-gateway"), "--config", filepath.Join(dir, "mortred.toml"))
	code, exited := p.ExitCode(30 * time.Second)
	if !exited || code != 1 {
		t.Fatalf("exit %d (exited %v), want 1:\n%s", code, exited, p.Output())
	}
	want := filepath.Join(dir, "keys.toml") + ":6:"
	if !strings.Contains(p.Output(), want) {
		t.Fatalf("the message does not name %s:\n%s", want, p.Output())
	}
}
