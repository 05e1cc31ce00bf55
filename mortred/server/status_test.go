package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// checkEnvelope asserts the HTTP code of the table for the body's status,
// the contract headers and the results length rule.
func checkEnvelope(t *testing.T, rep reply, want envelope.Status, items int) {
	t.Helper()
	if rep.env.Status != want {
		t.Fatalf("status %d, want %d: %s", rep.env.Status, want, rep.body)
	}
	if rep.code != envelope.HTTPCode(want) {
		t.Fatalf("HTTP %d, want %d for status %d", rep.code, envelope.HTTPCode(want), want)
	}
	if rep.env.StatusStr != envelope.Text(want) {
		t.Fatalf("status_str %q", rep.env.StatusStr)
	}
	if got := rep.hdr.Get("Content-Type"); got != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", got)
	}
	if rep.hdr.Get("Cache-Control") != "no-store" || rep.hdr.Get("X-Request-ID") != rep.env.TaskID || rep.env.TaskID == "" {
		t.Fatalf("headers %v, task_id %q", rep.hdr, rep.env.TaskID)
	}
	if items >= 0 && len(rep.env.Results) != items {
		t.Fatalf("results %d, want %d: %s", len(rep.env.Results), items, rep.body)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(rep.body, &raw)
	if e, ok := raw["errors"]; ok && (string(e) == "[]" || string(e) == "null") {
		t.Fatal("errors present but empty")
	}
	if _, ok := raw["results"]; !ok {
		t.Fatal("results missing")
	}
}

