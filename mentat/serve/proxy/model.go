package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxModelName is the longest model name the router accepts, in bytes.
// Engine model names are Hugging Face paths, far shorter than this.
const MaxModelName = 4096

// BodyError says why a request body cannot be routed. Every BodyError is
// the client's fault (400).
type BodyError struct {
	// Msg is the client-facing reason.
	Msg string
}

func (e *BodyError) Error() string { return e.Msg }

func bodyErr(format string, args ...any) error {
	return &BodyError{Msg: fmt.Sprintf(format, args...)}
}

// fields is what routing reads from a body.
type fields struct {
	Model string
	// Stream is true when the body says "stream": true (JSON) or
	// stream=true (multipart). It only labels the in-flight row.
	Stream bool
	// Messages, Prompt and Input are the raw JSON values of those
	// top-level keys (slices of the body, nil when absent), and User the
	// raw contents of a string "user": what the balancer reads
	// (prompt.go). They are found in the same walk as model, at no cost
	// beyond remembering where the values start and end.
	Messages, Prompt, Input, User []byte
}

// ExtractModel returns the model a request body names. contentType is the
// request's Content-Type: multipart/form-data bodies are walked part by
// part and the text field named "model" is taken (a file part is never
// read as the field, whatever its bytes); every other body is read as a
// JSON object whose top-level "model" is a string.
//
// Only what routing needs is parsed: nested values are skipped without
// being decoded or fully validated, which the engine does anyway. A body
// that names two different models is refused, since engines disagree on
// which duplicate wins. Errors are *BodyError.
func ExtractModel(contentType string, body []byte) (string, error) {
	f, err := extract(contentType, body)
	return f.Model, err
}

func extract(contentType string, body []byte) (fields, error) {
	if !maybeMultipart(contentType) {
		// Not worth parsing (and allocating parameters for): whatever
		// it says, the body is tried as JSON below.
		return scanJSON(body)
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err == nil && mt == "multipart/form-data" {
		b := params["boundary"]
		if b == "" {
			return fields{}, bodyErr("multipart/form-data body without a boundary parameter in Content-Type")
		}
		return scanMultipart(body, b)
	}
	// Anything else is tried as JSON: curl -d sends JSON labelled
	// application/x-www-form-urlencoded, and engines accept it.
	return scanJSON(body)
}

// maybeMultipart reports whether a Content-Type can parse as
// multipart/form-data: its media type, after leading white space, starts
// with "multipart/" in any case (mime.ParseMediaType trims and lowers
// the same way, so a false here is never a multipart body).
func maybeMultipart(ct string) bool {
	ct = strings.TrimLeftFunc(ct, unicode.IsSpace)
	const prefix = "multipart/"
	return len(ct) >= len(prefix) && strings.EqualFold(ct[:len(prefix)], prefix)
}

// checkModel validates a decoded model name.
func checkModel(m string) error {
	switch {
	case m == "":
		return bodyErr("model is empty; name one of the models listed by GET /v1/models")
	case len(m) > MaxModelName:
		return bodyErr("model name is %d bytes, longer than the %d allowed", len(m), MaxModelName)
	case !utf8.ValidString(m):
		return bodyErr("model name is not valid UTF-8")
	}
	return nil
}

// mergeModel records one occurrence of the model field.
func mergeModel(f *fields, seen *bool, m string) error {
	if err := checkModel(m); err != nil {
		return err
	}
	if *seen && f.Model != m {
		return bodyErr("body names two different models (%q and %q); send one model field", f.Model, m)
	}
	*seen = true
	f.Model = m
	return nil
}

// --- multipart ---

func scanMultipart(body []byte, boundary string) (fields, error) {
	var f fields
	seen := false
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		// NextRawPart: no quoted-printable decoding; routing reads only
		// the small text fields, and skipping a file part is a boundary
		// search through its bytes, never a parse of them.
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fields{}, bodyErr("multipart/form-data body is malformed: %v", err)
		}
		name, isFile := p.FormName(), p.FileName() != ""
		if isFile || (name != "model" && name != "stream") {
			continue
		}
		v, err := io.ReadAll(io.LimitReader(p, MaxModelName+1))
		if err != nil {
			return fields{}, bodyErr("multipart/form-data field %q is malformed: %v", name, err)
		}
		if name == "stream" {
			f.Stream = string(v) == "true" || string(v) == "True" || string(v) == "1"
			continue
		}
		if err := mergeModel(&f, &seen, string(v)); err != nil {
			return fields{}, err
		}
	}
	if !seen {
		return fields{}, bodyErr("multipart/form-data body has no text field named model; add one (a file part named model does not count)")
	}
	return f, nil
}

