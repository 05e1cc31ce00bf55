package proxy

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// Tokens are charged to a key from the answer's usage, which the engine
// writes at the end: the last usage object of a JSON answer, the last
// non-null usage of a stream's frames. The router reads only what it
// relays, after writing it, and keeps at most TailBytes of it: an answer
// of any size costs one bounded buffer, and a stream nothing between
// frames. The bytes come from an engine and are parsed as untrusted
// (FuzzUsage).

// TailBytes is how much of a JSON answer's end, and of a long stream
// frame's end, is kept to find its usage.
const TailBytes = 8 << 10

// maxTokens bounds one usage number: an engine claiming more is taken at
// this, so that a key's sums cannot overflow.
const maxTokens = 1 << 40

// usageKey is the byte pattern a usage member starts with.
var usageKey = []byte(`"usage"`)

// LastUsage finds the last usage object in b, a JSON text or the end of
// one: a member "usage" whose value is an object with at least one of the
// token counts. Only a structural member is taken: the pattern
// [{,] "usage" : { cannot occur inside a JSON string, whose quotes are
// escaped. Negative numbers count as 0, huge ones as maxTokens.
func LastUsage(b []byte) (keys.Charge, bool) {
	end := len(b)
	for end > 0 {
		i := bytes.LastIndex(b[:end], usageKey)
		if i < 0 {
			return keys.Charge{}, false
		}
		end = i
		if c, ok := usageAt(b, i); ok {
			return c, true
		}
	}
	return keys.Charge{}, false
}

// usageAt reads the usage member whose key starts at b[i].
func usageAt(b []byte, i int) (keys.Charge, bool) {
	j := i - 1
	for j >= 0 && isSpace(b[j]) {
		j--
	}
	if j < 0 || (b[j] != '{' && b[j] != ',') {
		return keys.Charge{}, false
	}
	k := i + len(usageKey)
	for k < len(b) && isSpace(b[k]) {
		k++
	}
	if k >= len(b) || b[k] != ':' {
		return keys.Charge{}, false
	}
	k++
	for k < len(b) && isSpace(b[k]) {
		k++
	}
	if k >= len(b) || b[k] != '{' {
		return keys.Charge{}, false // null, or not an object
	}
	u, ok := scanUsage(b[k:])
	if !ok {
		return keys.Charge{}, false
	}
	var c keys.Charge
	found := false
	for _, f := range []struct {
		v   tokenCount
		dst *int64
	}{{u.prompt, &c.Prompt}, {u.input, &c.Prompt}, {u.completion, &c.Completion}, {u.output, &c.Completion}} {
		if f.v.set && *f.dst == 0 {
			*f.dst, found = clampTokens(f.v.n), true
		}
	}
	if !found {
		return keys.Charge{}, false
	}
	if u.promptCached.set {
		c.Cached = clampTokens(u.promptCached.n)
	} else if u.inputCached.set {
		c.Cached = clampTokens(u.inputCached.n)
	}
	c.Cached = min(c.Cached, c.Prompt)
	return c, true
}

// tokenCount is one usage number: set when present and not null.
type tokenCount struct {
	n   int64
	set bool
}

// usageFields are both shapes engines write: Chat/Completions
// (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens)
// and Responses (input_tokens, output_tokens,
// input_tokens_details.cached_tokens). A details object that is present
// counts as cached 0 when it has no cached_tokens.
type usageFields struct {
	prompt, completion, input, output tokenCount
	promptCached, inputCached         tokenCount
}

// scanUsage reads the usage object at the start of b with the proxy's
// JSON scanner (no reflection, no copy): the answer is json.Unmarshal's
// into pointers to int64 (FuzzUsageMatchesJSON holds the two together),
// so a count that is not an integer in int64's range, or a details value
// that is not an object, refuses the whole object.
func scanUsage(b []byte) (usageFields, bool) {
	s := jsonScanner{b: b}
	var u usageFields
	fields := [...]struct {
		name    string
		c       *tokenCount
		details bool
	}{{"prompt_tokens", &u.prompt, false}, {"completion_tokens", &u.completion, false}, {"input_tokens", &u.input, false},
		{"output_tokens", &u.output, false}, {"prompt_tokens_details", &u.promptCached, true}, {"input_tokens_details", &u.inputCached, true}}
	err := s.object(func(key []byte, kesc bool) error {
		for _, f := range fields {
			if !keyIs(key, kesc, f.name) {
				continue
			}
			if f.details {
				return s.details(f.c)
			}
			return s.count(f.c)
		}
		return s.skipValue()
	})
	return u, err == nil
}

// errNotCount refuses a usage object the way a decode error would.
var errNotCount = bodyErr("usage: a token count is not an integer")

// count reads an integer or null into c (null: as if absent, as a nil
// pointer would be; a later duplicate key wins, as in json.Unmarshal).
func (s *jsonScanner) count(c *tokenCount) error {
	start := s.i
	if err := s.skipValue(); err != nil {
		return err
	}
	lit := s.b[start:s.i]
	if string(lit) == "null" {
		*c = tokenCount{}
		return nil
	}
	if !isJSONInt(lit) {
		return errNotCount
	}
	n, err := strconv.ParseInt(string(lit), 10, 64)
	if err != nil {
		return errNotCount
	}
	*c = tokenCount{n: n, set: true}
	return nil
}

