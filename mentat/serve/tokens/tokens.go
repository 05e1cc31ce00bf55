// Package tokens serves POST /v1/responses/input_tokens: how many prompt
// tokens a Responses input would cost. The serving engine counts the text:
// the input is sent to its group's /tokenize as a chat, so the chat
// template (with instructions and tools rendered) is included. Media are
// priced at flat rates.
package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/proxy"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
)

// MaxBodyBytes is the largest body accepted, as for proxied requests.
const MaxBodyBytes = 128 << 20

// maxEngineErrorBytes bounds how much of an engine's error answer is quoted.
const maxEngineErrorBytes = 2048

// handler counts tokens for models that src routes.
type handler struct {
	src      routes.Source
	timeout  time.Duration
	client   *http.Client
	upstream *upstream.Keys
}

// New returns the /v1/responses/input_tokens handler. timeout bounds the
// engine's /tokenize call (MCP_TIMEOUT_S); zero means no bound beyond the
// client's own. client nil means http.DefaultClient. up are the keys sent
// to each group's engine (nil: none).
//
// With keys on (a key in the request's context), the model must be in the
// key's scope (403) and the request counts as one of the key's requests
// (its rpm and concurrency; no tokens are charged for counting them).
func New(src routes.Source, timeout time.Duration, client *http.Client, up *upstream.Keys) http.Handler {
	if client == nil {
		client = http.DefaultClient
	}
	return &handler{src: src, timeout: timeout, client: client, upstream: up}
}

// apiError is an answer in OpenAI's error shape.
type apiError struct {
	status  int
	message string
	typ     string
	code    string
}

func (e *apiError) Error() string { return e.message }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var grant *keys.Grant
	status := http.StatusOK
	defer func() {
		if grant != nil {
			if r.Context().Err() != nil {
				status = proxy.StatusClientClosed
			}
			grant.Done(status)
		}
	}()
	n, err := h.count(w, r, &grant)
	if err != nil {
		var ae *apiError
		var pe *proxy.Error
		switch {
		case errors.As(err, &pe):
			status = pe.Status
			proxy.WriteError(w, pe)
			return
		case !errors.As(err, &ae):
			ae = &apiError{status: http.StatusInternalServerError, message: err.Error(), typ: "server_error", code: "internal_error"}
		}
		status = ae.status
		writeJSON(w, ae.status, map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "param": nil, "code": ae.code}})
		return
	}
	// A struct keeps OpenAI's field order: object first.
	writeJSON(w, http.StatusOK, struct {
		Object      string `json:"object"`
		InputTokens int    `json:"input_tokens"`
	}{"response.input_tokens", n})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func invalid(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), typ: "invalid_request_error", code: code}
}

func (h *handler) count(w http.ResponseWriter, r *http.Request, grant **keys.Grant) (int, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return 0, &apiError{status: http.StatusMethodNotAllowed, message: "POST a Responses body to /v1/responses/input_tokens", typ: "invalid_request_error", code: "method_not_allowed"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return 0, &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("request body is over %d MiB", MaxBodyBytes>>20), typ: "invalid_request_error", code: "request_too_large"}
		}
		return 0, invalid("bad_body", "could not read the request body: %v", err)
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, invalid("invalid_json", "request body is not valid JSON: %v", err)
	}
	if req.Model == "" {
		return 0, invalid("missing_model", "the body has no model; name the model whose tokens to count")
	}
	if !isNull(req.PreviousResponseID) || !isNull(req.Conversation) {
		return 0, invalid("unsupported_parameter", "the router keeps no stored responses or conversations; send the whole input instead of previous_response_id or conversation")
	}

	k := keys.FromContext(r.Context())
	if k != nil {
		// As the proxy: scope first, then the key's limits.
		if rej := k.Scope(req.Model); rej != nil {
			rej.SetHeaders(w.Header())
			return 0, proxy.RejectionError(rej, req.Model)
		}
		g, rej := k.Admit()
		if rej != nil {
			rej.SetHeaders(w.Header())
			return 0, proxy.RejectionError(rej, req.Model)
		}
		*grant = g
		g.SetHeaders(w.Header())
	}
	snap := h.src.Load()
	rt, _ := snap.Lookup(req.Model)
	if rt == nil {
		// The same refusal a POST to the model would get.
		e := proxy.RefusalFor(snap, req.Model, k)
		return 0, &apiError{status: e.Status, message: e.Message, typ: e.BodyType(), code: e.Code}
	}
	if rt.Provider != "vllm" {
		provider := "no provider"
		if rt.Provider != "" {
			provider = fmt.Sprintf("provider %q", rt.Provider)
		}
		return 0, invalid("unsupported_provider", "group %s announced %s; counting tokens needs MENTAT_MODEL_PROVIDER=vllm on its container", rt.Group, provider)
	}

	msgs, m, err := convert(&req)
	if err != nil {
		return 0, invalid("invalid_input", "%v", err)
	}
	tools, err := convertTools(req.Tools)
	if err != nil {
		return 0, invalid("invalid_tools", "%v", err)
	}
	if len(msgs) == 0 {
		// A template with nothing to render still costs its framing, but an
		// empty chat is refused by engines; nothing to count is zero.
		if len(tools) == 0 {
			return m.tokens(), nil
		}
	}
	n, err := h.tokenize(r.Context(), rt, req.Model, msgs, tools, h.upstream.Authorization(rt.Group))
	if err != nil {
		return 0, err
	}
	return n + m.tokens(), nil
}

