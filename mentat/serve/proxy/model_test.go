package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

const jsonCT = "application/json"

func TestExtractModelJSON(t *testing.T) {
	long := strings.Repeat("x", MaxModelName+1)
	cases := []struct {
		name, body, want string
		stream           bool
		errHas           string
	}{
		{name: "simple", body: `{"model":"m1","messages":[]}`, want: "m1"},
		{name: "model last after nesting", body: `{"messages":[{"role":"user","content":"a \"model\": \"evil\" {[}"}],"n":1,"x":null,"t":true,"f":-1.5e3,"model":"m2"}`, want: "m2"},
		{name: "whitespace", body: " \n\t{ \"model\" :\r\n \"m3\" } \n", want: "m3"},
		{name: "escaped key", body: `{"mod\u0065l":"m4"}`, want: "m4"},
		{name: "escaped value", body: `{"model":"org\/m\u00e9"}`, want: "org/mé"},
		{name: "backslashes before quote", body: `{"a":"x\\\\","model":"m5"}`, want: "m5"},
		{name: "nested model ignored", body: `{"opts":{"model":"inner"},"model":"outer"}`, want: "outer"},
		{name: "stream true", body: `{"model":"m","stream":true}`, want: "m", stream: true},
		{name: "stream false", body: `{"stream":false,"model":"m"}`, want: "m"},
		{name: "same model twice", body: `{"model":"m","model":"m"}`, want: "m"},
		{name: "empty body", body: "", errHas: "empty"},
		{name: "only spaces", body: "  \n", errHas: "empty"},
		{name: "no model", body: `{"messages":[]}`, errHas: "no model field"},
		{name: "nested only", body: `{"o":{"model":"x"}}`, errHas: "no model field"},
		{name: "empty object", body: `{}`, errHas: "no model field"},
		{name: "array", body: `[{"model":"x"}]`, errHas: "not a JSON object"},
		{name: "form encoded", body: `model=x&prompt=y`, errHas: "not a JSON object"},
		{name: "model number", body: `{"model":3}`, errHas: "must be a JSON string"},
		{name: "model null", body: `{"model":null}`, errHas: "must be a JSON string"},
		{name: "model empty", body: `{"model":""}`, errHas: "model is empty"},
		{name: "model too long", body: `{"model":"` + long + `"}`, errHas: "longer than"},
		{name: "two models", body: `{"model":"a","x":1,"model":"b"}`, errHas: "two different models"},
		{name: "truncated", body: `{"messages":[{"content":"abc`, errHas: "ends where"},
		{name: "truncated nest", body: `{"messages":[[[`, errHas: "ends where"},
		{name: "missing colon", body: `{"model" "x"}`, errHas: "':' after a key"},
		{name: "missing comma", body: `{"a":1 "model":"x"}`, errHas: "',' or '}'"},
		{name: "trailing data", body: `{"model":"x"} {"model":"y"}`, errHas: "data after"},
		{name: "bare key", body: `{model:"x"}`, errHas: "string key"},
		{name: "missing value", body: `{"a":,"model":"x"}`, errHas: "a value"},
		{name: "bad escape", body: `{"model":"a\qb"}`, errHas: "escape"},
		{name: "control char", body: "{\"model\":\"a\x01b\"}", errHas: "control character"},
		{name: "invalid utf8", body: "{\"model\":\"a\xffb\"}", errHas: "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := extract(jsonCT, []byte(c.body))
			if c.errHas != "" {
				var be *BodyError
				if err == nil || !errors.As(err, &be) || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("extract(%q) = %q, %v; want a BodyError containing %q", c.body, f.Model, err, c.errHas)
				}
				return
			}
			if err != nil || f.Model != c.want || f.Stream != c.stream {
				t.Fatalf("extract(%q) = %+v, %v; want model %q stream %v", c.body, f, err, c.want, c.stream)
			}
		})
	}
}

func TestExtractModelContentTypes(t *testing.T) {
	body := []byte(`{"model":"m"}`)
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "application/x-www-form-urlencoded", "text/plain", "garbage;;=", "multipart/mixed; boundary=x"} {
		if m, err := ExtractModel(ct, body); err != nil || m != "m" {
			t.Errorf("Content-Type %q: got %q, %v; want m", ct, m, err)
		}
	}
	if _, err := ExtractModel("multipart/form-data", body); err == nil || !strings.Contains(err.Error(), "boundary") {
		t.Errorf("multipart without boundary: err = %v, want a boundary complaint", err)
	}
}