// TestStatusTable runs one case per row of the status table; a new row
// without a case fails.
func TestStatusTable(t *testing.T) {
	cases := map[envelope.Status]func(t *testing.T){
		envelope.StatusOK: func(t *testing.T) {
			f := start(t, opts{})
			rep := f.do(req{token: token, body: `{"req_id":"r-1","images":["` + darkPNG + `","` + lightPNG + `"]}`})
			checkEnvelope(t, rep, envelope.StatusOK, 2)
			if rep.env.TaskID != "r-1" || rep.env.Model == nil || rep.env.Model.Name != "TESTMODEL" || rep.env.Partial {
				t.Fatalf("%s", rep.body)
			}
			var c envelope.Classification
			_ = json.Unmarshal(rep.env.Results[1].Data, &c)
			if rep.env.Results[0].Status != 0 || c.Category != "light" || c.ClassID != 1 || len(c.Scores) != 2 {
				t.Fatalf("%s", rep.body)
			}
			if bytes.Contains(rep.body, []byte(`"errors"`)) {
				t.Fatal("errors[] on success")
			}
		},
		envelope.StatusPartial: func(t *testing.T) {
			f := start(t, opts{gated: true, keys: map[string]string{"model_run_timeout": "400"}})
			f.open(1) // the first item runs; the second waits past the deadline
			rep := f.infer(images(darkPNG, lightPNG))
			checkEnvelope(t, rep, envelope.StatusPartial, 2)
			if !rep.env.Partial || rep.env.Results[0].Status != 0 || rep.env.Results[1].Status != envelope.StatusRunTimeout || string(rep.env.Results[1].Data) != "null" {
				t.Fatalf("%s", rep.body)
			}
		},
		envelope.StatusJSONDecode: func(t *testing.T) {
			checkEnvelope(t, start(t, opts{}).infer(`{"images":[`), envelope.StatusJSONDecode, 0)
		},
		envelope.StatusEmptyImage: func(t *testing.T) {
			rep := start(t, opts{}).infer(images(darkPNG, ""))
			checkEnvelope(t, rep, envelope.StatusEmptyImage, 0)
			if rep.env.Errors[0].Pointer != "/images/1" {
				t.Fatalf("%s", rep.body)
			}
		},
		envelope.StatusInvalidRequest: func(t *testing.T) {
			rep := start(t, opts{}).infer(`{"req_id":"legacy","img_data":"abc"}`)
			checkEnvelope(t, rep, envelope.StatusInvalidRequest, 0)
			if rep.env.Errors[0].Pointer != "/img_data" || rep.env.Errors[0].Message != envelope.MigrationHint {
				t.Fatalf("%s", rep.body)
			}
		},
		envelope.StatusUnsupportedMedia: func(t *testing.T) {
			rep := start(t, opts{}).do(req{token: token, ctype: "text/plain", body: images(darkPNG)})
			checkEnvelope(t, rep, envelope.StatusUnsupportedMedia, 0)
		},
		envelope.StatusTooLarge: func(t *testing.T) {
			f := start(t, opts{keys: map[string]string{"request_size_limit": "1"}})
			big := images(b64(bytes.Repeat([]byte{1}, 1<<20)))
			checkEnvelope(t, f.infer(big), envelope.StatusTooLarge, 0)
		},
		envelope.StatusTooManyItems: func(t *testing.T) {
			f := start(t, opts{keys: map[string]string{"max_request_items": "2"}})
			checkEnvelope(t, f.infer(images(darkPNG, darkPNG, darkPNG)), envelope.StatusTooManyItems, 0)
		},
		envelope.StatusMethodNotAllowed: func(t *testing.T) {
			rep := start(t, opts{}).do(req{method: http.MethodGet, token: token})
			checkEnvelope(t, rep, envelope.StatusMethodNotAllowed, 0)
			if rep.hdr.Get("Allow") != "POST" {
				t.Fatalf("Allow %q", rep.hdr.Get("Allow"))
			}
		},
		envelope.StatusNotFound: func(t *testing.T) {
			f := start(t, opts{})
			for _, p := range []string{"/welcome", "/hello_world", "/", "/nope", inferURI + "/x", "/jobs"} {
				for _, m := range []string{http.MethodGet, http.MethodPost} {
					checkEnvelope(t, f.do(req{method: m, path: p}), envelope.StatusNotFound, 0)
				}
			}
		},
		envelope.StatusNotReady: func(t *testing.T) {
			f := start(t, opts{noLoad: true})
			rep := f.infer(images(darkPNG))
			checkEnvelope(t, rep, envelope.StatusNotReady, 0)
		},
		envelope.StatusRunTimeout: func(t *testing.T) {
			f := start(t, opts{gated: true, keys: map[string]string{"model_run_timeout": "200"}})
			rep := f.infer(images(darkPNG, lightPNG))
			checkEnvelope(t, rep, envelope.StatusRunTimeout, 2)
			for _, it := range rep.env.Results {
				if it.Status != envelope.StatusRunTimeout || string(it.Data) != "null" {
					t.Fatalf("%s", rep.body)
				}
			}
			if rep.env.Partial {
				t.Fatal("partial on 504")
			}
		},
		envelope.StatusOutputContract: func(t *testing.T) {
			rep := start(t, opts{}).infer(withParams(`{"bad_output":true}`, darkPNG, darkPNG))
			checkEnvelope(t, rep, envelope.StatusOutputContract, 2)
		},
		envelope.StatusUnauthorized: func(t *testing.T) {
			rep := start(t, opts{}).do(req{token: "wrong", body: images(darkPNG)})
			checkEnvelope(t, rep, envelope.StatusUnauthorized, 0)
			if rep.hdr.Get("WWW-Authenticate") != `Bearer realm="Mortred"` {
				t.Fatalf("WWW-Authenticate %q", rep.hdr.Get("WWW-Authenticate"))
			}
		},
		envelope.StatusForbidden: func(t *testing.T) {
			// The gateway's refusal of a model outside a key's scope; a
			// model server never answers it: another tenant's job is not
			// forbidden but unknown (404), so its existence does not show.
			f := start(t, opts{keys: asyncKeys(nil)})
			rep := f.do(req{path: "/jobs", token: token, body: images(darkPNG), hdr: map[string]string{envelope.HeaderTenant: "a"}})
			var acc envelope.JobAccepted
			_ = json.Unmarshal(rep.body, &acc)
			rep = f.do(req{method: http.MethodGet, path: acc.ResultURL, token: token, hdr: map[string]string{envelope.HeaderTenant: "b"}})
			checkEnvelope(t, rep, envelope.StatusNotFound, 0)
			if envelope.HTTPCode(envelope.StatusForbidden) != http.StatusForbidden {
				t.Fatal("status 403 does not travel with HTTP 403")
			}
		},
		envelope.StatusRateLimited: func(t *testing.T) {
			f := start(t, opts{keys: map[string]string{"rate_limit_qps": "0.01"}})
			checkEnvelope(t, f.infer(images(darkPNG)), envelope.StatusOK, 1)
			rep := f.infer(images(darkPNG))
			checkEnvelope(t, rep, envelope.StatusRateLimited, 0)
			if rep.hdr.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
		},
		envelope.StatusServerError: func(t *testing.T) {
			rep := start(t, opts{}).infer(withParams(`{"session_error":true}`, darkPNG))
			checkEnvelope(t, rep, envelope.StatusServerError, 1)
			if !strings.Contains(rep.env.Results[0].Message, "engine failure") {
				t.Fatalf("%s", rep.body)
			}
		},
	}
	for _, row := range envelope.Table {
		t.Run(strings.ReplaceAll(row.Text, " ", "_"), func(t *testing.T) {
			c, ok := cases[row.Status]
			if !ok {
				t.Fatalf("no test for status %d (%s)", row.Status, row.Text)
			}
			c(t)
		})
	}
}

func TestOpenAPIFresh(t *testing.T) {
	gen, err := envelope.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gen, disk) || !bytes.Equal(gen, OpenAPIDocument) {
		t.Fatal("docs/openapi.json or the embedded copy is stale: run `go generate ./mortred/server` (or go run ./cmd/gen-openapi) and commit both")
	}
	f := start(t, opts{noLoad: true})
	rep := f.do(req{method: http.MethodGet, path: "/openapi.json"})
	if rep.code != 200 || !bytes.Equal(rep.body, OpenAPIDocument) {
		t.Fatalf("/openapi.json → %d", rep.code)
	}
	// Every table row is published.
	for _, r := range envelope.Table {
		if !bytes.Contains(disk, []byte(`"status_str": "`+r.Text+`"`)) {
			t.Errorf("status %d missing from the document", r.Status)
		}
	}
}
