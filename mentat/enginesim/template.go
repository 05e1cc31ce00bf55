package enginesim

import (
	"bytes"
	"encoding/json"
	"strings"
)

// chatMessage is one entry of "messages". Content stays raw: it is a
// string, an array of parts, or null.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// chatTool is the only tool shape vLLM's chat endpoints accept:
// {"type":"function","function":{"name","description","parameters"}}.
type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name string `json:"name"`
	} `json:"function"`
}

// The fixed chat template, ChatML-style as Qwen's: tools go into the system
// part, each message is framed by role markers, and the generation prompt
// opens the assistant turn.
const (
	imStart      = "<|im_start|>"
	imEnd        = "<|im_end|>"
	toolsPreface = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	toolsCoda = "\n</tools>\n\nFor each function call, return a json object with function name and " +
		"arguments within <tool_call></tool_call> XML tags."
)

// renderChat renders messages and tools through the chat template. It
// checks what vLLM checks: tool shapes, content part types, and the
// generation-prompt / continue-final-message conflict.
func renderChat(msgs []chatMessage, tools []json.RawMessage, addGenerationPrompt, continueFinal bool) (string, error) {
	if len(msgs) == 0 {
		return "", badRequest("messages must contain at least one message")
	}
	if addGenerationPrompt && continueFinal {
		return "", badRequest("continue_final_message and add_generation_prompt cannot both be true; set add_generation_prompt to false")
	}
	var toolText strings.Builder
	for i, raw := range tools {
		var t chatTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return "", badRequest("tools.%d: %v", i, err)
		}
		if t.Function == nil {
			return "", badRequest("1 validation error: tools.%d.function: Field required; chat tools are shaped "+
				`{"type":"function","function":{"name","description","parameters"}}`, i)
		}
		if t.Type != "function" || t.Function.Name == "" {
			return "", badRequest(`tools.%d: type must be "function" and function.name must be set`, i)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return "", badRequest("tools.%d: %v", i, err)
		}
		toolText.WriteByte('\n')
		toolText.Write(c.Bytes())
	}

	var b strings.Builder
	rest := msgs
	if toolText.Len() > 0 {
		b.WriteString(imStart + "system\n")
		if m := msgs[0]; m.Role == "system" || m.Role == "developer" {
			text, err := contentText(m.Content, 0)
			if err != nil {
				return "", err
			}
			b.WriteString(text)
			b.WriteString("\n\n")
			rest = msgs[1:]
		}
		b.WriteString(toolsPreface)
		b.WriteString(toolText.String())
		b.WriteString(toolsCoda)
		b.WriteString(imEnd + "\n")
	}
	for i, m := range rest {
		idx := i + len(msgs) - len(rest)
		if m.Role == "" {
			return "", badRequest("messages.%d.role: Field required", idx)
		}
		text, err := contentText(m.Content, idx)
		if err != nil {
			return "", err
		}
		b.WriteString(imStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(text)
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			var calls []struct {
				Function json.RawMessage `json:"function"`
			}
			if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
				return "", badRequest("messages.%d.tool_calls: %v", idx, err)
			}
			for _, c := range calls {
				var cb bytes.Buffer
				if err := json.Compact(&cb, c.Function); err != nil {
					return "", badRequest("messages.%d.tool_calls: %v", idx, err)
				}
				b.WriteString("\n<tool_call>\n")
				b.Write(cb.Bytes())
				b.WriteString("\n</tool_call>")
			}
		}
		if continueFinal && idx == len(msgs)-1 {
			break
		}
		b.WriteString(imEnd + "\n")
	}
	if addGenerationPrompt {
		b.WriteString(imStart + "assistant\n")
	}
	return b.String(), nil
}

// contentText flattens a message's content: a string as is, text parts
// joined, media parts as their placeholder token.
func contentText(raw json.RawMessage, idx int) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("messages.%d.content: %v", idx, err)
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest("messages.%d.content must be a string or an array of content parts: %v", idx, err)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			b.WriteString(p.Text)
		case "image_url", "input_image", "image":
			b.WriteString("<|image_pad|>")
		case "video_url", "video":
			b.WriteString("<|video_pad|>")
		case "input_audio", "audio_url", "audio":
			b.WriteString("<|audio_pad|>")
		default:
			return "", badRequest("messages.%d.content.%d: unknown content part type %q", idx, j, p.Type)
		}
	}
	return b.String(), nil
}
