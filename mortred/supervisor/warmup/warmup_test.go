package warmup

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
	"github.com/fe64bb06/frontdoor/mortred/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token    = "warm-token"
	inferURI = "/mortred_ai_server_v1/classification/testmodel"
)

// realServer runs the real model server in-process with the testmodel
// (classification by brightness) at version.
func realServer(t *testing.T, version string) Target {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("model.toml", fmt.Sprintf("type = %q\nname = \"TESTMODEL\"\nversion = %q\n", testmodel.Type, version))
	cfgPath := write("server.toml", fmt.Sprintf("[TESTMODEL]\nport = 0\nserver_uri = %q\nauth_token = %q\nmodel_config_file_path = \"model.toml\"\nworker_nums = 1\n", inferURI, token))
	cfg, err := config.LoadServer(cfgPath, envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return Target{BaseURL: ts.URL, URI: inferURI, Token: token}
}

// fake is a model server that serves doc at /openapi.json and answers
// inference with answer, after checking the request is what Check sends.
func fake(t *testing.T, doc []byte, answer http.HandlerFunc) Target {
	t.Helper()
	return fakeAt(t, inferURI, doc, answer)
}

// fakeAt is fake with another server_uri.
func fakeAt(t *testing.T, uri string, doc []byte, answer http.HandlerFunc) Target {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	mux.HandleFunc("POST "+uri, func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequest(r); err != nil {
			t.Error(err)
			respond(w, 422, `{"status":66,"status_str":"invalid request parameter","task_id":"","results":[],"server_time_ms":0,"partial":false}`)
			return
		}
		answer(w, r)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return Target{BaseURL: ts.URL + "/", URI: uri, Token: token, Client: ts.Client()}
}

// checkRequest is what a model server requires of Check's requests.
func checkRequest(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("Content-Type %q", ct)
	}
	if a := r.Header.Get("Authorization"); a != "Bearer "+token {
		return fmt.Errorf("Authorization %q", a)
	}
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return err
	}
	var images []string
	if err := json.Unmarshal(req["images"], &images); err != nil || len(images) != 1 {
		return fmt.Errorf("images %s", req["images"])
	}
	if _, err := base64.StdEncoding.DecodeString(images[0]); err != nil {
		return fmt.Errorf("image is not base64: %v", err)
	}
	if string(req["params"]) != "{}" {
		return fmt.Errorf("params %s", req["params"])
	}
	for k := range req {
		if k != "images" && k != "params" && k != "req_id" {
			return fmt.Errorf("unknown key %q", k)
		}
	}
	return nil
}

// respond writes body with the headers of a real model server.
func respond(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Request-ID", "warmup-0")
	if code == http.StatusOK && h.Get(envelope.HeaderItems) == "" {
		h.Set(envelope.HeaderItems, "1")
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// ok is a successful envelope for one image with data.
func ok(version, data string) string {
	return `{"status":0,"status_str":"OK","task_id":"warmup-0","model":{"name":"TESTMODEL","version":"` + version +
		`"},"results":[{"status":0,"data":` + data + `}],"server_time_ms":1.5,"partial":false}`
}

// scores is a classification payload with n scores.
func scores(n int, v float64) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(v)
	}
	return `{"class_id":1,"category":"light","scores":[` + strings.Join(s, ",") + `]}`
}

func answers(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { respond(w, code, body) }
}

