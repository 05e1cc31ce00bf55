package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token    = "secret-token"
	inferURI = "/mortred_ai_server_v1/classification/testmodel"
)

// Images the tests send.
var (
	darkPNG  = b64(testmodel.GrayPNG(4, 4, 20))
	lightPNG = b64(testmodel.GrayPNG(4, 4, 240))
	failPNG  = b64(testmodel.GrayPNG(4, 4, 7)) // the gated model fails it in Run
	holdPNG  = b64(testmodel.GrayPNG(4, 4, 9)) // the gated model's Prepare waits for prepareGate
	notImage = b64([]byte("definitely not an image"))
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// gated is a test model type: testmodel, except that each Run first waits
// for a token on its gate (so tests decide when a worker is busy) and an
// image of gray level 7 fails in Run with its own item error.
type gated struct {
	model.Model
	gate chan struct{}
}

type gatedInput struct {
	in   model.Input
	fail bool
}

var (
	gatesMu sync.Mutex
	gates   = map[string]chan struct{}{}
)

func init() {
	model.Register("gated", func(path string, opts model.Options) (model.Model, error) {
		inner, err := testmodel.New("", opts)
		if err != nil {
			return nil, err
		}
		gatesMu.Lock()
		defer gatesMu.Unlock()
		return &gated{Model: inner, gate: gates[path]}, nil
	})
}

// prepareHeld and prepareGate hold the gated model's Prepare of holdPNG:
// it signals prepareHeld, waits for prepareGate, and then counts in
// prepareClobbered whether its image bytes changed meanwhile.
var (
	prepareHeld      = make(chan struct{}, 16)
	prepareGate      = make(chan struct{}, 16)
	prepareClobbered atomic.Int32
)

func (g *gated) Prepare(img []byte, p map[string]json.RawMessage) (model.Input, error) {
	if bytes.Equal(img, testmodel.GrayPNG(4, 4, 9)) {
		was := bytes.Clone(img)
		prepareHeld <- struct{}{}
		<-prepareGate
		if !bytes.Equal(img, was) {
			prepareClobbered.Add(1)
		}
	}
	in, err := g.Model.Prepare(img, p)
	if err != nil {
		return nil, err
	}
	return gatedInput{in: in, fail: bytes.Equal(img, testmodel.GrayPNG(4, 4, 7))}, nil
}

func (g *gated) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	inner := make([]model.Input, len(batch))
	for i, b := range batch {
		inner[i] = b.(gatedInput).in
	}
	res, err := g.Model.Run(ctx, inner)
	if err != nil {
		return nil, err
	}
	for i, b := range batch {
		if b.(gatedInput).fail && i < len(res) {
			res[i] = model.Result{Err: &model.ItemError{Status: envelope.StatusEmptyImage, Msg: "gated: this image fails in the model run"}}
		}
	}
	return res, nil
}

func (g *gated) Warm(context.Context) error { return nil }

// fixture is a running in-process server.
type fixture struct {
	t    *testing.T
	srv  *Server
	ts   *httptest.Server
	gate chan struct{} // gated model only
}

type opts struct {
	keys   map[string]string // server TOML keys (raw TOML values)
	model  string            // model TOML body; default testmodel
	gated  bool
	noLoad bool
}

func start(t *testing.T, o opts) *fixture {
	t.Helper()
	dir := t.TempDir()
	modelPath := filepath.Join(dir, "model.toml")
	f := &fixture{t: t}
	body := o.model
	if o.gated {
		body = "type = \"gated\"\n"
		f.gate = make(chan struct{}, 1024)
		gatesMu.Lock()
		gates[modelPath] = f.gate
		gatesMu.Unlock()
	} else if body == "" {
		body = "type = \"testmodel\"\nname = \"TESTMODEL\"\n"
	}
	write(t, modelPath, body)
	keys := map[string]string{
		"port": "0", "server_uri": `"` + inferURI + `"`, "auth_token": `"` + token + `"`,
		"model_config_file_path": `"model.toml"`, "worker_nums": "1",
	}
	for k, v := range o.keys {
		keys[k] = v
	}
	var b strings.Builder
	b.WriteString("[TESTMODEL]\n")
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %s\n", k, keys[k])
	}
	cfgPath := filepath.Join(dir, "server.toml")
	write(t, cfgPath, b.String())
	cfg, err := config.LoadServer(cfgPath, envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	if !o.noLoad {
		if err := srv.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		if f.gate != nil {
			close(f.gate) // release any Run still waiting
		}
		f.ts.Close()
		srv.Close()
	})
	return f
}

