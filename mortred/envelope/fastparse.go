package envelope

import (
	"bytes"
	"encoding/json"

	"github.com/segmentio/asm/base64"
)

// parseFast accepts the common, well-formed request in one pass over body:
// a JSON object whose keys are the envelope's (each once, without escapes)
// and whose images are plain base64 strings. The images are decoded from
// body's bytes directly; encoding/json would scan each multi-kilobyte string
// several times (validation, the top-level object, the array, the string)
// and copy it twice before base64 runs. An image string is found with one
// byte search for its closing quote and then decoded straight into a pooled
// buffer by an AVX2 base64 decoder (about six times the standard library's
// speed); the decoder itself is the alphabet check, so the string is read
// once. The small req_id, params and options values go through
// encoding/json as parseFull's do.
//
// It returns nil for anything else — a request parseFull would refuse, or an
// unusual but valid one (escapes or line breaks in the base64, a repeated
// key) — and parseFull then gives the answer, so the two never disagree on
// what is accepted or how (FuzzParseFastMatchesFull).
func parseFast(body []byte, lim Limits) *Parsed {
	sc := scanner{b: body}
	sc.ws()
	if !sc.eat('{') {
		return nil
	}
	var (
		images                   [][]byte
		reqID, params, options   []byte
		seenReq, seenPar, seenOp bool
	)
	for {
		sc.ws()
		key, ok := sc.plainString()
		if !ok {
			return nil
		}
		sc.ws()
		if !sc.eat(':') {
			return nil
		}
		sc.ws()
		switch string(key) {
		case "images":
			if images != nil {
				return nil
			}
			if images, ok = sc.base64Array(); !ok {
				return nil
			}
		case "req_id":
			if seenReq {
				return nil
			}
			seenReq = true
			if reqID, ok = sc.value(); !ok {
				return nil
			}
		case "params":
			if seenPar {
				return nil
			}
			seenPar = true
			if params, ok = sc.value(); !ok {
				return nil
			}
		case "options":
			if seenOp {
				return nil
			}
			seenOp = true
			if options, ok = sc.value(); !ok {
				return nil
			}
		default:
			return nil
		}
		sc.ws()
		if sc.eat(',') {
			continue
		}
		if sc.eat('}') {
			break
		}
		return nil
	}
	sc.ws()
	if sc.i != len(body) || len(images) == 0 || (lim.MaxItems > 0 && len(images) > lim.MaxItems) {
		return nil
	}

	p := &Parsed{}
	if reqID != nil && !isNull(reqID) {
		if err := json.Unmarshal(reqID, &p.ReqID); err != nil {
			return nil
		}
	}
	if params != nil && !isNull(params) {
		if err := json.Unmarshal(params, &p.Params); err != nil || p.Params == nil {
			return nil
		}
	}
	if lim.Params != nil && len(lim.Params(p.Params)) > 0 {
		return nil
	}
	if options != nil && !isNull(options) {
		if err := json.Unmarshal(options, &p.Request.Options); err != nil || p.Request.Options == nil {
			return nil
		}
	}
	var errs []FieldError
	if p.Output, errs = decodeOptions(p.Request.Options, nil); len(errs) > 0 {
		return nil
	}

	p.Data = make([][]byte, len(images))
	for i, raw := range images {
		b, ok := decodeImage(p.buffer, raw)
		if !ok {
			p.Release()
			return nil
		}
		p.Data[i] = b
	}
	return p
}

// decodeImage decodes one image string (padded or not) into a buffer from
// alloc. It reports false for anything parseFull would not decode to the
// same bytes. The decoder skips CR and LF, which JSON forbids raw in a
// string; rather than scan the string for them, the decoded length is
// checked: any skipped character makes it shorter than the string's length
// implies. That holds for the lengths a string without skipped characters
// can have (a whole number of quads when padded, not one character past a
// quad when not); a skipped character in a string of any other length could
// go unseen, so those are left to parseFull.
func decodeImage(alloc func(int) []byte, raw []byte) ([]byte, bool) {
	enc, want := base64.RawStdEncoding, len(raw)*6/8
	if len(raw)%4 == 1 {
		return nil, false
	}
	if raw[len(raw)-1] == '=' {
		pad := 1
		if len(raw) > 1 && raw[len(raw)-2] == '=' {
			pad = 2
		}
		enc, want = base64.StdEncoding, len(raw)/4*3-pad
		if len(raw)%4 != 0 {
			return nil, false
		}
	}
	b := alloc(enc.DecodedLen(len(raw)))
	n, err := enc.Decode(b, raw)
	if err != nil || n == 0 || n != want {
		return nil, false
	}
	return b[:n], true
}

// scanner walks a JSON document for parseFast; every method reports false
// rather than describing a problem.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string without escapes or control characters and
// returns its contents.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// base64Array reads an array of non-empty strings and returns their
// contents. It does not look inside them: decodeImage refuses anything but
// the alphabet and padding, escapes and raw line breaks included.
func (s *scanner) base64Array() ([][]byte, bool) {
	if !s.eat('[') {
		return nil, false
	}
	var out [][]byte
	for {
		s.ws()
		if !s.eat('"') {
			return nil, false
		}
		end := bytes.IndexByte(s.b[s.i:], '"')
		if end <= 0 {
			return nil, false
		}
		out = append(out, s.b[s.i:s.i+end])
		s.i += end + 1
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat(']') {
			return out, true
		}
		return nil, false
	}
}

// value finds the extent of the value at the cursor (strings, nesting and
// literals) and returns it when it is valid JSON.
func (s *scanner) value() ([]byte, bool) {
	start, depth := s.i, 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			s.i++
			for s.i < len(s.b) && s.b[s.i] != '"' {
				if s.b[s.i] == '\\' {
					s.i++
				}
				s.i++
			}
			if s.i >= len(s.b) {
				return nil, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return s.done(start)
			}
			depth--
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return s.done(start)
			}
		}
		s.i++
		if depth == 0 && (s.b[s.i-1] == '}' || s.b[s.i-1] == ']' || s.b[s.i-1] == '"') {
			return s.done(start)
		}
	}
	return s.done(start)
}

func (s *scanner) done(start int) ([]byte, bool) {
	v := s.b[start:s.i]
	return v, len(v) > 0 && json.Valid(v)
}