type part struct {
	name, filename, ctype string
	data                  []byte
}

// multipartBody builds a multipart/form-data body the way an OpenAI client
// would upload audio.
func multipartBody(t testing.TB, parts ...part) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := fmt.Sprintf(`form-data; name=%q`, p.name)
		if p.filename != "" {
			cd += fmt.Sprintf(`; filename=%q`, p.filename)
		}
		h.Set("Content-Disposition", cd)
		if p.ctype != "" {
			h.Set("Content-Type", p.ctype)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(p.data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), buf.Bytes()
}

// trapAudio is file content that looks like a model field to anything that
// greps the body instead of walking its parts.
var trapAudio = []byte("RIFF\x00\x01WAVE\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nevil-model\r\n name=\"model\" evil\x00\xff")

func TestExtractModelMultipart(t *testing.T) {
	cases := []struct {
		name   string
		parts  []part
		want   string
		stream bool
		errHas string
	}{
		{name: "file first", want: "whisper", parts: []part{
			{name: "file", filename: "a.wav", ctype: "audio/wav", data: trapAudio},
			{name: "model", data: []byte("whisper")},
			{name: "language", data: []byte("en")},
		}},
		{name: "model first", want: "whisper", parts: []part{
			{name: "model", data: []byte("whisper")},
			{name: "file", filename: "a.wav", data: trapAudio},
		}},
		{name: "stream field", want: "w", stream: true, parts: []part{
			{name: "model", data: []byte("w")}, {name: "stream", data: []byte("true")},
		}},
		{name: "file named model is not the field", want: "real", parts: []part{
			{name: "model", filename: "model.bin", data: []byte("fake")},
			{name: "model", data: []byte("real")},
		}},
		{name: "only a file named model", errHas: "no text field named model", parts: []part{
			{name: "model", filename: "model.bin", data: []byte("fake")},
		}},
		{name: "no model", errHas: "no text field named model", parts: []part{
			{name: "file", filename: "a.wav", data: trapAudio},
		}},
		{name: "empty model", errHas: "model is empty", parts: []part{{name: "model"}}},
		{name: "two models", errHas: "two different models", parts: []part{
			{name: "model", data: []byte("a")}, {name: "model", data: []byte("b")},
		}},
		{name: "model too long", errHas: "longer than", parts: []part{
			{name: "model", data: bytes.Repeat([]byte("m"), MaxModelName+10)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct, body := multipartBody(t, c.parts...)
			f, err := extract(ct, body)
			if c.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("got %+v, %v; want error containing %q", f, err, c.errHas)
				}
				return
			}
			if err != nil || f.Model != c.want || f.Stream != c.stream {
				t.Fatalf("got %+v, %v; want model %q stream %v", f, err, c.want, c.stream)
			}
		})
	}
	// A body cut before its closing boundary is refused, not half-read.
	ct, body := multipartBody(t, part{name: "file", filename: "a.wav", data: trapAudio}, part{name: "model", data: []byte("w")})
	if _, err := ExtractModel(ct, body[:len(body)/2]); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("truncated multipart: err = %v, want malformed", err)
	}
}

// FuzzExtractModel checks the JSON scanner against encoding/json: whenever
// the scanner names a model for a valid JSON document, it is the document's
// top-level "model" string, and whenever the document has one (and no
// conflicting duplicate), the scanner finds it.
func FuzzExtractModel(f *testing.F) {
	for _, s := range []string{
		`{"model":"m"}`, `{"messages":[{"content":"\"model\":\"x\""}],"model":"y"}`,
		`{"mod\u0065l":"z"}`, `{"model":"a","model":"b"}`, `{"a":[1,2,{"b":"}"}],"model":"c\\"}`,
		` {"model" : "m\u00e9"} `, `{"model":1}`, `[]`, `{"a":tru`, `{"model":"x"}}`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		got, err := ExtractModel(jsonCT, b)
		if err == nil && (got == "" || len(got) > MaxModelName || !utf8.ValidString(got)) {
			t.Fatalf("accepted invalid model %q", got)
		}
		var doc map[string]json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &doc) != nil {
			return
		}
		var want string
		raw, has := doc["model"]
		hasString := has && json.Unmarshal(raw, &want) == nil && len(raw) > 0 && raw[0] == '"'
		if err == nil {
			if !hasString || got != want {
				t.Fatalf("scanner says %q, encoding/json says %q (has string: %v) for %q", got, want, hasString, s)
			}
			return
		}
		if hasString && checkModel(want) == nil && utf8.Valid(raw) && !strings.Contains(err.Error(), "two different models") {
			t.Fatalf("scanner refused a document with model %q: %v (%q)", want, err, s)
		}
	})
}

