package enginesim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

type chatOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestChatNonStream(t *testing.T) {
	te := startEngine(t, false, nil)
	msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the queue."}}
	code, body := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "messages": msgs, "max_tokens": 5})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	got := decode[chatOut](t, body)
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != "sim" || got.Created == 0 || len(got.Choices) != 1 {
		t.Fatalf("shape: %s", body)
	}
	c := got.Choices[0]
	if c.Message.Role != "assistant" || c.FinishReason != "length" || c.Message.Content == "" {
		t.Fatalf("choice: %s", body)
	}
	for _, field := range []string{`"tool_calls":[]`, `"refusal":null`, `"reasoning_content":null`, `"stop_reason":null`, `"logprobs":null`, `"prompt_tokens_details":null`} {
		if !bytes.Contains(body, []byte(field)) {
			t.Errorf("vLLM's response carries %s: %s", field, body)
		}
	}
	// The usage agrees with the engine's own tokenizer, both ways.
	_, tb := te.post(t, "/tokenize", map[string]any{"model": "sim", "messages": msgs})
	tok := decode[tokenizeResponse](t, tb)
	if got.Usage.PromptTokens != tok.Count {
		t.Errorf("prompt_tokens %d, /tokenize says %d", got.Usage.PromptTokens, tok.Count)
	}
	if got.Usage.CompletionTokens != 5 || got.Usage.TotalTokens != got.Usage.PromptTokens+5 {
		t.Errorf("usage %+v", got.Usage)
	}
	if n := CountTokens(c.Message.Content); n != 5 {
		t.Errorf("content %q is %d tokens, usage says 5", c.Message.Content, n)
	}

	// The same request gives the same text; without a cap it ends by itself.
	_, again := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "messages": msgs, "max_tokens": 5})
	if decode[chatOut](t, again).Choices[0].Message.Content != c.Message.Content {
		t.Errorf("generation is not deterministic")
	}
	_, body = te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "messages": msgs})
	free := decode[chatOut](t, body)
	if free.Choices[0].FinishReason != "stop" || free.Usage.CompletionTokens < minNaturalLen || free.Usage.CompletionTokens > maxNaturalLen {
		t.Errorf("uncapped generation: finish %q after %d tokens", free.Choices[0].FinishReason, free.Usage.CompletionTokens)
	}
	_, body = te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "messages": msgs, "max_tokens": 300, "ignore_eos": true})
	if u := decode[chatOut](t, body); u.Usage.CompletionTokens != 300 || u.Choices[0].FinishReason != "length" {
		t.Errorf("ignore_eos: %d tokens, finish %q", u.Usage.CompletionTokens, u.Choices[0].FinishReason)
	}
	// An absent model is served by the first served name, as in vLLM.
	if code, body := te.post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}); code != 200 || decode[chatOut](t, body).Model != "sim" {
		t.Errorf("no model: %d %s", code, body)
	}
}

type chunkOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string         `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func (te *testEngine) stream(t *testing.T, path string, body any) (*http.Response, []frame) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := te.client.Post(te.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return res, readFrames(t, res.Body)
}

func TestChatStream(t *testing.T) {
	const itl = 40 * time.Millisecond
	te := startEngine(t, false, func(c *Config) { c.TTFT = 30 * time.Millisecond; c.ITL = itl })
	res, frames := te.stream(t, "/v1/chat/completions", map[string]any{
		"model": "sim", "stream": true, "max_tokens": 6,
		"messages":       []map[string]any{{"role": "user", "content": "stream please"}},
		"stream_options": map[string]any{"include_usage": true},
	})
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	// role, 6 tokens, usage, [DONE]
	if len(frames) != 9 || frames[8].data != "[DONE]" {
		t.Fatalf("got %d frames: %v", len(frames), frames)
	}
	chunks := make([]chunkOut, 8)
	var text strings.Builder
	for i := range chunks {
		chunks[i] = decode[chunkOut](t, []byte(frames[i].data))
		c := chunks[i]
		if c.Object != "chat.completion.chunk" || c.ID != chunks[0].ID || c.Model != "sim" || c.Created == 0 {
			t.Fatalf("frame %d: %s", i, frames[i].data)
		}
		if i >= 1 && i <= 6 {
			text.WriteString(*c.Choices[0].Delta.Content)
		}
	}
	if r := chunks[0].Choices[0].Delta.Role; r == nil || *r != "assistant" || *chunks[0].Choices[0].Delta.Content != "" {
		t.Errorf("first frame must carry the role: %s", frames[0].data)
	}
	for i := 1; i <= 5; i++ {
		if chunks[i].Choices[0].FinishReason != nil || chunks[i].Choices[0].Delta.Role != nil {
			t.Errorf("frame %d: %s", i, frames[i].data)
		}
	}
	if f := chunks[6].Choices[0].FinishReason; f == nil || *f != "length" || string(chunks[6].Choices[0].StopReason) != "null" {
		t.Errorf("last token frame: %s", frames[6].data)
	}
	u := chunks[7]
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 6 || u.Usage.TotalTokens != u.Usage.PromptTokens+6 {
		t.Errorf("usage frame: %s", frames[7].data)
	}
	if CountTokens(text.String()) != 6 {
		t.Errorf("streamed text %q is not 6 tokens", text.String())
	}
	// Frames leave on the engine's clock, one by one: five gaps of at least
	// itl less the jitter. (A lower bound only: a loaded machine is slower.)
	if gap := frames[6].at.Sub(frames[1].at); gap < 5*time.Duration(float64(itl)*0.85) {
		t.Errorf("token frames 1..6 arrived within %v; the engine should take about 5×%v", gap, itl)
	}
	if frames[1].at.Sub(frames[0].at) > itl/2 {
		t.Logf("role and first token are sent together; they arrived %v apart", frames[1].at.Sub(frames[0].at))
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	te := startEngine(t, false, nil)
	_, frames := te.stream(t, "/v1/chat/completions", map[string]any{
		"model": "sim", "stream": true, "max_tokens": 2, "messages": []map[string]any{{"role": "user", "content": "x"}},
	})
	if len(frames) != 4 || frames[3].data != "[DONE]" || strings.Contains(frames[2].data, "usage") {
		t.Fatalf("want role, 2 tokens, [DONE] and no usage: %v", frames)
	}
	_, frames = te.stream(t, "/v1/chat/completions", map[string]any{
		"model": "sim", "stream": true, "max_tokens": 2, "messages": []map[string]any{{"role": "user", "content": "x"}},
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true},
	})
	c := decode[chunkOut](t, []byte(frames[2].data))
	if c.Usage == nil || c.Usage.CompletionTokens != 2 {
		t.Errorf("continuous usage stats: %s", frames[2].data)
	}
}
