package enginesim

import (
	"encoding/json"
	"net/http"
)

// chatRequest holds the fields of /v1/chat/completions the engine acts on.
// Other sampling fields (temperature, top_p, stop, logprobs, …) are
// accepted and have no effect on the simulated text.
type chatRequest struct {
	Model                string            `json:"model"`
	Messages             []chatMessage     `json:"messages"`
	Tools                []json.RawMessage `json:"tools"`
	Stream               bool              `json:"stream"`
	StreamOptions        *streamOptions    `json:"stream_options"`
	MaxTokens            *int              `json:"max_tokens"`
	MaxCompletionTokens  *int              `json:"max_completion_tokens"`
	MinTokens            int               `json:"min_tokens"`
	IgnoreEOS            bool              `json:"ignore_eos"`
	N                    *int              `json:"n"`
	Seed                 *int64            `json:"seed"`
	AddGenerationPrompt  *bool             `json:"add_generation_prompt"`
	ContinueFinalMessage bool              `json:"continue_final_message"`
	CacheSalt            *string           `json:"cache_salt"`
}

type usageInfo struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details"`
}

// promptDetails is usage.prompt_tokens_details, sent (as by vLLM) only with
// --enable-prompt-tokens-details.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// usage is a finished job's usage. As vLLM reports num_cached_tokens,
// cached_tokens is the prefix found on the request's first admission.
func (e *Engine) usage(j *job, completion int) usageInfo {
	u := usageInfo{PromptTokens: j.promptTokens, CompletionTokens: completion, TotalTokens: j.promptTokens + completion}
	if e.cfg.EnablePromptTokensDetails {
		u.PromptTokensDetails = &promptDetails{CachedTokens: j.cachedTokens}
	}
	return u
}

// chatResponse is vLLM's non-streaming ChatCompletionResponse.
type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       *string      `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
	Usage             usageInfo    `json:"usage"`
	PromptLogprobs    *int         `json:"prompt_logprobs"`
	KVTransferParams  *int         `json:"kv_transfer_params"`
}

type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *int             `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
	StopReason   *string          `json:"stop_reason"`
}

type assistantMessage struct {
	Role             string   `json:"role"`
	Content          string   `json:"content"`
	Refusal          *string  `json:"refusal"`
	Annotations      *int     `json:"annotations"`
	Audio            *int     `json:"audio"`
	FunctionCall     *int     `json:"function_call"`
	ToolCalls        []string `json:"tool_calls"`
	ReasoningContent *string  `json:"reasoning_content"`
}

func (e *Engine) handleChat(w http.ResponseWriter, r *http.Request) {
	if err := e.serveChat(w, r); err != nil {
		writeError(w, err)
	}
}

// checkCommon validates what chat and completions share.
func checkCommon(n *int, stream bool, opts *streamOptions) error {
	if n != nil && *n != 1 {
		return badRequest("n=%d is not supported by enginesim; it generates one choice per request (n=1)", *n)
	}
	if opts != nil && !stream {
		return badRequest("Stream options can only be defined when `stream=True`.")
	}
	return nil
}

func (e *Engine) serveChat(w http.ResponseWriter, r *http.Request) error {
	var req chatRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.resolveModel(req.Model)
	if err != nil {
		return err
	}
	if req.Messages == nil {
		return badRequest("1 validation error: messages: Field required")
	}
	if err := checkCommon(req.N, req.Stream, req.StreamOptions); err != nil {
		return err
	}
	addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	prompt, err := renderChat(req.Messages, req.Tools, addGen, req.ContinueFinalMessage)
	if err != nil {
		return err
	}
	salt, err := cacheSalt(req.CacheSalt)
	if err != nil {
		return err
	}
	p := e.textPrompt(prompt, salt)
	requested := req.MaxCompletionTokens
	if requested == nil {
		requested = req.MaxTokens
	}
	maxTokens, err := e.checkContext(p.n, requested, 0)
	if err != nil {
		return err
	}
	t, j, err := e.startJob("chatcmpl-", model, p, maxTokens, req.MinTokens, req.IgnoreEOS, req.Seed)
	if err != nil {
		return err
	}
	if req.Stream {
		e.stream(w, r, t, j, true, req.StreamOptions)
		return nil
	}
	text, finish, n, err := e.generateText(r.Context(), t, j)
	if err != nil {
		return nil // the client is gone; nobody reads an answer
	}
	writeJSON(w, http.StatusOK, chatResponse{
		ID: j.id, Object: "chat.completion", Created: j.created, Model: model,
		Choices: []chatChoice{{
			Message:      assistantMessage{Role: "assistant", Content: text, ToolCalls: []string{}},
			FinishReason: finish,
		}},
		Usage: e.usage(j, n),
	})
	return nil
}
