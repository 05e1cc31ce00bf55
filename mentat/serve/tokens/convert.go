package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Flat media rates. The true cost depends on tiling and the model's patch
// size, which the router cannot know without fetching the media and
// running the engine's preprocessor.
const (
	ImageTokens = 4000
	VideoTokens = 40000
)

// request is the part of a Responses input_tokens body the count needs.
type request struct {
	Model              string          `json:"model"`
	Instructions       *string         `json:"instructions"`
	Input              json.RawMessage `json:"input"`
	Tools              json.RawMessage `json:"tools"`
	PreviousResponseID json.RawMessage `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
}

// message is one chat message sent to the engine's /tokenize.
type message struct {
	Role string `json:"role"`
	// Content is a string, or a list of text parts when the client sent a
	// part list (so the engine joins them as it would for a chat).
	Content    any        `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// media counts the attachments priced at flat rates.
type media struct{ images, videos int }

func (m media) tokens() int { return m.images*ImageTokens + m.videos*VideoTokens }

// inputError is a client mistake in the body; its text goes back in a 400.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{fmt.Sprintf(format, args...)}
}

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// convert turns a Responses request into chat messages for /tokenize and
// the media it held. instructions become a leading system message.
func convert(req *request) ([]message, media, error) {
	var msgs []message
	var m media
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append(msgs, message{Role: "system", Content: *req.Instructions})
	}
	if isNull(req.Input) {
		return msgs, m, nil
	}
	var s string
	if err := json.Unmarshal(req.Input, &s); err == nil {
		return append(msgs, message{Role: "user", Content: s}), m, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(req.Input, &items); err != nil {
		return nil, m, badInput("input must be a string or a list of input items")
	}
	for i, raw := range items {
		msg, ok, err := convertItem(raw, &m)
		if err != nil {
			return nil, m, badInput("input[%d]: %v", i, err)
		}
		if ok {
			msgs = append(msgs, msg)
		}
	}
	return msgs, m, nil
}

type item struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// convertItem converts one input item; ok is false for items that render
// to nothing (reasoning, which chat templates drop from history).
func convertItem(raw json.RawMessage, m *media) (msg message, ok bool, err error) {
	var it item
	if err := json.Unmarshal(raw, &it); err != nil {
		return msg, false, fmt.Errorf("not an input item object")
	}
	switch it.Type {
	case "", "message":
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			// Chat templates know system, not developer; OpenAI treats
			// them alike.
			role = "system"
		case "":
			return msg, false, fmt.Errorf("message has no role")
		default:
			return msg, false, fmt.Errorf("unknown role %q (use user, assistant, system or developer)", it.Role)
		}
		content, err := convertContent(it.Content, m)
		if err != nil {
			return msg, false, err
		}
		return message{Role: role, Content: content}, true, nil
	case "function_call":
		if it.Name == "" {
			return msg, false, fmt.Errorf("function_call has no name")
		}
		return message{Role: "assistant", Content: "", ToolCalls: []toolCall{{
			ID: it.CallID, Type: "function",
			Function: functionCall{Name: it.Name, Arguments: it.Arguments},
		}}}, true, nil
	case "function_call_output":
		content, err := convertContent(it.Output, m)
		if err != nil {
			return msg, false, fmt.Errorf("function_call_output: %v", err)
		}
		return message{Role: "tool", ToolCallID: it.CallID, Content: content}, true, nil
	case "reasoning":
		return msg, false, nil
	default:
		return msg, false, fmt.Errorf("item type %q cannot be counted by the router (use message, function_call or function_call_output items)", it.Type)
	}
}

type part struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// convertContent keeps the text of a string or part-list content and
// counts its media; other attachments (files, audio) contribute nothing
// beyond the text beside them.
func convertContent(raw json.RawMessage, m *media) (any, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("content must be a string or a list of parts")
	}
	out := []textPart{}
	for j, pr := range parts {
		var p part
		if err := json.Unmarshal(pr, &p); err != nil {
			return nil, fmt.Errorf("content[%d] is not a part object", j)
		}
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, textPart{Type: "text", Text: p.Text})
		case "refusal":
			out = append(out, textPart{Type: "text", Text: p.Refusal})
		case "input_image", "image_url", "image":
			m.images++
		case "input_video", "video_url", "video":
			m.videos++
		case "":
			return nil, fmt.Errorf("content[%d] has no type", j)
		default:
			// input_file, input_audio, file and the like: only the text
			// that accompanies them counts.
		}
	}
	return out, nil
}

// convertTools passes tools through, reshaping Responses-style function
// tools ({type, name, description, parameters}) into the chat shape
// ({type, function:{...}}) that the engine's chat /tokenize accepts.
func convertTools(raw json.RawMessage) ([]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badInput("tools must be a list")
	}
	out := make([]json.RawMessage, 0, len(tools))
	for i, t := range tools {
		var flat struct {
			Type        string          `json:"type"`
			Name        *string         `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Function    json.RawMessage `json:"function"`
		}
		if err := json.Unmarshal(t, &flat); err != nil {
			return nil, badInput("tools[%d] is not a tool object", i)
		}
		if flat.Type != "function" || !isNull(flat.Function) || flat.Name == nil {
			out = append(out, t)
			continue
		}
		fn := map[string]any{"name": *flat.Name}
		if flat.Description != nil {
			fn["description"] = *flat.Description
		}
		if !isNull(flat.Parameters) {
			fn["parameters"] = flat.Parameters
		}
		b, err := json.Marshal(map[string]any{"type": "function", "function": fn})
		if err != nil {
			return nil, badInput("tools[%d]: %v", i, err)
		}
		out = append(out, b)
	}
	return out, nil
}
