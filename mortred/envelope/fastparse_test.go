package envelope

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// fastSeeds are requests around what parseFast accepts: spacing, every
// envelope key, values of every JSON kind, and near misses it must leave to
// parseFull.
//
// long is long enough for the vector decoder (45 characters and up); the
// seeds built from it put a line break, an escape, a space or a stray
// character past the first vector.
var long = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x89PNG\r\n\x1a\n\x00\xff\x10 long image bytes ", 12)))

var fastSeeds = []string{
	`{"images":["` + long + `"]}`, `{"images":["` + long + `","` + png1 + `","` + long[:len(long)-4] + `"]}`,
	`{"images":["` + long[:100] + `\n` + long[100:] + `"]}`, `{"images":["` + long[:100] + `\/` + long[100:] + `"]}`,
	`{"images":["` + long[:100] + ` ` + long[100:] + `"]}`, `{"images":["` + long[:100] + `*` + long[100:] + `"]}`,
	`{"images":["` + long[:100] + "\n" + long[100:] + `"]}`, `{"images":["` + long[:100] + `=` + long[100:] + `"]}`,
	`{"images":["` + long[:100] + `\"` + long[100:] + `"]}`, `{"images":["` + strings.TrimRight(long, "=") + `"]}`,
	`{"images":["` + png1 + `"]}`,
	" \r\n\t{ \"images\" : [ \"" + png1 + "\" , \"" + png1 + "\" ] } \n",
	`{"req_id":"r-1","images":["` + png1 + `"],"params":{"delay_ms":5,"nested":{"a":[1,"}",{"b":null}]}},"options":{"encoding":"png","include_image":true,"max_results":3,"echo_params":false}}`,
	`{"params":{},"options":{},"req_id":"x\"y\\u00e9","images":["` + png1 + `"]}`,
	`{"images":["` + png1 + `"],"params":null,"options":null,"req_id":null}`,
	`{"images":["` + strings.TrimRight(png1, "=") + `"]}`,
	`{"images":["QUJD\nRA=="]}`, `{"images":["QUJD\/RA=="]}`, `{"images":["QUJDRA="]}`, `{"images":["=="]}`,
	`{"images":["` + png1 + `"],"images":["` + png1 + `"]}`,
	`{"images":["` + png1 + `"],"req_id":"a","req_id":"b"}`,
	`{"images":["` + png1 + `"],}`, `{"images":["` + png1 + `",]}`, `{"images":["` + png1 + `"]}}`, `{"images":["` + png1 + `"]} x`,
	`{"images":["` + png1 + `"],"req_id":nul}`, `{"images":["` + png1 + `"],"req_id":5}`, `{"images":["` + png1 + `"],"req_id":"\x01"}`,
	`{"images":["` + png1 + `"],"params":[1]}`, `{"images":["` + png1 + `"],"params":{"a":1}x}`, `{"images":["` + png1 + `"],"params":"{"}`,
	`{"images":["` + png1 + `"],"options":{"encoding":"gif"}}`, `{"images":["` + png1 + `"],"options":{"max_results":1e99}}`,
	`{"images":["` + png1 + `"],"img_data":"x"}`, `{"imag\u0065s":["` + png1 + `"]}`, `{"images":[""]}`, `{"images":[]}`,
	`{"images":["` + png1 + `","` + png1 + `","` + png1 + `","` + png1 + `","` + png1 + `"]}`,
	`{"images":["QUJD"],"params":{"a":"\\"}}`, `{"images":["QUJD"],"params":{"a":"\\\""}}`, `{"images":["QUJD"],"req_id":"\`,
	`{"images":["QUJD"],"params":{"a":1]}`, `{"images":["QUJD"],"params":[}`, `{"images":["QUJD"],"req_id":-0.5e+3}`, `{"images":["QUJD"],"req_id":true}`, `{"images":["QUJD"],"params":{"bad":1}}`,
}

func TestParseFastAgreesWithFull(t *testing.T) {
	accepted := 0
	for _, s := range fastSeeds {
		if checkFastAgainstFull(t, []byte(s)) {
			accepted++
		}
	}
	// The seeds must exercise the fast path, not only its fallbacks.
	if accepted < 5 {
		t.Fatalf("parseFast accepted only %d seeds", accepted)
	}
}

// FuzzParseFastMatchesFull: whatever parseFast accepts, parseFull accepts
// with the same result; what it refuses, Parse answers as parseFull does.
func FuzzParseFastMatchesFull(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastAgainstFull(t, body) })
}

// paramsNamedBad stands in for a model's ValidateParams: it refuses a
// "bad" key.
func paramsNamedBad(p map[string]json.RawMessage) []FieldError {
	if _, ok := p["bad"]; ok {
		return []FieldError{{Pointer: "/params/bad", Message: "refused"}}
	}
	return nil
}

func checkFastAgainstFull(t *testing.T, body []byte) bool {
	t.Helper()
	lims := Limits{MaxItems: 4, Params: paramsNamedBad}
	fast := parseFast(body, lims)
	full, ferr := parseFull(body, lims)
	got, gerr := Parse(body, lims)
	// Released at the end, so that later bodies decode into used buffers:
	// a decoder that trusted a fresh, zeroed buffer would show there.
	defer fast.Release()
	defer got.Release()
	if fast == nil {
		if !reflect.DeepEqual(view(got), view(full)) || !reflect.DeepEqual(gerr, ferr) {
			t.Fatalf("Parse differs from parseFull on %q", body)
		}
		return false
	}
	if ferr != nil {
		t.Fatalf("parseFast accepted %q, parseFull refused it: %v", body, ferr)
	}
	if !reflect.DeepEqual(view(fast), view(full)) {
		t.Fatalf("parseFast and parseFull differ on %q:\n%+v\n%+v", body, fast, full)
	}
	if gerr != nil || !reflect.DeepEqual(view(got), view(full)) {
		t.Fatalf("Parse differs from parseFull on %q", body)
	}
	return true
}

// view is p without its buffer bookkeeping, which only parseFast fills.
func view(p *Parsed) *Parsed {
	if p == nil {
		return nil
	}
	v := *p
	v.pooled = nil
	return &v
}

func TestReleaseClearsData(t *testing.T) {
	p, rerr := Parse([]byte(`{"images":["`+png1+`","`+png1+`"]}`), Limits{})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(p.pooled) != 2 || len(p.Data) != 2 {
		t.Fatalf("pooled %d, Data %d: want 2 and 2", len(p.pooled), len(p.Data))
	}
	p.Release()
	p.Release()
	if p.Data != nil || p.pooled != nil {
		t.Fatalf("after Release: Data %v, pooled %v", p.Data, p.pooled)
	}
}
