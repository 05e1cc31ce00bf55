package enginesim

import (
	"bytes"
	"strings"
	"testing"
)

type completionOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestCompletions(t *testing.T) {
	te := startEngine(t, false, nil)
	code, body := te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "Once upon a time"})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	got := decode[completionOut](t, body)
	if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" || len(got.Choices) != 1 {
		t.Fatalf("shape: %s", body)
	}
	// vLLM's legacy default is 16 tokens.
	if got.Usage.CompletionTokens != completionDefaultMaxTokens || got.Usage.PromptTokens != CountTokens("Once upon a time") {
		t.Errorf("usage: %+v", got.Usage)
	}
	for _, field := range []string{`"stop_reason":null`, `"prompt_logprobs":null`, `"logprobs":null`} {
		if !bytes.Contains(body, []byte(field)) {
			t.Errorf("vLLM's response carries %s: %s", field, body)
		}
	}

	// Token-id prompts count as given.
	_, body = te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": []int{1, 2, 3, 4}, "max_tokens": 2})
	if u := decode[completionOut](t, body).Usage; u.PromptTokens != 4 || u.CompletionTokens != 2 {
		t.Errorf("token prompt usage: %+v", u)
	}

	_, frames := te.stream(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "go", "max_tokens": 3, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	if len(frames) != 5 || frames[4].data != "[DONE]" {
		t.Fatalf("want 3 tokens, usage, [DONE]: %v", frames)
	}
	for i := 0; i < 3; i++ {
		c := decode[chunkOut](t, []byte(frames[i].data))
		if c.Object != "text_completion" || c.Choices[0].Text == nil || c.Choices[0].Delta.Role != nil {
			t.Errorf("frame %d: %s", i, frames[i].data)
		}
		if (i == 2) != (c.Choices[0].FinishReason != nil) {
			t.Errorf("frame %d finish: %s", i, frames[i].data)
		}
	}
	if u := decode[chunkOut](t, []byte(frames[3].data)); u.Usage == nil || u.Usage.CompletionTokens != 3 || len(u.Choices) != 0 {
		t.Errorf("usage frame: %s", frames[3].data)
	}
}