func spec(t *testing.T) []byte {
	t.Helper()
	doc, err := envelope.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// strictSpec is the document with additionalProperties false on
// Classification: an instance that publishes it promises no other keys.
func strictSpec(t *testing.T) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(spec(t), &doc); err != nil {
		t.Fatal(err)
	}
	doc["components"].(map[string]any)["schemas"].(map[string]any)["Classification"].(map[string]any)["additionalProperties"] = false
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckRealServer(t *testing.T) {
	v2 := realServer(t, "2")
	rep, err := Check(context.Background(), v2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Samples) != len(DefaultSamples()) {
		t.Fatalf("report %+v", rep)
	}
	if rep.Model != (envelope.ModelInfo{Name: "TESTMODEL", Version: "2"}) {
		t.Errorf("model %+v", rep.Model)
	}
	for _, s := range rep.Samples {
		if !s.OK || s.Reason != "" || s.Latency <= 0 || s.RefLatency != 0 {
			t.Errorf("sample %+v", s)
		}
	}

	t.Run("against the old version", func(t *testing.T) {
		v1 := realServer(t, "1")
		rep, err := Check(context.Background(), v2, &v1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.RefModel.Version != "1" || rep.Model.Version != "2" || rep.Samples[0].RefLatency <= 0 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("an old version with another shape", func(t *testing.T) {
		v1 := fake(t, spec(t), answers(200, ok("v1", scores(1000, 0.001))))
		_, err := Check(context.Background(), v2, &v1, nil)
		want := `sample 0: answer differs in shape from version "v1": results[0].data.scores has 2 numbers, the old version's 1000`
		if err == nil || err.Error() != want {
			t.Fatalf("error %v\nwant  %s", err, want)
		}
	})

	t.Run("a sample that is not an image", func(t *testing.T) {
		rep, err := Check(context.Background(), v2, nil, [][]byte{[]byte("not an image"), DefaultSamples()[0]})
		var e *Error
		if !errors.As(err, &e) || e.Sample != 0 || e.Ref {
			t.Fatalf("error %#v", err)
		}
		if !strings.HasPrefix(err.Error(), "sample 0: HTTP 400, status 3 (empty input image): ") {
			t.Errorf("error %v", err)
		}
		// The check goes on: the report covers the good sample too.
		if len(rep.Samples) != 2 || rep.Samples[0].OK || !rep.Samples[1].OK || rep.Samples[0].Reason != e.Reason || rep.OK() {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("a wrong token", func(t *testing.T) {
		bad := v2
		bad.Token = "nope"
		_, err := Check(context.Background(), bad, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "sample 0: HTTP 401, status 401 (unauthorized)") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestCheckAnswers(t *testing.T) {
	cases := []struct {
		name   string
		doc    []byte
		answer http.HandlerFunc
		want   string // "" passes; else a substring of the error
	}{
		{"good", nil, answers(200, ok("2", scores(2, 0.5))), ""},
		{"output contract failed", nil, answers(500,
			`{"status":6,"status_str":"model output contract failed","task_id":"warmup-0","model":{"name":"TESTMODEL","version":"2"},"results":[{"status":6,"data":null,"message":"model returned 0 results for 1 items"}],"server_time_ms":3,"partial":false}`),
			"sample 0: HTTP 500, status 6 (model output contract failed): model returned 0 results for 1 items"},
		{"not ready", nil, answers(503,
			`{"status":65,"status_str":"service not ready","task_id":"","results":[],"server_time_ms":0,"partial":false,"errors":[{"pointer":"","message":"the model is still loading"}]}`),
			"sample 0: HTTP 503, status 65 (service not ready): the model is still loading"},
		{"an item failed under status 0", nil, answers(200,
			`{"status":0,"status_str":"OK","task_id":"warmup-0","results":[{"status":3,"data":null,"message":"cannot decode the image"}],"server_time_ms":1,"partial":false}`),
			"sample 0: envelope status 0 but results[0] failed with status 3 (empty input image): cannot decode the image"},
		{"null data", nil, answers(200, ok("2", "null")), "sample 0: results[0] has status 0 but its data is null"},
		{"partial", nil, answers(200,
			`{"status":68,"status_str":"deadline exceeded, partial results","task_id":"warmup-0","results":[{"status":4,"data":null,"message":"timeout"}],"server_time_ms":1,"partial":true}`),
			"sample 0: envelope status 68 (deadline exceeded, partial results) with partial true; results[0] status 4: timeout"},
		{"status 0 but partial", nil, answers(200, strings.Replace(ok("2", scores(2, 0.5)), `"partial":false`, `"partial":true`, 1)),
			"sample 0: envelope status 0 but partial true"},
		{"two results for one image", nil, answers(200, strings.Replace(ok("2", scores(2, 0.5)), `}],`, `},{"status":0,"data":{}}],`, 1)),
			"sample 0: one image answered with 2 results"},
		{"not JSON", nil, answers(200, `{"status":0,`), `sample 0: HTTP 200 answer is not JSON (Content-Type "application/json; charset=utf-8"): "{\"status\":0,"`},
		{"not an envelope", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		}, `sample 0: HTTP 502 (Content-Type "text/html"), not an envelope: "<html>bad gateway</html>"`},
		{"envelope field of the wrong type", nil, answers(200, strings.Replace(ok("2", scores(2, 0.5)), `"server_time_ms":1.5`, `"server_time_ms":"fast"`, 1)),
			"sample 0: answer does not match the instance's /openapi.json: server_time_ms: value must be a number"},
		{"envelope without a required field", nil, answers(200, strings.Replace(ok("2", scores(2, 0.5)), `"task_id":"warmup-0",`, ``, 1)),
			`sample 0: answer does not match the instance's /openapi.json: property "task_id" is missing`},
		{"an undocumented status", nil, answers(200, strings.Replace(ok("2", scores(2, 0.5)), `"status":0,"status_str"`, `"status":7,"status_str"`, 1)),
			"sample 0: answer does not match the instance's /openapi.json: status: value is not one of the allowed values"},
		{"a header of the wrong type", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(envelope.HeaderItems, "many")
			respond(w, 200, ok("2", scores(2, 0.5)))
		}, `X-Mortred-Items`},
		{"payload field of the wrong type", nil, answers(200, ok("2", `{"class_id":"1","category":"light","scores":[0.5,0.5]}`)),
			"sample 0: answer does not match the instance's /openapi.json: results[0].data.class_id: value must be an integer (components.schemas.Classification)"},
		{"a string among the scores", nil, answers(200, ok("2", `{"class_id":1,"category":"light","scores":[0.5,"high"]}`)),
			"sample 0: answer does not match the instance's /openapi.json: results[0].data.scores[1]: value must be a number (components.schemas.Classification)"},
		{"payload of another task", nil, answers(200, ok("2", `[{"class_id":1,"score":0.9,"category":"cat","bbox":[1,2,3,4]}]`)),
			"results[0].data: value must be an object (components.schemas.Classification)"},
		{"unknown key, open schema", nil, answers(200, ok("2", `{"class_id":1,"category":"light","scores":[0.5,0.5],"extra":1}`)), ""},
		{"unknown key, the instance's schema forbids it", strictSpec(t), answers(200, ok("2", `{"class_id":1,"category":"light","scores":[0.5,0.5],"extra":1}`)),
			`sample 0: answer does not match the instance's /openapi.json: results[0].data: property "extra" is unsupported (components.schemas.Classification)`},
		{"not a document", []byte("404 page not found"), answers(200, ok("2", scores(2, 0.5))),
			`the instance's OpenAPI document: GET http://`},
		{"not an OpenAPI document", []byte(`{"openapi":"3.0.3"}`), answers(200, ok("2", scores(2, 0.5))),
			`the instance's OpenAPI document: invalid: `},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := c.doc
			if doc == nil {
				doc = spec(t)
			}
			tg := fake(t, doc, c.answer)
			rep, err := Check(context.Background(), tg, nil, [][]byte{DefaultSamples()[0]})
			if c.want == "" {
				if err != nil || !rep.OK() {
					t.Fatalf("error %v, report %+v", err, rep)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v\nwant    %s", err, c.want)
			}
			t.Log(err)
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if rep.OK() {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

func TestCheckAgainstOldVersion(t *testing.T) {
	newT := fake(t, spec(t), answers(200, ok("v2", scores(1000, 0.001))))

	t.Run("scores of another length", func(t *testing.T) {
		old := fake(t, spec(t), answers(200, ok("v1", scores(2, 0.5))))
		rep, err := Check(context.Background(), newT, &old, nil)
		want := `sample 0: answer differs in shape from version "v1": results[0].data.scores has 1000 numbers, the old version's 2`
		if err == nil || err.Error() != want {
			t.Fatalf("error %v\nwant  %s", err, want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Sample != 0 || e.Ref {
			t.Errorf("error %#v", err)
		}
		if len(rep.Samples) != 2 || rep.Samples[0].OK || rep.Samples[1].OK {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("same shape, other values", func(t *testing.T) {
		old := fake(t, spec(t), answers(200, ok("v1", strings.Replace(scores(1000, 0.002), `"class_id":1,"category":"light"`, `"class_id":0,"category":"dark"`, 1))))
		rep, err := Check(context.Background(), newT, &old, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Model.Version != "v2" || rep.RefModel.Version != "v1" {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("a key the old version has", func(t *testing.T) {
		old := fake(t, spec(t), answers(200, ok("", `{"class_id":1,"category":"light","scores":[0.5,0.5],"top":[]}`)))
		newT := fake(t, spec(t), answers(200, ok("v2", scores(2, 0.5))))
		_, err := Check(context.Background(), newT, &old, nil)
		want := fmt.Sprintf(`sample 0: answer differs in shape from the old version at %s: results[0].data lacks "top", which the old version has`, strings.TrimSuffix(old.BaseURL, "/"))
		if err == nil || err.Error() != want {
			t.Fatalf("error %v\nwant  %s", err, want)
		}
	})

	t.Run("the old version fails", func(t *testing.T) {
		old := fake(t, spec(t), answers(503, `{"status":65,"status_str":"service not ready","task_id":"","results":[],"server_time_ms":0,"partial":false}`))
		rep, err := Check(context.Background(), newT, &old, nil)
		var e *Error
		if !errors.As(err, &e) || !e.Ref || e.Sample != 0 {
			t.Fatalf("error %#v", err)
		}
		if !strings.Contains(err.Error(), " failed the sample: HTTP 503, status 65 (service not ready)") {
			t.Errorf("error %v", err)
		}
		if rep.Samples[0].OK || rep.Samples[0].Latency <= 0 || rep.Samples[0].RefLatency <= 0 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("the new version fails first", func(t *testing.T) {
		calls := 0
		old := fake(t, spec(t), func(w http.ResponseWriter, r *http.Request) {
			calls++
			respond(w, 200, ok("v1", scores(2, 0.5)))
		})
		broken := fake(t, spec(t), answers(200, ok("v2", "null")))
		_, err := Check(context.Background(), broken, &old, [][]byte{{1}})
		if err == nil || !strings.Contains(err.Error(), "data is null") || calls != 0 {
			t.Fatalf("error %v, the old version called %d times", err, calls)
		}
	})
}

func TestCheckTransport(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		rep, err := Check(context.Background(), Target{BaseURL: "http://" + addr, URI: inferURI}, nil, nil)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("error %v", err)
		}
		want := "fetching the instance's OpenAPI document: GET http://" + addr + "/openapi.json: cannot connect: dial tcp " + addr + ": connect: connection refused"
		if err.Error() != want {
			t.Errorf("error %v\nwant  %s", err, want)
		}
		if len(rep.Samples) != 0 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("the old version refuses", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		newT := fake(t, spec(t), answers(200, ok("v2", scores(2, 0.5))))
		rep, err := Check(context.Background(), newT, &Target{BaseURL: "http://" + addr, URI: inferURI}, nil)
		var e *Error
		if !errors.As(err, &e) || !e.Ref || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "cannot connect") {
			t.Fatalf("error %v", err)
		}
		if len(rep.Samples) != 1 {
			t.Errorf("a transport error should stop the check: %+v", rep)
		}
	})

	t.Run("cancelled while waiting for an answer", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tg := fake(t, spec(t), func(w http.ResponseWriter, r *http.Request) {
			cancel()
			<-r.Context().Done()
		})
		rep, err := Check(ctx, tg, nil, nil)
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "sample 0: POST ") {
			t.Fatalf("error %v", err)
		}
		if len(rep.Samples) != 1 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("answer over the bound", func(t *testing.T) {
		defer func(n int64) { maxAnswer = n }(maxAnswer)
		maxAnswer = 64 << 10
		big := ok("2", scores(20000, 0.5))
		tg := fake(t, spec(t), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(big[:1])) // no Content-Length: the bound applies while reading
			_, _ = w.Write([]byte(big[1:]))
		})
		_, err := Check(context.Background(), tg, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "answer over the 65536-byte bound") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("openapi.json missing", func(t *testing.T) {
		ts := httptest.NewServer(http.NotFoundHandler())
		defer ts.Close()
		_, err := Check(context.Background(), Target{BaseURL: ts.URL, URI: inferURI}, nil, nil)
		var e *Error
		if !errors.As(err, &e) || e.Sample != -1 || !strings.Contains(err.Error(), "/openapi.json: HTTP 404") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("bad targets", func(t *testing.T) {
		for _, tg := range []Target{{URI: inferURI}, {BaseURL: "127.0.0.1:9001", URI: inferURI}, {BaseURL: "http://127.0.0.1:9001", URI: "infer"}} {
			_, err := Check(context.Background(), tg, nil, nil)
			var e *Error
			if !errors.As(err, &e) || e.Sample != -1 || !strings.HasPrefix(err.Error(), "target: ") {
				t.Errorf("%+v: error %v", tg, err)
			}
		}
	})
}

// TestCheckPayloads checks results[].data against the schemas of the
// route's task, or of any task when the server_uri is not on the
// document's inference path.
func TestCheckPayloads(t *testing.T) {
	const (
		detections = `[{"class_id":1,"score":0.9,"category":"cat","bbox":[1,2,3,4]}]`
		ocrURI     = "/mortred_ai_server_v1/ocr/ppocr_rec"
		customURI  = "/v2/predict"
	)
	cases := []struct {
		name, uri, data string
		want            string // "" passes
	}{
		{"detection", "/mortred_ai_server_v1/detection/nanodet", detections, ""},
		{"no detections", "/mortred_ai_server_v1/detection/nanodet", `[]`, ""},
		{"detection without bbox", "/mortred_ai_server_v1/detection/nanodet", `[{"class_id":1,"score":0.9,"category":"cat"}]`,
			`results[0].data[0]: property "bbox" is missing (components.schemas.DetectionList)`},
		{"a short bbox", "/mortred_ai_server_v1/detection/nanodet", `[{"class_id":1,"score":0.9,"category":"cat","bbox":[1,2,3]}]`,
			`results[0].data[0].bbox: minimum number of items is 4 (components.schemas.DetectionList)`},
		{"recognised text", ocrURI, `{"text":"hello","score":0.9}`, ""},
		{"ocr lines", ocrURI, `[{"bbox":[0,0,9,9],"polygon":[[0,0],[9,0],[9,9],[0,9]],"text":"hi","score":0.8,"angle":0}]`, ""},
		{"text that is a number", ocrURI, `{"text":7,"score":0.9}`,
			`results[0].data matches none of the ocr payloads (OCRLineList, TextDetectionList, TextRecognition, Classification); as TextRecognition: results[0].data.text: value must be a string`},
		{"any payload on a custom uri", customURI, detections, ""},
		{"no payload on a custom uri", customURI, `{"answer":42}`,
			`results[0].data matches none of the known payloads (Classification, DetectionList, FaceDetectionList, Segmentation, SuperResolution, TextDetectionList, TextRecognition, OCRLineList, ImageOutput); as Classification: results[0].data: property "class_id" is missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := fakeAt(t, c.uri, spec(t), answers(200, ok("1", c.data)))
			_, err := Check(context.Background(), tg, nil, [][]byte{{1}})
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v\nwant    %s", err, c.want)
			}
		})
	}

	t.Run("the envelope on a custom uri", func(t *testing.T) {
		tg := fakeAt(t, customURI, spec(t), answers(200, strings.Replace(ok("2", scores(2, 0.5)), `"partial":false`, `"partial":"no"`, 1)))
		_, err := Check(context.Background(), tg, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "answer does not match the instance's /openapi.json: partial: value must be a boolean") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestReportJSON(t *testing.T) {
	rep := Report{
		Model: envelope.ModelInfo{Name: "TESTMODEL", Version: "2"},
		Samples: []Sample{
			{Index: 0, Latency: 1500 * time.Microsecond, OK: true},
			{Index: 1, Latency: 2 * time.Millisecond, RefLatency: 3 * time.Millisecond, Reason: "HTTP 500"},
		},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":{"name":"TESTMODEL","version":"2"},"samples":[{"index":0,"latency_ms":1.5,"ok":true},{"index":1,"latency_ms":2,"ref_latency_ms":3,"ok":false,"reason":"HTTP 500"}]}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Model != rep.Model || len(back.Samples) != 2 || back.Samples[0] != rep.Samples[0] || back.Samples[1] != rep.Samples[1] {
		t.Errorf("round trip %+v", back)
	}
}
