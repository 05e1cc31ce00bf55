package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

func TestLastUsage(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want keys.Charge
		ok   bool
	}{
		{"chat", `{"id":"x","choices":[],"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5}}`,
			keys.Charge{Prompt: 12, Completion: 5}, true},
		{"chat cached", `{"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}`,
			keys.Charge{Prompt: 40, Completion: 2, Cached: 32}, true},
		{"responses", `{"type":"response.completed","response":{"output":[{"content":[{"text":"hi"}]}],"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":0},"output_tokens":4,"total_tokens":13}}}`,
			keys.Charge{Prompt: 9, Completion: 4}, true},
		{"embeddings", `{"object":"list","data":[],"usage":{"prompt_tokens":3,"total_tokens":3}}`,
			keys.Charge{Prompt: 3}, true},
		{"null", `{"choices":[{"delta":{"content":"a"}}],"usage":null}`, keys.Charge{}, false},
		{"none", `{"choices":[]}`, keys.Charge{}, false},
		{"inside a string", `{"choices":[{"message":{"content":"{\"usage\":{\"prompt_tokens\":999}}"}}]}`, keys.Charge{}, false},
		{"last wins", `{"a":{"usage":{"prompt_tokens":1,"completion_tokens":1}},"usage":{"prompt_tokens":7,"completion_tokens":8}}`,
			keys.Charge{Prompt: 7, Completion: 8}, true},
		{"tail cut before", `t text","x":1},"usage": {"prompt_tokens": 5 , "completion_tokens":6}}` + "\n",
			keys.Charge{Prompt: 5, Completion: 6}, true},
		{"negative and huge", `{"usage":{"prompt_tokens":-4,"completion_tokens":99999999999999999,"prompt_tokens_details":{"cached_tokens":9}}}`,
			keys.Charge{Completion: maxTokens}, true},
		{"beyond int64", `{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":1}}`, keys.Charge{}, false},
		{"not integers", `{"usage":{"prompt_tokens":5.0,"completion_tokens":1}}`, keys.Charge{}, false},
		{"exponent", `{"usage":{"prompt_tokens":1e3,"completion_tokens":1}}`, keys.Charge{}, false},
		{"a string count", `{"usage":{"prompt_tokens":"7","completion_tokens":1}}`, keys.Charge{}, false},
		{"null counts", `{"usage":{"prompt_tokens":null,"completion_tokens":3,"prompt_tokens_details":null}}`, keys.Charge{Completion: 3}, true},
		{"details not an object", `{"usage":{"prompt_tokens":3,"prompt_tokens_details":[1]}}`, keys.Charge{}, false},
		{"escaped key", `{"usage":{"prompt\u005ftokens":4}}`, keys.Charge{Prompt: 4}, true},
		{"no known field", `{"usage":{"foo":1}}`, keys.Charge{}, false},
		{"cached over prompt", `{"usage":{"prompt_tokens":2,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":50}}}`,
			keys.Charge{Prompt: 2, Cached: 2}, true},
		{"broken", `{"usage":{"prompt_tokens":3,`, keys.Charge{}, false},
	} {
		got, ok := LastUsage([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: LastUsage = %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// charges records what a meter charged.
type charges struct{ list []keys.Charge }

func (c *charges) Charge(ch keys.Charge) { c.list = append(c.list, ch) }

func (c *charges) sum() keys.Charge {
	var s keys.Charge
	for _, ch := range c.list {
		s.Prompt += ch.Prompt
		s.Completion += ch.Completion
		s.Cached += ch.Cached
		s.Counted = s.Counted || ch.Counted
	}
	return s
}

// feed writes s to a meter in pieces of n bytes (every split of frames).
func feed(t *testing.T, s string, n int, events bool, promptBytes int) (*charges, string) {
	t.Helper()
	var out bytes.Buffer
	c := &charges{}
	m := newMeter(&out, c, events, promptBytes)
	for b := []byte(s); len(b) > 0; {
		k := min(n, len(b))
		if _, err := m.Write(b[:k]); err != nil {
			t.Fatal(err)
		}
		b = b[k:]
	}
	m.finish(200)
	if m.tail != nil {
		t.Fatal("a buffer is held after finish")
	}
	return c, out.String()
}

func chatChunk(content string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
}

func TestMeterStreams(t *testing.T) {
	role := `data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	words := chatChunk("a") + chatChunk(" b") + chatChunk(" c")
	withUsage := role + words + `data: {"id":"c","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}` + "\n\ndata: [DONE]\n\n"
	noUsage := role + words + "data: [DONE]\n\n"
	// Every frame repeats a running usage (vLLM's continuous_usage_stats).
	continuous := `data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":11,"completion_tokens":1}}` + "\n\n" +
		`data: {"choices":[{"delta":{"content":"b"}}],"usage":{"prompt_tokens":11,"completion_tokens":2}}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":2}}` + "\r\n\r\n"
	responses := `event: response.created` + "\n" + `data: {"type":"response.created","response":{"output":[],"usage":null}}` + "\n\n" +
		`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","delta":"hi"}` + "\n\n" +
		`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","delta":" there"}` + "\n\n" +
		`data: {"type":"response.output_text.done","text":"hi there"}` + "\n\n" +
		`data: {"type":"response.completed","response":{"output":[{"content":[{"type":"output_text","text":"hi there"}]}],"usage":{"input_tokens":6,"output_tokens":2,"total_tokens":8}}}` + "\n\n"
	long := `data: {"type":"response.completed","response":{"output":[{"content":[{"text":"` + strings.Repeat("x", 3*TailBytes) +
		`"}]}],"usage":{"input_tokens":60,"output_tokens":2000}}}` + "\n\n"
	for _, c := range []struct {
		name, in string
		want     keys.Charge
	}{
		{"include_usage", withUsage, keys.Charge{Prompt: 11, Completion: 3}},
		{"no usage", noUsage, keys.Charge{Prompt: PromptEstimate(41), Completion: 3, Counted: true}},
		{"continuous", continuous, keys.Charge{Prompt: 11, Completion: 2}},
		{"responses", responses, keys.Charge{Prompt: 6, Completion: 2}},
		{"long frame", long, keys.Charge{Prompt: 60, Completion: 2000}},
		{"no newline at the end", strings.TrimSuffix(withUsage, "\n\ndata: [DONE]\n\n"), keys.Charge{Prompt: 11, Completion: 3}},
	} {
		for _, n := range []int{1, 2, 5, 7, 64, 512, 1 << 20} {
			got, out := feed(t, c.in, n, true, 41)
			if out != c.in {
				t.Fatalf("%s in pieces of %d: relayed bytes differ", c.name, n)
			}
			if s := got.sum(); s != c.want {
				t.Errorf("%s in pieces of %d: charged %+v (%v), want %+v", c.name, n, s, got.list, c.want)
			}
		}
	}
	// A stream that failed before any frame is not charged its estimate.
	c := &charges{}
	m := newMeter(&bytes.Buffer{}, c, true, 100)
	m.finish(500)
	if len(c.list) != 0 {
		t.Errorf("a failed stream was charged %v", c.list)
	}
}

func TestMeterJSON(t *testing.T) {
	body := `{"id":"x","choices":[{"message":{"content":"` + strings.Repeat("w ", 3*TailBytes) + `"}}],"usage":{"prompt_tokens":21,"completion_tokens":9000}}`
	for _, n := range []int{1, 3, 1000, TailBytes, TailBytes + 1, 1 << 20} {
		if n == 1 && testing.Short() {
			continue
		}
		got, out := feed(t, body, n, false, 0)
		if out != body {
			t.Fatal("relayed bytes differ")
		}
		if s := got.sum(); s != (keys.Charge{Prompt: 21, Completion: 9000}) || len(got.list) != 1 {
			t.Errorf("pieces of %d: charged %v", n, got.list)
		}
	}
	// An answer without usage (an error, a /tokenize answer) costs nothing.
	if got, _ := feed(t, `{"error":{"message":"no"}}`, 7, false, 0); len(got.list) != 0 {
		t.Errorf("charged %v", got.list)
	}
}

// FuzzUsage feeds engine bytes, which may be hostile, to the tail parser
// and the stream observer: neither may panic, hold a buffer after finish,
// change a byte of what is relayed, or charge a negative or over-large
// count.
func FuzzUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`), uint8(3))
	f.Add([]byte(chatChunk("x")+`data: {"usage":{"input_tokens":4,"output_tokens":5,"input_tokens_details":{"cached_tokens":1}}}`+"\n\n"), uint8(1))
	f.Add([]byte("data:data:\r\n\n\ndata: [DONE]\n"), uint8(2))
	f.Add([]byte(`,"usage" : {"prompt_tokens":-1e99}`), uint8(9))
	f.Add([]byte(`{"usage":{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens":"x"}}`), uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		// The parser only ever sees a tail (at most 2*TailBytes).
		tail := b[max(0, len(b)-2*TailBytes):]
		if c, ok := LastUsage(tail); ok {
			checkCharge(t, c)
		} else if c != (keys.Charge{}) {
			t.Fatalf("no usage but charge %+v", c)
		}
		n := int(split) + 1
		for _, events := range []bool{true, false} {
			got, out := feed(t, string(b), n, events, len(b))
			if out != string(b) {
				t.Fatal("relayed bytes differ")
			}
			for _, c := range got.list {
				checkCharge(t, c)
			}
		}
	})
}

func checkCharge(t *testing.T, c keys.Charge) {
	t.Helper()
	for _, v := range []int64{c.Prompt, c.Completion, c.Cached} {
		if v < 0 || v > maxTokens {
			t.Fatalf("charge %+v out of range", c)
		}
	}
	if c.Cached > c.Prompt && !c.Counted {
		t.Fatalf("cached over prompt: %+v", c)
	}
}

// usageByJSON is what json.Unmarshal makes of a usage object: the rule
// scanUsage follows without reflection.
func usageByJSON(b []byte) (usageFields, bool) {
	type details struct {
		CachedTokens int64 `json:"cached_tokens"`
	}
	var u struct {
		PromptTokens     *int64   `json:"prompt_tokens"`
		CompletionTokens *int64   `json:"completion_tokens"`
		InputTokens      *int64   `json:"input_tokens"`
		OutputTokens     *int64   `json:"output_tokens"`
		PromptDetails    *details `json:"prompt_tokens_details"`
		InputDetails     *details `json:"input_tokens_details"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return usageFields{}, false
	}
	count := func(p *int64) tokenCount {
		if p == nil {
			return tokenCount{}
		}
		return tokenCount{n: *p, set: true}
	}
	cached := func(d *details) tokenCount {
		if d == nil {
			return tokenCount{}
		}
		return tokenCount{n: d.CachedTokens, set: true}
	}
	return usageFields{prompt: count(u.PromptTokens), completion: count(u.CompletionTokens), input: count(u.InputTokens),
		output: count(u.OutputTokens), promptCached: cached(u.PromptDetails), inputCached: cached(u.InputDetails)}, true
}

// FuzzUsageMatchesJSON: on any valid JSON object, scanUsage reads what
// json.Unmarshal reads. (Unmarshal also matches keys case-insensitively,
// which engines never rely on: inputs with upper case or \u escapes,
// which could spell it, are skipped.)
func FuzzUsageMatchesJSON(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens":1,"completion_tokens":2}`,
		`{"input_tokens":4,"output_tokens":5,"input_tokens_details":{"cached_tokens":1}}`,
		`{"prompt_tokens":-1e99}`, `{"prompt_tokens":"x"}`, `{"prompt_tokens":null}`,
		`{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{}}`,
		`{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null}`,
		`{"prompt_tokens":1,"prompt_tokens":null}`, `{"prompt\u005ftokens":3}`,
		`{"x":[1,{"prompt_tokens":9}],"prompt_tokens":99999999999999999999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		if !json.Valid(b) || len(b) == 0 || b[0] != '{' || !bytes.Equal(bytes.ToLower(b), b) || bytes.Contains(b, []byte(`\u`)) {
			return
		}
		want, wok := usageByJSON(b)
		got, gok := scanUsage(b)
		if wok != gok || (wok && got != want) {
			t.Fatalf("%s:\n scan %+v %v\n json %+v %v", b, got, gok, want, wok)
		}
	})
}
