package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// OpenAI's error types and code for a refused rate limit: the official
// clients read the status (429) and the retry headers, people the type.
const (
	typeRequests      = "requests"
	typeTokens        = "tokens"
	codeRateLimit     = "rate_limit_exceeded"
	codeInvalidKey    = "invalid_api_key"
	codeModelNotAllow = "model_not_allowed"
)

// RejectionError is the answer for a request the key store refused: 401
// invalid_api_key, 403 model_not_allowed (model is the one asked for), or
// 429 rate_limit_exceeded with type requests or tokens.
func RejectionError(rej *keys.Rejection, model string) *Error {
	msg := rej.Message
	switch rej.Status {
	case http.StatusUnauthorized:
		if msg == "" {
			msg = "this router needs an API key: send Authorization: Bearer <key> with a key from its key file (SERVE_KEYS_FILE)"
		}
		return &Error{Status: rej.Status, Type: typeInvalid, Code: codeInvalidKey, Message: msg}
	case http.StatusForbidden:
		id := "(none)"
		scope := "all models"
		if rej.Key != nil {
			id = rej.Key.ID
			if len(rej.Key.Models) > 0 {
				scope = strings.Join(rej.Key.Models, ", ")
			}
		}
		return &Error{Status: rej.Status, Type: typeInvalid, Code: codeModelNotAllow, Param: "model",
			Message: fmt.Sprintf("key %s may not use model %q; its models are %s: use one of them, or ask for a key whose scope covers this model", id, model, scope)}
	case http.StatusTooManyRequests:
		typ := typeRequests
		if rej.Reason == keys.TPMLimit || rej.Reason == keys.IPMLimit {
			typ = typeTokens
		}
		if msg == "" {
			msg = "rate limit reached; retry after the time Retry-After gives"
		}
		return &Error{Status: rej.Status, Type: typ, Code: codeRateLimit, Message: msg}
	}
	return &Error{Status: rej.Status, Type: typeInvalid, Code: string(rej.Reason), Message: msg}
}

// WriteRejection answers a refused request: the rejection's headers
// (WWW-Authenticate, Retry-After, retry-after-ms, x-ratelimit-*) and its
// OpenAI-style body. model is the model asked for ("" when unknown).
func WriteRejection(w http.ResponseWriter, rej *keys.Rejection, model string) {
	rej.SetHeaders(w.Header())
	WriteError(w, RejectionError(rej, model))
}

// admit applies the request's key to model, before anything is routed or
// sent: the key's scope (403, asked first, so that a key cannot learn
// which models outside its scope exist), then its limits (429). An
// admitted request's rate-limit headers are set on w now, so that every
// answer carries them, and its grant is ended by record.
func (p *Proxy) admit(w http.ResponseWriter, x *exchange, k *keys.Key, model string) error {
	if rej := k.Scope(model); rej != nil {
		rej.SetHeaders(w.Header())
		return RejectionError(rej, model)
	}
	g, rej := k.Admit()
	if rej != nil {
		rej.SetHeaders(w.Header())
		return RejectionError(rej, model)
	}
	x.grant = g
	g.SetHeaders(w.Header())
	return nil
}

// RefusalFor is Refusal as key k may see it: a model outside its scope is
// a 404 as if it did not exist, the models listed are those in its scope,
// and the groups whose models are not known yet are not named unless its
// scope is every model. A nil k sees everything.
func RefusalFor(snap *routes.Snapshot, model string, k *keys.Key) *Error {
	if k == nil || len(k.Models) == 0 {
		return Refusal(snap, model)
	}
	if _, g := snap.Lookup(model); g != nil && k.Allows(model) {
		return Refusal(snap, model)
	}
	var avail []string
	for _, m := range snap.Available() {
		if k.Allows(m) {
			avail = append(avail, m)
		}
	}
	list := "none"
	if len(avail) > 0 {
		list = strings.Join(avail, ", ")
	}
	return &Error{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("model %q is not served by this cluster; available models for key %s: %s", model, k.ID, list)}
}