// isJSONInt reports whether lit is a JSON number without fraction or
// exponent: -?(0|[1-9][0-9]*).
func isJSONInt(lit []byte) bool {
	if len(lit) > 0 && lit[0] == '-' {
		lit = lit[1:]
	}
	if len(lit) == 0 || (lit[0] == '0' && len(lit) > 1) {
		return false
	}
	for _, c := range lit {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// details reads a *_tokens_details object (or null) for its cached_tokens.
func (s *jsonScanner) details(c *tokenCount) error {
	if s.i < len(s.b) && s.b[s.i] == 'n' {
		start := s.i
		if err := s.skipValue(); err != nil {
			return err
		}
		if string(s.b[start:s.i]) != "null" {
			return errNotCount
		}
		*c = tokenCount{}
		return nil
	}
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return errNotCount
	}
	// Present: cached 0 unless it says more; a repeated details object
	// updates the one before, as json.Unmarshal does into a pointer.
	got := tokenCount{n: c.n, set: true}
	err := s.object(func(key []byte, kesc bool) error {
		if keyIs(key, kesc, "cached_tokens") {
			var v tokenCount
			if err := s.count(&v); err != nil {
				return err
			}
			got.n = v.n // null leaves 0, as decoding into an int64 does
			return nil
		}
		return s.skipValue()
	})
	if err != nil {
		return err
	}
	*c = got
	return nil
}

func clampTokens(n int64) int64 { return max(0, min(n, maxTokens)) }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// tails are the pooled buffers of metered answers: twice TailBytes, so
// that keeping the last TailBytes moves them once per TailBytes written
// (an engine dribbling one byte at a time costs no copy per byte).
var tails = sync.Pool{New: func() any { b := make([]byte, 0, 2*TailBytes); return &b }}

// appendTail appends p to t, keeping at least the last TailBytes of the
// whole within t's capacity of 2*TailBytes.
func appendTail(t, p []byte) []byte {
	if len(p) >= TailBytes {
		return append(t[:0], p[len(p)-TailBytes:]...)
	}
	if len(t)+len(p) > 2*TailBytes {
		keep := TailBytes - len(p)
		t = t[:copy(t, t[len(t)-keep:])]
	}
	return append(t, p...)
}

// meter watches an admitted request's answer as it is relayed, and
// charges its grant: a JSON answer from its tail once relayed, a stream
// from each frame's usage as the frame passes. It is an io.Writer in
// front of the client's; nothing of it exists with keys off.
type meter struct {
	w     io.Writer
	grant charger
	// charged is what has been charged so far (a stream may repeat a
	// growing usage in every frame: only the growth is charged).
	charged keys.Charge
	seen    bool // a usage was found
	// promptBytes is the prompt's size in the request, for a stream that
	// asks for no usage.
	promptBytes int
	events      bool

	// tail is the JSON answer's last TailBytes (not a stream), or the
	// part of a stream's data line that spans writes.
	tail *[]byte
	// The stream's line state: at the start of a line, the current line
	// is a data line (kind 1), another line (2), or not known yet (0).
	kind   int8
	frames int64 // data frames that carried content
}

// charger is what a meter charges: a *keys.Grant.
type charger interface{ Charge(keys.Charge) }

func newMeter(w io.Writer, g charger, events bool, promptBytes int) *meter {
	return &meter{w: w, grant: g, events: events, promptBytes: promptBytes}
}

// Write relays p, then looks at what the client was given.
func (m *meter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	if n > 0 {
		if m.events {
			m.observe(p[:n])
		} else {
			m.keep(p[:n])
		}
	}
	return n, err
}

// keep appends p to the tail, dropping what is older than TailBytes (at
// least TailBytes are kept).
func (m *meter) keep(p []byte) {
	if m.tail == nil {
		m.tail = tails.Get().(*[]byte)
	}
	*m.tail = appendTail(*m.tail, p)
}

// observe follows a stream's lines across writes. A line that lies
// within p is looked at in place; only one that spans writes is copied
// (its first bytes until its kind is known, then its last TailBytes).
func (m *meter) observe(p []byte) {
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		seg := p
		if nl >= 0 {
			seg = p[:nl]
		}
		if nl >= 0 && m.kind == 0 && (m.tail == nil || len(*m.tail) == 0) {
			m.line(seg) // the whole line is here
		} else {
			m.partial(seg)
			if nl >= 0 {
				m.endPartial()
			}
		}
		if nl < 0 {
			return
		}
		p = p[nl+1:]
	}
}