// --- JSON ---

// special marks the bytes the container skipper must look at.
var special = func() (t [256]bool) {
	for _, c := range []byte(`"[]{}`) {
		t[c] = true
	}
	return t
}()

// isDelim marks bytes that end a number or literal.
var isDelim = func() (t [256]bool) {
	for _, c := range []byte(",}] \t\r\n") {
		t[c] = true
	}
	return t
}()

type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) syntax(what string) error {
	if s.i >= len(s.b) {
		return bodyErr("body is not a complete JSON object: it ends where %s was expected", what)
	}
	return bodyErr("body is not a valid JSON object: %s expected at byte offset %d", what, s.i)
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// str skips the string starting at s.i (which is '"') and returns its
// contents without the quotes. Long strings cost one vectorised search per
// quote, never a byte-by-byte walk.
func (s *jsonScanner) str() ([]byte, error) {
	start := s.i + 1
	j := start
	for {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			s.i = len(s.b)
			return nil, s.syntax("the end of a string")
		}
		j += k
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for p := j - 1; p >= start && s.b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			s.i = j + 1
			return s.b[start:j], nil
		}
		j++
	}
}

func hasEscape(raw []byte) bool { return bytes.IndexByte(raw, '\\') >= 0 }

// skipContainer skips the object or array starting at s.i by bracket
// depth, stepping over strings. Mismatched bracket kinds are left to the
// engine to refuse.
func (s *jsonScanner) skipContainer() error {
	b := s.b
	depth := 0
	i := s.i
	for i < len(b) {
		if i+8 <= len(b) && !hasSpecial8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
			continue
		}
		c := b[i]
		if !special[c] {
			i++
			continue
		}
		switch c {
		case '"':
			s.i = i
			if _, err := s.str(); err != nil {
				return err
			}
			i = s.i
			continue
		case '{', '[':
			depth++
		default: // '}' or ']'
			depth--
			if depth == 0 {
				s.i = i + 1
				return nil
			}
		}
		i++
	}
	s.i = len(b)
	return s.syntax("the end of a nested object or array")
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasSpecial8 reports whether eight bytes may hold one of `"[]{}`, so runs
// of numbers and commas are skipped a word at a time. Clearing bit 5 folds
// '{' '}' onto '[' ']', and setting bits 1-2 folds those onto 0x5F; a few
// other bytes (Y _ y DEL) also land there, which only costs a byte-wise
// look. A zero byte after the XORs is found with the usual borrow trick.
func hasSpecial8(w uint64) bool {
	q := w ^ (0x22 * ones)
	k := ((w &^ (0x20 * ones)) | (0x06 * ones)) ^ (0x5F * ones)
	return ((q-ones)&^q|(k-ones)&^k)&highs != 0
}

// skipValue skips one value of any kind.
func (s *jsonScanner) skipValue() error {
	if s.i >= len(s.b) {
		return s.syntax("a value")
	}
	switch s.b[s.i] {
	case '"':
		_, err := s.str()
		return err
	case '{', '[':
		return s.skipContainer()
	case ',', '}', ']', ':':
		return s.syntax("a value")
	}
	start := s.i
	for s.i < len(s.b) && !isDelim[s.b[s.i]] {
		s.i++
	}
	if s.i == start {
		return s.syntax("a value")
	}
	return nil
}

