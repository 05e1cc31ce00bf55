package enginesim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// completionRequest holds the fields of /v1/completions the engine acts
// on; other sampling fields are accepted and have no effect.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	MinTokens     int             `json:"min_tokens"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	N             *int            `json:"n"`
	Seed          *int64          `json:"seed"`
	Echo          bool            `json:"echo"`
	CacheSalt     *string         `json:"cache_salt"`
}

// completionDefaultMaxTokens is vLLM's (and OpenAI's) max_tokens default
// for the legacy completions API.
const completionDefaultMaxTokens = 16

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       *string            `json:"service_tier"`
	SystemFingerprint *string            `json:"system_fingerprint"`
	Usage             usageInfo          `json:"usage"`
	KVTransferParams  *int               `json:"kv_transfer_params"`
}

type completionChoice struct {
	Index          int     `json:"index"`
	Text           string  `json:"text"`
	Logprobs       *int    `json:"logprobs"`
	FinishReason   string  `json:"finish_reason"`
	StopReason     *string `json:"stop_reason"`
	PromptLogprobs *int    `json:"prompt_logprobs"`
}

// parsePrompt reads a completions prompt: a string, token ids, or a batch
// of one of either. It returns the text that seeds generation, the ids
// when the prompt was given as ids, and the prompt's token count.
func parsePrompt(raw json.RawMessage) (string, []int, int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, 0, badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", nil, 0, badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
		}
		return s, nil, CountTokens(s), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return checkIDs(raw, ids)
	}
	var batchS []string
	if json.Unmarshal(raw, &batchS) == nil {
		if len(batchS) != 1 {
			return "", nil, 0, badRequest("enginesim serves one prompt per request; this batch has %d (send them as separate requests)", len(batchS))
		}
		return parsePrompt(json.RawMessage(strings.TrimSpace(mustJSON(batchS[0]))))
	}
	var batchIDs [][]int
	if json.Unmarshal(raw, &batchIDs) == nil {
		if len(batchIDs) != 1 {
			return "", nil, 0, badRequest("enginesim serves one prompt per request; this batch has %d (send them as separate requests)", len(batchIDs))
		}
		return checkIDs(raw, batchIDs[0])
	}
	return "", nil, 0, badRequest("prompt must be a string, a list of token ids, or a list of one of either")
}

func checkIDs(raw json.RawMessage, ids []int) (string, []int, int, error) {
	if len(ids) == 0 {
		return "", nil, 0, badRequest("Either prompt or prompt_embeds must be provided and non-empty.")
	}
	for _, id := range ids {
		if _, err := Piece(id); err != nil {
			return "", nil, 0, badRequest("%v", err)
		}
	}
	return string(raw), ids, len(ids), nil
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (e *Engine) handleCompletions(w http.ResponseWriter, r *http.Request) {
	if err := e.serveCompletions(w, r); err != nil {
		writeError(w, err)
	}
}

func (e *Engine) serveCompletions(w http.ResponseWriter, r *http.Request) error {
	var req completionRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.resolveModel(req.Model)
	if err != nil {
		return err
	}
	if err := checkCommon(req.N, req.Stream, req.StreamOptions); err != nil {
		return err
	}
	if req.Echo {
		return badRequest("echo=true is not supported by enginesim; send the request without echo")
	}
	seed, ids, n, err := parsePrompt(req.Prompt)
	if err != nil {
		return err
	}
	salt, err := cacheSalt(req.CacheSalt)
	if err != nil {
		return err
	}
	p := promptSpec{seed: seed, ids: ids, n: n, salt: salt}
	if ids == nil {
		p = e.textPrompt(seed, salt)
	}
	maxTokens, err := e.checkContext(p.n, req.MaxTokens, completionDefaultMaxTokens)
	if err != nil {
		return err
	}
	t, j, err := e.startJob("cmpl-", model, p, maxTokens, req.MinTokens, req.IgnoreEOS, req.Seed)
	if err != nil {
		return err
	}
	if req.Stream {
		e.stream(w, r, t, j, false, req.StreamOptions)
		return nil
	}
	text, finish, n, err := e.generateText(r.Context(), t, j)
	if err != nil {
		return nil // the client is gone; nobody reads an answer
	}
	writeJSON(w, http.StatusOK, completionResponse{
		ID: j.id, Object: "text_completion", Created: j.created, Model: model,
		Choices: []completionChoice{{Text: text, FinishReason: finish}},
		Usage:   e.usage(j, n),
	})
	return nil
}
