package enginesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

type responseOut struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

func TestResponsesNonStream(t *testing.T) {
	te := startEngine(t, false, nil)
	req := map[string]any{"model": "sim", "instructions": "Be brief.", "input": "Tell me about the queue.", "max_output_tokens": 4}
	code, body := te.post(t, "/v1/responses", req)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	r := decode[responseOut](t, body)
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != "incomplete" || r.IncompleteDetails == nil ||
		r.IncompleteDetails.Reason != "max_output_tokens" || len(r.Output) != 1 || r.Output[0].Type != "message" ||
		r.Output[0].Role != "assistant" || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "output_text" {
		t.Fatalf("shape: %s", body)
	}
	// The prompt is the chat template's rendering of instructions + input.
	_, tb := te.post(t, "/tokenize", map[string]any{"messages": []map[string]any{{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Tell me about the queue."}}})
	if n := decode[tokenizeResponse](t, tb).Count; r.Usage == nil || r.Usage.InputTokens != n || r.Usage.OutputTokens != 4 ||
		r.Usage.TotalTokens != n+4 || len(strings.Fields(r.Output[0].Content[0].Text)) != 4 {
		t.Errorf("usage %+v text %q, want %d input tokens", r.Usage, r.Output[0].Content[0].Text, n)
	}
	// Item-list input and function tools render too.
	code, body = te.post(t, "/v1/responses", map[string]any{"input": []map[string]any{
		{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "hi"}}}},
		"tools": []map[string]any{{"type": "function", "name": "f", "parameters": map[string]any{"type": "object"}}}})
	if code != 200 || decode[responseOut](t, body).Status == "" {
		t.Errorf("item input: %d %s", code, body)
	}
	for _, c := range []struct {
		body map[string]any
		code int
	}{
		{map[string]any{"model": "x", "input": "hi"}, 404},
		{map[string]any{}, 400},
		{map[string]any{"input": "hi", "previous_response_id": "resp_1"}, 404},
		{map[string]any{"input": "hi", "tools": []map[string]any{{"type": "web_search"}}}, 400},
		{map[string]any{"input": []map[string]any{{"type": "reasoning"}}}, 400},
		{map[string]any{"input": "hi", "max_output_tokens": 5000}, 400},
	} {
		code, body := te.post(t, "/v1/responses", c.body)
		if e := decode[errorBody](t, body); code != c.code || e.Code != c.code {
			t.Errorf("%v: %d %s", c.body, code, body)
		}
	}
}

func TestResponsesStream(t *testing.T) {
	te := startEngine(t, false, nil)
	b, _ := json.Marshal(map[string]any{"model": "sim", "input": "hi", "max_output_tokens": 3, "stream": true})
	res, err := te.client.Post(te.url+"/v1/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s %s", res.Status, res.Header.Get("Content-Type"))
	}
	var types []string
	var deltas strings.Builder
	var last map[string]any
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			if ev["type"] != event || ev["sequence_number"] != float64(len(types)) {
				t.Errorf("event %q with data type %v, sequence_number %v (want %d)", event, ev["type"], ev["sequence_number"], len(types))
			}
			types = append(types, event)
			if event == "response.output_text.delta" {
				deltas.WriteString(ev["delta"].(string))
			}
			last = ev
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant   %v", types, want)
	}
	resp := last["response"].(map[string]any)
	text := resp["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if text != deltas.String() || resp["status"] != "incomplete" || resp["usage"].(map[string]any)["output_tokens"] != float64(3) {
		t.Errorf("completed response %v; deltas %q", resp, deltas.String())
	}
}

func FuzzResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"sim","input":"hi","max_output_tokens":2}`,
		`{"instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"y"}]}],"max_output_tokens":1}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}],"max_output_tokens":1}`,
		`{"input":[{"type":"reasoning"}]}`, `{"input":[]}`, `{"input":7}`, `[]`, `{"input":"x","stream":true,"max_output_tokens":1}`,
	} {
		f.Add([]byte(s))
	}
	te := startEngine(f, false, func(c *Config) { c.TTFT, c.ITL = 0, 0; c.MaxModelLen = 512 })
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := te.do(t, "POST", "/v1/responses", body)
		if code != 200 && code != 400 && code != 404 {
			t.Fatalf("status %d: %s", code, out)
		}
	})
}
