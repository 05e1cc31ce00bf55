package enginesim

import (
	"testing"
)

func TestTokenizeForms(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.MaxModelLen = 2048 })
	count := func(body map[string]any) tokenizeResponse {
		t.Helper()
		body["model"] = "sim"
		code, b := te.post(t, "/tokenize", body)
		if code != 200 {
			t.Fatalf("/tokenize %v: %d %s", body, code, b)
		}
		r := decode[tokenizeResponse](t, b)
		if r.Count != len(r.Tokens) || r.MaxModelLen != 2048 {
			t.Fatalf("/tokenize answer %s", b)
		}
		return r
	}
	user := map[string]any{"role": "user", "content": "What is the weather in Paris?"}
	system := map[string]any{"role": "system", "content": "You answer in one sentence."}
	tool := map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Current weather of a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}

	base := count(map[string]any{"messages": []any{user}}).Count
	withSystem := count(map[string]any{"messages": []any{system, user}}).Count
	withTools := count(map[string]any{"messages": []any{user}, "tools": []any{tool}}).Count
	withBoth := count(map[string]any{"messages": []any{system, user}, "tools": []any{tool}}).Count
	noGen := count(map[string]any{"messages": []any{user}, "add_generation_prompt": false}).Count
	twoTurns := count(map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": "Sunny."}, user}}).Count
	if !(withSystem > base && withTools > base && withBoth > withTools && withBoth > withSystem) {
		t.Errorf("instructions and tools must add tokens: base %d, +system %d, +tools %d, both %d", base, withSystem, withTools, withBoth)
	}
	if noGen >= base {
		t.Errorf("the generation prompt must count: with %d, without %d", base, noGen)
	}
	if twoTurns <= base {
		t.Errorf("more messages must add tokens: %d vs %d", twoTurns, base)
	}
	// Content parts: text as text, an image as its placeholder token.
	parts := count(map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "What is the weather in Paris?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:,"}},
	}}}}).Count
	if parts != base+1 {
		t.Errorf("text part + image: %d tokens, want %d", parts, base+1)
	}

	// Prompt form, and detokenize inverts it.
	text := "Hello, wörld!  Ünïcode\tand <|im_start|> markers 123"
	r := count(map[string]any{"prompt": text, "return_token_strs": true})
	if r.TokenStrs == nil || len(*r.TokenStrs) != r.Count {
		t.Fatalf("return_token_strs: %+v", r)
	}
	code, b := te.post(t, "/detokenize", map[string]any{"model": "sim", "tokens": r.Tokens})
	if code != 200 || decode[map[string]string](t, b)["prompt"] != text {
		t.Errorf("/detokenize: %d %s, want %q", code, b, text)
	}

	for _, bad := range []map[string]any{
		{"model": "sim", "messages": []any{user}, "tools": []any{map[string]any{"type": "function", "name": "f", "parameters": map[string]any{}}}},
		{"model": "sim"},
		{"model": "sim", "messages": []any{user}, "continue_final_message": true},
	} {
		if code, b := te.post(t, "/tokenize", bad); code != 400 {
			t.Errorf("/tokenize %v: %d %s, want 400", bad, code, b)
		}
	}
	if code, b := te.post(t, "/detokenize", map[string]any{"model": "sim", "tokens": []int{-1}}); code != 400 {
		t.Errorf("/detokenize out of vocabulary: %d %s", code, b)
	}
	// continue_final_message leaves the last turn open.
	open := count(map[string]any{"messages": []any{user}, "continue_final_message": true, "add_generation_prompt": false}).Count
	if open >= noGen {
		t.Errorf("an open final message has no end marker: %d vs %d", open, noGen)
	}
}
