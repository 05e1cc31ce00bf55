package enginesim

import (
	"encoding/json"
	"net/http"
)

// tokenizeRequest is either of vLLM's two /tokenize forms: prompt
// (TokenizeCompletionRequest) or messages (TokenizeChatRequest).
type tokenizeRequest struct {
	Model                string            `json:"model"`
	Prompt               *string           `json:"prompt"`
	Messages             []chatMessage     `json:"messages"`
	Tools                []json.RawMessage `json:"tools"`
	AddGenerationPrompt  *bool             `json:"add_generation_prompt"`
	ContinueFinalMessage bool              `json:"continue_final_message"`
	AddSpecialTokens     *bool             `json:"add_special_tokens"`
	ReturnTokenStrs      bool              `json:"return_token_strs"`
}

type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []int     `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

func (e *Engine) handleTokenize(w http.ResponseWriter, r *http.Request) {
	res, err := e.tokenize(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (e *Engine) tokenize(w http.ResponseWriter, r *http.Request) (*tokenizeResponse, error) {
	var req tokenizeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if _, err := e.resolveModel(req.Model); err != nil {
		return nil, err
	}
	var text string
	switch {
	case req.Messages != nil:
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		s, err := renderChat(req.Messages, req.Tools, addGen, req.ContinueFinalMessage)
		if err != nil {
			return nil, err
		}
		text = s
	case req.Prompt != nil:
		text = *req.Prompt
	default:
		return nil, badRequest("send either prompt (completion form) or messages (chat form)")
	}
	ids := Tokenize(make([]int, 0, len(text)/3+1), text)
	res := &tokenizeResponse{Count: len(ids), MaxModelLen: e.cfg.MaxModelLen, Tokens: ids}
	if req.ReturnTokenStrs {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i], _ = Piece(id)
		}
		res.TokenStrs = &strs
	}
	return res, nil
}

type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

func (e *Engine) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if _, err := e.resolveModel(req.Model); err != nil {
		writeError(w, err)
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("1 validation error: tokens: Field required"))
		return
	}
	text, err := Detokenize(req.Tokens)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text})
}