// FuzzExtractModelMultipart puts arbitrary file bytes and field values
// into a well-formed upload: the text field must come back exactly,
// whatever the file holds.
func FuzzExtractModelMultipart(f *testing.F) {
	f.Add([]byte("RIFF"), "whisper-1", true)
	f.Add(trapAudio, "m", false)
	f.Add([]byte("--"), "x\r\ny", true)
	f.Fuzz(func(t *testing.T, file []byte, model string, fileFirst bool) {
		parts := []part{{name: "model", data: []byte(model)}}
		fp := part{name: "file", filename: "a.wav", ctype: "audio/wav", data: file}
		if fileFirst {
			parts = append([]part{fp}, parts...)
		} else {
			parts = append(parts, fp)
		}
		ct, body := multipartBody(t, parts...)
		got, err := ExtractModel(ct, body)
		if checkModel(model) != nil {
			if err == nil {
				t.Fatalf("accepted invalid model %q", model)
			}
			return
		}
		if err != nil || got != model {
			t.Fatalf("got %q, %v; want %q", got, err, model)
		}
		// Raw bytes under a fixed boundary must never panic.
		_, _ = ExtractModel("multipart/form-data; boundary=b", file)
	})
}

// chatBody returns a realistic chat request of about size bytes: the bulk
// is message text, model comes last (as the OpenAI Python client orders
// it).
func chatBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	para := strings.Repeat(`Lorem ipsum dolor sit amet, \"quoted\" text with {braces} and [brackets]. `, 40)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"%s"}`, para)
	}
	b.WriteString(`],"temperature":0.7,"max_tokens":512,"stream":true,"model":"meta-llama/Llama-3.1-8B-Instruct"}`)
	return b.Bytes()
}

// tokenBody is an embeddings request of token ids: all numbers, no long
// strings, the scanner's slowest shape.
func tokenBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"input":[[`)
	for i := 0; b.Len() < size-100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 1000+i%120000)
	}
	b.WriteString(`]],"model":"e5"}`)
	return b.Bytes()
}

func BenchmarkExtractModel1MiB(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"chat", chatBody(1 << 20), "meta-llama/Llama-3.1-8B-Instruct"},
		{"token_ids", tokenBody(1 << 20), "e5"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := ExtractModel(jsonCT, c.body)
				if err != nil || m != c.want {
					b.Fatal(m, err)
				}
			}
		})
	}
	b.Run("multipart_audio", func(b *testing.B) {
		audio := bytes.Repeat(trapAudio, (1<<20)/len(trapAudio))
		ct, body := multipartBody(b, part{name: "file", filename: "a.wav", data: audio}, part{name: "model", data: []byte("whisper")})
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if m, err := ExtractModel(ct, body); err != nil || m != "whisper" {
				b.Fatal(m, err)
			}
		}
	})
}

func TestHasSpecial8(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			w := []byte("12345678")
			w[pos] = byte(c)
			got := hasSpecial8(binary.LittleEndian.Uint64(w))
			if special[c] && !got {
				t.Fatalf("byte %q at %d missed", byte(c), pos)
			}
		}
	}
	if hasSpecial8(binary.LittleEndian.Uint64([]byte("1234,567"))) {
		t.Fatal("digits and commas flagged")
	}
}

// BenchmarkReadBodyAndExtract is the router's hot path before the
// upstream request: read the body once into a pooled buffer, find the
// model in those bytes. After warm-up it allocates only the Body and the
// model string, whatever the body's size.
func BenchmarkReadBodyAndExtract(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"small", []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)},
		{"1MiB", chatBody(1 << 20)},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := bytes.NewReader(c.body)
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(c.body)
				body, err := httpx.ReadBody(r, int64(len(c.body)), DefaultMaxBody)
				if err != nil {
					b.Fatal(err)
				}
				if f, err := extract(jsonCT, body.Bytes()); err != nil || f.Model != "meta-llama/Llama-3.1-8B-Instruct" {
					b.Fatal(f.Model, err)
				}
				body.Release()
			}
		})
	}
}