func write(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// open lets n gated model runs proceed.
func (f *fixture) open(n int) {
	for range n {
		f.gate <- struct{}{}
	}
}

type reply struct {
	code int
	hdr  http.Header
	body []byte
	env  envelope.Response
}

type req struct {
	method, path, token, ctype string
	body                       string
	hdr                        map[string]string
}

// do sends a request and validates the answer against docs/openapi.json.
func (f *fixture) do(r req) reply {
	f.t.Helper()
	rep, err := f.try(r)
	if err != nil {
		f.t.Fatal(err)
	}
	return rep
}

// try is do for any goroutine: it returns the problem instead of failing.
func (f *fixture) try(r req) (reply, error) {
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = inferURI
	}
	if r.ctype == "" && r.method == http.MethodPost {
		r.ctype = "application/json"
	}
	hr, err := http.NewRequest(r.method, f.ts.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		return reply{}, err
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.ctype != "-" && r.ctype != "" {
		hr.Header.Set("Content-Type", r.ctype)
	}
	for k, v := range r.hdr {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	out := reply{code: resp.StatusCode, hdr: resp.Header, body: body}
	_ = json.Unmarshal(body, &out.env)
	return out, validate(hr, out)
}

func (f *fixture) infer(body string) reply {
	f.t.Helper()
	return f.do(req{token: token, body: body})
}

func images(imgs ...string) string {
	b, _ := json.Marshal(map[string]any{"images": imgs})
	return string(b)
}

func withParams(params string, imgs ...string) string {
	b, _ := json.Marshal(map[string]any{"images": imgs, "params": json.RawMessage(params)})
	return string(b)
}

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

func spec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromFile("../../docs/openapi.json")
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	if specErr != nil {
		return nil, nil, fmt.Errorf("docs/openapi.json: %w", specErr)
	}
	return specDoc, specRouter, nil
}

// validate checks an answer against docs/openapi.json: through the route
// when the document has one (status code, headers, body schema), else the
// body against the Response schema (unknown paths, wrong methods).
func validate(r *http.Request, rep reply) error {
	doc, router, err := spec()
	if err != nil {
		return err
	}
	if r.URL.Path == "/metrics" && rep.code == http.StatusOK {
		return nil // text exposition; checked by the metrics test
	}
	if rep.code != http.StatusAccepted && rep.code != http.StatusConflict && !(r.URL.Path == "/openapi.json" || strings.HasPrefix(r.URL.Path, "/jobs/")) {
		for _, h := range []string{"Content-Type", "Cache-Control", "X-Request-ID"} {
			if rep.hdr.Get(h) == "" {
				return fmt.Errorf("%s %s → %d without %s", r.Method, r.URL.Path, rep.code, h)
			}
		}
	}
	route, params, err := router.FindRoute(r)
	if err != nil {
		schema := doc.Components.Schemas["Response"].Value
		var v any
		if err := json.Unmarshal(rep.body, &v); err != nil {
			return fmt.Errorf("%s %s → %d: body is not JSON: %s", r.Method, r.URL.Path, rep.code, rep.body)
		}
		if err := schema.VisitJSON(v); err != nil {
			return fmt.Errorf("%s %s → %d: body does not match Response: %v\n%s", r.Method, r.URL.Path, rep.code, err, rep.body)
		}
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  rep.code,
		Header:  rep.hdr,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(rep.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s → %d does not match docs/openapi.json: %v\n%s", r.Method, r.URL.Path, rep.code, err, rep.body)
	}
	return nil
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
