package enginesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// responsesRequest holds the fields of POST /v1/responses the engine acts
// on; other fields (temperature, top_p, text, reasoning, …) are accepted
// and echoed where the Response object has them.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Stream             bool              `json:"stream"`
	Tools              []json.RawMessage `json:"tools"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Background         bool              `json:"background"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Metadata           json.RawMessage   `json:"metadata"`
	Text               json.RawMessage   `json:"text"`
	User               *string           `json:"user"`
	CacheSalt          *string           `json:"cache_salt"`
	Seed               *int64            `json:"seed"`
}

// responseItem is one input item: a message ({"role","content"}, with or
// without "type":"message") or a function call's output.
type responseItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	CallID  string          `json:"call_id"`
	Output  string          `json:"output"`
}

// responseTool is the Responses API's flat function tool.
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// responseObject is the Response, field for field as vLLM's
// ResponsesResponse serializes it (plus OpenAI's error: null).
type responseObject struct {
	ID                 string           `json:"id"`
	Object             string           `json:"object"`
	CreatedAt          int64            `json:"created_at"`
	Status             string           `json:"status"`
	Background         bool             `json:"background"`
	Error              *string          `json:"error"`
	IncompleteDetails  *incomplete      `json:"incomplete_details"`
	Instructions       *string          `json:"instructions"`
	MaxOutputTokens    int              `json:"max_output_tokens"`
	MaxToolCalls       *int             `json:"max_tool_calls"`
	Metadata           json.RawMessage  `json:"metadata"`
	Model              string           `json:"model"`
	Output             []responseOutput `json:"output"`
	ParallelToolCalls  bool             `json:"parallel_tool_calls"`
	PreviousResponseID *string          `json:"previous_response_id"`
	Prompt             *string          `json:"prompt"`
	Reasoning          *string          `json:"reasoning"`
	ServiceTier        string           `json:"service_tier"`
	Temperature        float64          `json:"temperature"`
	Text               json.RawMessage  `json:"text"`
	ToolChoice         string           `json:"tool_choice"`
	Tools              []responseTool   `json:"tools"`
	TopLogprobs        *int             `json:"top_logprobs"`
	TopP               float64          `json:"top_p"`
	Truncation         string           `json:"truncation"`
	Usage              *responseUsage   `json:"usage"`
	User               *string          `json:"user"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

// responseOutput is an output message item.
type responseOutput struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func (e *Engine) handleResponses(w http.ResponseWriter, r *http.Request) {
	if err := e.serveResponses(w, r); err != nil {
		writeError(w, err)
	}
}

// responseMessages turns instructions and input into chat messages and
// the tools into chat tools, for the one chat template.
func responseMessages(req *responsesRequest) ([]chatMessage, []json.RawMessage, error) {
	var msgs []chatMessage
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: json.RawMessage(mustJSON(*req.Instructions))})
	}
	raw := bytes.TrimSpace(req.Input)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badRequest("1 validation error: input: Field required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		msgs = append(msgs, chatMessage{Role: "user", Content: json.RawMessage(mustJSON(s))})
	} else {
		var items []responseItem
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, nil, badRequest("input must be a string or a list of input items: %v", err)
		}
		for i, it := range items {
			switch {
			case it.Type == "function_call_output":
				msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: json.RawMessage(mustJSON(it.Output))})
			case (it.Type == "" || it.Type == "message") && it.Role != "":
				msgs = append(msgs, chatMessage{Role: it.Role, Content: it.Content})
			default:
				return nil, nil, badRequest("input.%d: item type %q is not supported by enginesim (send messages and function_call_output items)", i, it.Type)
			}
		}
	}
	tools := make([]json.RawMessage, 0, len(req.Tools))
	for i, raw := range req.Tools {
		var t responseTool
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Name == "" {
			return nil, nil, badRequest("tools.%d: enginesim serves function tools only ({\"type\":\"function\",\"name\":…})", i)
		}
		b, _ := json.Marshal(map[string]any{"type": "function", "function": t})
		tools = append(tools, b)
	}
	return msgs, tools, nil
}

func (e *Engine) serveResponses(w http.ResponseWriter, r *http.Request) error {
	var req responsesRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.resolveModel(req.Model)
	if err != nil {
		return err
	}
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		return &apiError{Code: http.StatusNotFound, Type: "NotFoundError",
			Message: fmt.Sprintf("Response with id '%s' not found. enginesim does not store responses.", *req.PreviousResponseID)}
	}
	if req.Background {
		return badRequest("background=true is not supported by enginesim; it does not store responses")
	}
	msgs, tools, err := responseMessages(&req)
	if err != nil {
		return err
	}
	prompt, err := renderChat(msgs, tools, true, false)
	if err != nil {
		return err
	}
	salt, err := cacheSalt(req.CacheSalt)
	if err != nil {
		return err
	}
	p := e.textPrompt(prompt, salt)
	maxTokens, err := e.checkContext(p.n, req.MaxOutputTokens, 0)
	if err != nil {
		return err
	}
	t, j, err := e.startJob("resp_", model, p, maxTokens, 0, false, req.Seed)
	if err != nil {
		return err
	}
	obj := e.newResponseObject(&req, j, maxTokens)
	if req.Stream {
		e.streamResponse(w, r, t, j, obj)
		return nil
	}
	text, finish, n, err := e.generateText(r.Context(), t, j)
	if err != nil {
		return nil // the client is gone
	}
	e.finishResponse(obj, j, text, finish, n)
	writeJSON(w, http.StatusOK, obj)
	return nil
}

func (e *Engine) newResponseObject(req *responsesRequest, j *job, maxTokens int) *responseObject {
	temp, topP := 1.0, 1.0
	if req.Temperature != nil {
		temp = *req.Temperature
	}
	if req.TopP != nil {
		topP = *req.TopP
	}
	tools := make([]responseTool, 0, len(req.Tools))
	for _, raw := range req.Tools {
		var t responseTool
		_ = json.Unmarshal(raw, &t)
		tools = append(tools, t)
	}
	meta := req.Metadata
	if len(meta) == 0 {
		meta = json.RawMessage("null")
	}
	text := req.Text
	if len(text) == 0 {
		text = json.RawMessage("null")
	}
	return &responseObject{
		ID: j.id, Object: "response", CreatedAt: j.created, Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: maxTokens, Metadata: meta, Model: j.model,
		Output: []responseOutput{}, ParallelToolCalls: true, ServiceTier: "auto", Temperature: temp,
		Text: text, ToolChoice: "auto", Tools: tools, TopP: topP, Truncation: "disabled", User: req.User,
	}
}

// messageID is the id of a response's one output message.
func messageID(j *job) string { return "msg_" + strings.TrimPrefix(j.id, "resp_") }

func (e *Engine) finishResponse(obj *responseObject, j *job, text, finish string, n int) {
	obj.Status = "completed"
	if finish == finishLength {
		obj.Status = "incomplete"
		obj.IncompleteDetails = &incomplete{Reason: "max_output_tokens"}
	}
	obj.Output = []responseOutput{{ID: messageID(j), Type: "message", Status: obj.Status, Role: "assistant",
		Content: []outputText{{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}}}
	u := &responseUsage{InputTokens: j.promptTokens, OutputTokens: n, TotalTokens: j.promptTokens + n}
	u.InputTokensDetails.CachedTokens = j.cachedTokens
	obj.Usage = u
}

// streamResponse plays j as the Responses API's event stream: each event
// is `event: <type>` and `data: <json>` with a growing sequence_number.
func (e *Engine) streamResponse(w http.ResponseWriter, r *http.Request, t *ticket, j *job, obj *responseObject) {
	sw, err := startSSE(w)
	if err != nil {
		e.sched.release(t)
		e.stats.finished(finishAbort)
		return
	}
	seq := 0
	send := func(typ string, fields map[string]any) error {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		b, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		sw.buf = append(sw.buf, "event: "...)
		sw.buf = append(sw.buf, typ...)
		sw.buf = append(sw.buf, "\ndata: "...)
		sw.buf = append(sw.buf, b...)
		sw.buf = append(sw.buf, "\n\n"...)
		return sw.send()
	}
	item := responseOutput{ID: messageID(j), Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}
	part := func(text string) outputText {
		return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
	}
	loc := func(m map[string]any) map[string]any {
		m["item_id"], m["output_index"], m["content_index"] = item.ID, 0, 0
		return m
	}
	if send("response.created", map[string]any{"response": obj}) != nil ||
		send("response.in_progress", map[string]any{"response": obj}) != nil ||
		send("response.output_item.added", map[string]any{"output_index": 0, "item": item}) != nil ||
		send("response.content_part.added", loc(map[string]any{"part": part("")})) != nil {
		e.sched.release(t)
		e.stats.finished(finishAbort)
		return
	}
	var text strings.Builder
	finish, n, err := e.generate(r.Context(), t, j, func(i, word int, _ string) error {
		piece := wordPiece(i, word)
		text.WriteString(piece)
		return send("response.output_text.delta", loc(map[string]any{"delta": piece, "logprobs": []any{}}))
	})
	if err != nil {
		return
	}
	e.finishResponse(obj, j, text.String(), finish, n)
	done := obj.Output[0]
	_ = send("response.output_text.done", loc(map[string]any{"text": text.String(), "logprobs": []any{}}))
	_ = send("response.content_part.done", loc(map[string]any{"part": done.Content[0]}))
	_ = send("response.output_item.done", map[string]any{"output_index": 0, "item": done})
	_ = send("response.completed", map[string]any{"response": obj})
}
