package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

const (
	statusNotFound         = envelope.StatusNotFound
	statusUnauthorized     = envelope.StatusUnauthorized
	statusMethodNotAllowed = envelope.StatusMethodNotAllowed
	statusTooLarge         = envelope.StatusTooLarge
	statusNotReady         = envelope.StatusNotReady
	statusUnsupported      = envelope.StatusUnsupportedMedia
	statusInvalid          = envelope.StatusInvalidRequest
	statusServerError      = envelope.StatusServerError
)

type errorItem struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// gatewayEnvelope is the process-level answer the gateway writes itself,
// in the same shape a model server uses for its own rejections.
type gatewayEnvelope struct {
	Status       envelope.Status `json:"status"`
	StatusStr    string          `json:"status_str"`
	TaskID       string          `json:"task_id"`
	Results      []any           `json:"results"`
	ServerTimeMS float64         `json:"server_time_ms"`
	Partial      bool            `json:"partial"`
	Errors       []errorItem     `json:"errors,omitempty"`
}

// writeEnvelope writes a rejection envelope; msg goes in errors[0].
func writeEnvelope(w http.ResponseWriter, httpCode int, st envelope.Status, msg, taskID string) {
	b := envelopeJSON(st, msg, taskID)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	if taskID != "" {
		h.Set("X-Request-ID", taskID)
	}
	w.WriteHeader(httpCode)
	_, _ = w.Write(append(b, '\n'))
}

// envelopeJSON is the rejection envelope; msg goes in errors[0].
func envelopeJSON(st envelope.Status, msg, taskID string) []byte {
	env := gatewayEnvelope{Status: st, StatusStr: envelope.Text(st), TaskID: taskID, Results: []any{}}
	if msg != "" {
		env.Errors = []errorItem{{Pointer: "", Message: msg}}
	}
	b, _ := json.Marshal(env)
	return b
}
