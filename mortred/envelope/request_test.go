package envelope

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

var png1 = base64.StdEncoding.EncodeToString([]byte("\x89PNG not really"))

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		max      int
		status   Status
		pointers []string
	}{
		{"ok", `{"images":["` + png1 + `"]}`, 0, StatusOK, nil},
		{"ok all fields", `{"req_id":"r1","images":["` + png1 + `"],"params":{"x":1},"options":{"encoding":"png","include_image":true,"max_results":3,"echo_params":false}}`, 0, StatusOK, nil},
		{"ok unpadded and wrapped base64", `{"images":["` + strings.TrimRight(png1, "=") + `","` + png1[:8] + `\n` + png1[8:] + `"]}`, 0, StatusOK, nil},
		{"null params", `{"images":["` + png1 + `"],"params":null,"options":null,"req_id":null}`, 0, StatusOK, nil},
		{"not json", `{"images":`, 0, StatusJSONDecode, []string{""}},
		{"trailing garbage", `{"images":["` + png1 + `"]} x`, 0, StatusJSONDecode, []string{""}},
		{"array body", `[1]`, 0, StatusInvalidRequest, []string{""}},
		{"null body", `null`, 0, StatusInvalidRequest, []string{""}},
		{"img_data alone", `{"req_id":"legacy","img_data":"abc"}`, 0, StatusInvalidRequest, []string{"/img_data", "/images"}},
		{"img_data with images", `{"img_data":"abc","images":["` + png1 + `"]}`, 0, StatusInvalidRequest, []string{"/img_data"}},
		{"unknown key", `{"images":["` + png1 + `"],"threshold":0.5}`, 0, StatusInvalidRequest, []string{"/threshold"}},
		{"key with slash", `{"images":["` + png1 + `"],"a/b~c":1}`, 0, StatusInvalidRequest, []string{"/a~1b~0c"}},
		{"missing images", `{}`, 0, StatusInvalidRequest, []string{"/images"}},
		{"images not array", `{"images":"abc"}`, 0, StatusInvalidRequest, []string{"/images"}},
		{"images empty", `{"images":[]}`, 0, StatusInvalidRequest, []string{"/images"}},
		{"image not string", `{"images":["` + png1 + `",1]}`, 0, StatusInvalidRequest, []string{"/images/1"}},
		{"bad base64", `{"images":["@@@@"]}`, 0, StatusInvalidRequest, []string{"/images/0"}},
		{"req_id not string", `{"images":["` + png1 + `"],"req_id":5}`, 0, StatusInvalidRequest, []string{"/req_id"}},
		{"params not object", `{"images":["` + png1 + `"],"params":[]}`, 0, StatusInvalidRequest, []string{"/params"}},
		{"unknown option", `{"images":["` + png1 + `"],"options":{"colour":"red"}}`, 0, StatusInvalidRequest, []string{"/options/colour"}},
		{"bad options", `{"images":["` + png1 + `"],"options":{"encoding":"gif","max_results":-1,"include_image":"yes","echo_params":1}}`, 0, StatusInvalidRequest,
			[]string{"/options/echo_params", "/options/encoding", "/options/include_image", "/options/max_results"}},
		{"empty image", `{"images":["` + png1 + `",""]}`, 0, StatusEmptyImage, []string{"/images/1"}},
		{"422 before empty image", `{"images":[""],"x":1}`, 0, StatusInvalidRequest, []string{"/x"}},
		{"too many", `{"images":["` + png1 + `","` + png1 + `","` + png1 + `"]}`, 2, StatusTooManyItems, []string{"/images"}},
		{"empty image before too many", `{"images":["","",""]}`, 2, StatusEmptyImage, []string{"/images/0", "/images/1", "/images/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, rerr := Parse([]byte(tt.body), Limits{MaxItems: tt.max})
			if tt.status == StatusOK {
				if rerr != nil {
					t.Fatalf("Parse: %v", rerr)
				}
				if len(p.Data) == 0 || len(p.Images) != 0 {
					t.Fatalf("Data %d, Images %d", len(p.Data), len(p.Images))
				}
				return
			}
			if rerr == nil {
				t.Fatalf("Parse accepted %s", tt.body)
			}
			if p != nil {
				t.Fatal("Parse returned a request with an error")
			}
			if rerr.Status != tt.status {
				t.Fatalf("status %d (%v), want %d", rerr.Status, rerr, tt.status)
			}
			var got []string
			for _, e := range rerr.Errors {
				got = append(got, e.Pointer)
				if e.Message == "" {
					t.Errorf("pointer %q has no message", e.Pointer)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.pointers, ",") {
				t.Fatalf("pointers %q, want %q", got, tt.pointers)
			}
		})
	}
}

func TestParseMigrationHint(t *testing.T) {
	_, rerr := Parse([]byte(`{"req_id":"legacy","img_data":"abc","images":["`+png1+`"]}`), Limits{})
	if rerr == nil || rerr.Status != StatusInvalidRequest || len(rerr.Errors) != 1 {
		t.Fatalf("got %v", rerr)
	}
	if rerr.Errors[0].Message != MigrationHint || !strings.Contains(MigrationHint, "img_data -> images[0]") {
		t.Fatalf("message %q", rerr.Errors[0].Message)
	}
}

func TestTableHTTPCodes(t *testing.T) {
	want := map[Status]int{0: 200, 68: 200, 50: 400, 3: 400, 66: 422, 60: 415, 61: 413, 67: 413, 62: 405, 63: 404, 65: 503, 4: 504, 6: 500, 401: 401, 429: 429, 500: 500, 12345: 500}
	for s, code := range want {
		if got := HTTPCode(s); got != code {
			t.Errorf("HTTPCode(%d) = %d, want %d", s, got, code)
		}
		if Text(s) == "" {
			t.Errorf("Text(%d) empty", s)
		}
	}
}

func TestOpenAPIDeterministic(t *testing.T) {
	a, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := OpenAPI()
	if string(a) != string(b) {
		t.Fatal("OpenAPI output differs between runs")
	}
	var doc map[string]any
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"images":["` + png1 + `"]}`,
		`{"req_id":"legacy","img_data":"abc"}`,
		`{"images":["` + png1 + `"],"params":{"delay_ms":5},"options":{"encoding":"png"}}`,
		`{"images":[""]}`, `{"images":[]}`, `{"images":"x"}`, `[]`, `null`, `{`, `{"a/b":1}`,
		`{"images":["QUJD\nRA=="],"options":{"max_results":1e99}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, rerr := Parse(body, Limits{MaxItems: 4})
		if (p == nil) == (rerr == nil) {
			t.Fatalf("exactly one of request and error must be set: %v %v", p, rerr)
		}
		if rerr != nil {
			if len(rerr.Errors) == 0 {
				t.Fatal("error without errors[]")
			}
			if HTTPCode(rerr.Status) < 400 || HTTPCode(rerr.Status) >= 500 {
				t.Fatalf("status %d maps to HTTP %d", rerr.Status, HTTPCode(rerr.Status))
			}
			for _, e := range rerr.Errors {
				if e.Pointer != "" && !strings.HasPrefix(e.Pointer, "/") {
					t.Fatalf("bad pointer %q", e.Pointer)
				}
			}
			return
		}
		if len(p.Data) == 0 || len(p.Data) > 4 || len(p.Images) != 0 {
			t.Fatalf("accepted %d items", len(p.Data))
		}
		for i, d := range p.Data {
			if len(d) == 0 {
				t.Fatalf("item %d empty", i)
			}
		}
	})
}