// decodeString turns the raw contents of a JSON string into Go text.
func decodeString(raw []byte, esc bool) (string, error) {
	if !esc {
		for _, c := range raw {
			if c < 0x20 {
				return "", bodyErr("body is not valid JSON: control character in a string")
			}
		}
		return string(raw), nil
	}
	if !utf8.Valid(raw) {
		return "", bodyErr("model name is not valid UTF-8")
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var out string
	if err := json.Unmarshal(q, &out); err != nil {
		return "", bodyErr("body is not valid JSON: bad string escape")
	}
	return out, nil
}

// keyIs compares a raw key with name, decoding escapes only when present
// (an engine reads "mod\u0065l" as "model").
func keyIs(raw []byte, esc bool, name string) bool {
	if !esc {
		return string(raw) == name
	}
	k, err := decodeString(raw, true)
	return err == nil && k == name
}

// object walks the object starting at s.i ('{'), calling fn for each key
// with s.i at the key's value; fn must consume the value.
func (s *jsonScanner) object(fn func(key []byte, kesc bool) error) error {
	b := s.b
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if s.i >= len(b) || b[s.i] != '"' {
			return s.syntax("a string key")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		s.ws()
		if s.i >= len(b) || b[s.i] != ':' {
			return s.syntax("':' after a key")
		}
		s.i++
		s.ws()
		if err := fn(key, hasEscape(key)); err != nil {
			return err
		}
		s.ws()
		if s.i < len(b) && b[s.i] == ',' {
			s.i++
			s.ws()
			continue
		}
		if s.i < len(b) && b[s.i] == '}' {
			s.i++
			return nil
		}
		return s.syntax("',' or '}'")
	}
}

// scanJSON walks the top-level object once. It reads every top-level key
// (so a second, different model is caught) but decodes only model and
// stream.
func scanJSON(b []byte) (fields, error) {
	s := jsonScanner{b: b}
	s.ws()
	if s.i >= len(b) {
		return fields{}, bodyErr("request body is empty; send a JSON object with a model field")
	}
	if b[s.i] != '{' {
		return fields{}, bodyErr("body is not a JSON object; send a JSON object with a model field (or multipart/form-data with a model text field)")
	}
	var f fields
	seen := false
	err := s.object(func(key []byte, kesc bool) error {
		start := s.i
		switch {
		case keyIs(key, kesc, "model"):
			if s.i >= len(b) || b[s.i] != '"' {
				return bodyErr("model must be a JSON string")
			}
			raw, err := s.str()
			if err != nil {
				return err
			}
			if len(raw) > 6*MaxModelName {
				return bodyErr("model name is longer than the %d bytes allowed", MaxModelName)
			}
			m, err := decodeString(raw, hasEscape(raw))
			if err != nil {
				return err
			}
			return mergeModel(&f, &seen, m)
		case keyIs(key, kesc, "stream"):
			if err := s.skipValue(); err != nil {
				return err
			}
			f.Stream = string(b[start:s.i]) == "true"
			return nil
		}
		if err := s.skipValue(); err != nil {
			return err
		}
		switch v := b[start:s.i]; {
		case keyIs(key, kesc, "messages"):
			f.Messages = v
		case keyIs(key, kesc, "prompt"):
			f.Prompt = v
		case keyIs(key, kesc, "input"):
			f.Input = v
		case keyIs(key, kesc, "user"):
			if len(v) >= 2 && v[0] == '"' {
				f.User = v[1 : len(v)-1]
			}
		}
		return nil
	})
	if err != nil {
		return fields{}, err
	}
	s.ws()
	if s.i != len(b) {
		return fields{}, bodyErr("body has data after its JSON object at byte offset %d", s.i)
	}
	if !seen {
		return fields{}, bodyErr("body has no model field; add \"model\": \"<name>\" (GET /v1/models lists the names)")
	}
	return f, nil
}