type tokenizeRequest struct {
	Model    string            `json:"model"`
	Messages []message         `json:"messages"`
	Tools    []json.RawMessage `json:"tools,omitempty"`
}

// tokenize asks the engine for the chat's token count.
func (h *handler) tokenize(ctx context.Context, rt *routes.Route, model string, msgs []message, tools []json.RawMessage, auth []string) (int, error) {
	if msgs == nil {
		msgs = []message{}
	}
	body, err := json.Marshal(tokenizeRequest{Model: model, Messages: msgs, Tools: tools})
	if err != nil {
		return 0, err
	}
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	url := rt.Root.JoinPath("tokenize").String()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if auth != nil {
		// The group's upstream key; the client's never goes to an engine.
		req.Header["Authorization"] = auth
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, &apiError{status: http.StatusGatewayTimeout, message: fmt.Sprintf("group %s: POST %s did not answer within %s (MCP_TIMEOUT_S)", rt.Group, url, h.timeout), typ: "server_error", code: "upstream_timeout"}
		}
		return 0, &apiError{status: http.StatusBadGateway, message: fmt.Sprintf("group %s: POST %s: %v", rt.Group, url, err), typ: "server_error", code: "upstream_error"}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		quote, _ := io.ReadAll(io.LimitReader(resp.Body, maxEngineErrorBytes))
		msg := fmt.Sprintf("group %s: the engine's /tokenize answered %s: %s", rt.Group, resp.Status, engineMessage(quote))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			// The engine judged the input (an unknown tool shape, an
			// over-long prompt): the client's to fix.
			return 0, invalid("engine_rejected", "%s", msg)
		}
		return 0, &apiError{status: http.StatusBadGateway, message: msg, typ: "server_error", code: "upstream_error"}
	}
	n, err := readCount(resp.Body)
	if err != nil {
		return 0, &apiError{status: http.StatusBadGateway, message: fmt.Sprintf("group %s: the engine's /tokenize answer has no count: %v", rt.Group, err), typ: "server_error", code: "upstream_error"}
	}
	return n, nil
}

// engineMessage pulls the message out of an OpenAI-style error body, or
// quotes the body as it is.
func engineMessage(b []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
		if e.Message != "" {
			return e.Message
		}
		if len(e.Detail) > 0 {
			return string(e.Detail)
		}
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty body)"
	}
	return s
}

// readCount reads "count" from a /tokenize answer without holding the
// token list, which for a long prompt is far bigger than the count: vLLM
// writes count first, so reading stops there.
func readCount(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, fmt.Errorf("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, err
		}
		key, _ := t.(string)
		if key == "count" {
			var n int
			if err := dec.Decode(&n); err != nil {
				return 0, fmt.Errorf("count: %v", err)
			}
			if n < 0 {
				return 0, fmt.Errorf("count %d is negative", n)
			}
			return n, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no count field")
}