// partial takes a piece of a line that continues or began in another
// write.
func (m *meter) partial(seg []byte) {
	if m.kind == 2 {
		return
	}
	if m.tail == nil {
		m.tail = tails.Get().(*[]byte)
	}
	t := *m.tail
	if m.kind == 0 {
		// Enough of the line's start to know its kind.
		take := min(len(seg), len("data:")-len(t))
		if take > 0 {
			t = append(t, seg[:take]...)
		}
		if len(t) >= len("data:") || len(seg) > take {
			if bytes.HasPrefix(t, []byte("data:")) {
				m.kind = 1
			} else {
				m.kind = 2
				*m.tail = t[:0]
				return
			}
		}
		seg = seg[take:]
	}
	*m.tail = appendTail(t, seg)
}

// endPartial ends a line gathered by partial.
func (m *meter) endPartial() {
	if m.tail != nil {
		switch t := *m.tail; m.kind {
		case 0: // shorter than "data:"
			m.line(t)
		case 1: // its start may have been dropped for its end
			m.payload(bytes.TrimPrefix(bytes.TrimSuffix(t, []byte("\r")), []byte("data:")))
		}
		*m.tail = (*m.tail)[:0]
		tails.Put(m.tail)
		m.tail = nil
	}
	m.kind = 0
}

// line looks at one whole line of the stream (its end, if it was long).
func (m *meter) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	if d, ok := bytes.CutPrefix(l, []byte("data:")); ok {
		m.payload(d)
	}
}

// payload looks at one data line's value.
func (m *meter) payload(d []byte) {
	d = bytes.TrimLeft(d, " ")
	if bytes.Equal(d, []byte("[DONE]")) {
		return
	}
	if carriesContent(d) {
		m.frames++
	}
	if c, ok := LastUsage(d); ok {
		m.charge(c)
	}
}

// charge charges what c adds to what was charged: engines that repeat the
// usage in every frame (vLLM's continuous_usage_stats) give running totals.
func (m *meter) charge(c keys.Charge) {
	m.seen = true
	d := keys.Charge{Prompt: max(0, c.Prompt-m.charged.Prompt), Completion: max(0, c.Completion-m.charged.Completion),
		Cached: max(0, c.Cached-m.charged.Cached)}
	m.charged = keys.Charge{Prompt: max(c.Prompt, m.charged.Prompt), Completion: max(c.Completion, m.charged.Completion),
		Cached: max(c.Cached, m.charged.Cached)}
	if d.Prompt > 0 || d.Completion > 0 || d.Cached > 0 {
		m.grant.Charge(d)
	}
}

// finish charges what the answer used once it is relayed (however it
// ended): a JSON answer's usage from its tail; a stream that carried no
// usage from the router's count, marked Counted: completion is its data
// frames that carried content, prompt its bytes in the request over four
// (ChargeEstimate).
func (m *meter) finish(status int) {
	if m.events {
		if m.kind == 1 && m.tail != nil {
			// The last line had no newline.
			m.endPartial()
		}
		if !m.seen && status >= 200 && status < 300 {
			m.grant.Charge(keys.Charge{Prompt: PromptEstimate(m.promptBytes), Completion: m.frames, Counted: true})
		}
	} else if m.tail != nil {
		if c, ok := LastUsage(*m.tail); ok {
			m.charge(c)
		}
	}
	if m.tail != nil {
		*m.tail = (*m.tail)[:0]
		tails.Put(m.tail)
		m.tail = nil
	}
}

// PromptEstimate is the prompt tokens charged for a stream without usage:
// its bytes in the request over four, rounded up (about what a BPE
// tokenizer gives English text and JSON; a guess, which Counted marks).
func PromptEstimate(bytes int) int64 { return int64(bytes+3) / 4 }

// contentKeys are the fields whose non-empty string value makes a frame
// one that carried output: Chat (delta.content, delta.reasoning_content,
// a tool call's arguments), Completions (text), Responses (delta).
var contentKeys = [][]byte{[]byte(`"content"`), []byte(`"reasoning_content"`), []byte(`"text"`), []byte(`"arguments"`), []byte(`"delta"`)}

// responsesEvent marks a Responses API event; of those only the .delta
// events carry new output (the .done and completed ones repeat it).
var responsesEvent = []byte(`"type":"response.`)

// carriesContent reports whether a frame's JSON has new output.
func carriesContent(d []byte) bool {
	if bytes.Contains(d, responsesEvent) {
		return nonEmptyString(d, contentKeys[4])
	}
	for _, k := range contentKeys[:4] {
		if nonEmptyString(d, k) {
			return true
		}
	}
	return false
}

// nonEmptyString reports whether some member key of d has a non-empty
// string value.
func nonEmptyString(d, key []byte) bool {
	for off := 0; off < len(d); {
		i := bytes.Index(d[off:], key)
		if i < 0 {
			return false
		}
		k := off + i + len(key)
		off = k
		for k < len(d) && isSpace(d[k]) {
			k++
		}
		if k >= len(d) || d[k] != ':' {
			continue
		}
		k++
		for k < len(d) && isSpace(d[k]) {
			k++
		}
		if k+1 < len(d) && d[k] == '"' && d[k+1] != '"' {
			return true
		}
	}
	return false
}
