package enginesim

import (
	"strings"
	"testing"
)

func TestTokenizerRoundTrip(t *testing.T) {
	for _, s := range []string{
		"", "a", "the", " the model", "unknownword", "12345", "  two  spaces ", "<|im_start|>user\nhi<|im_end|>\n",
		"<|im_sta", "émoji 🙂 and \x00\xff bytes", "<tools>\n{\"type\":\"function\"}\n</tools>",
	} {
		ids := Tokenize(nil, s)
		if len(ids) != CountTokens(s) {
			t.Errorf("%q: Tokenize gives %d ids, CountTokens %d", s, len(ids), CountTokens(s))
		}
		back, err := Detokenize(ids)
		if err != nil || back != s {
			t.Errorf("%q: round trip gave %q, %v", s, back, err)
		}
	}
	// Generated words are one token each; unknown text costs more.
	if n := CountTokens("the model and the engine"); n != 5 {
		t.Errorf("five vocabulary words are %d tokens", n)
	}
	if n := CountTokens("xylophonic"); n != 5 {
		t.Errorf("a 10-letter unknown word is %d tokens, want 5 (two bytes each)", n)
	}
	if CountTokens(strings.Repeat("word ", 100)) <= CountTokens(strings.Repeat("word ", 10)) {
		t.Error("longer text must count more")
	}
	if _, err := Piece(VocabSize()); err == nil {
		t.Error("an id past the vocabulary must be refused")
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "hello world", "<|im_end|>", "a<b", " \n\t", "\xff\xfe", "<|image_pad|>x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := Tokenize(nil, s)
		if len(ids) != CountTokens(s) {
			t.Fatalf("Tokenize %d ids, CountTokens %d", len(ids), CountTokens(s))
		}
		back, err := Detokenize(ids)
		if err != nil {
			t.Fatal(err)
		}
		if back != s {
			t.Fatalf("round trip: %q → %q", s, back)
		}
	})
}

// FuzzChatRequest feeds arbitrary bodies to the chat parser and template:
// they must be answered with a status, never a panic.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url"}]}],"tools":[{"type":"function","function":{"name":"f"}}],"max_tokens":1}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}],"max_tokens":1}`,
		`{"messages":[]}`, `[]`, `{"messages":"x"}`, `{"tools":[1]}`,
	} {
		f.Add([]byte(s))
	}
	te := startEngine(f, false, func(c *Config) { c.TTFT, c.ITL = 0, 0; c.MaxModelLen = 512 })
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := te.do(t, "POST", "/v1/chat/completions", body)
		if code != 200 && code != 400 && code != 404 {
			t.Fatalf("status %d: %s", code, out)
		}
	})
}
