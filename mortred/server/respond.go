package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// writeJSON writes v with the contract's headers. taskID goes to
// X-Request-ID when not empty.
func writeJSON(w http.ResponseWriter, code int, taskID string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(envelope.New(envelope.StatusServerError, taskID, envelope.FieldError{Message: "encoding the answer failed: " + err.Error()}))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	if taskID != "" {
		h.Set("X-Request-ID", taskID)
	}
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeEnvelope writes resp with the HTTP code of its status.
func writeEnvelope(w http.ResponseWriter, resp *envelope.Response) {
	writeJSON(w, envelope.HTTPCode(resp.Status), resp.TaskID, resp)
}

// reject writes a rejection envelope with one message for the whole request.
func reject(w http.ResponseWriter, st envelope.Status, taskID string, start time.Time, msg string) {
	resp := envelope.New(st, taskID, envelope.FieldError{Pointer: "", Message: msg})
	resp.ServerTimeMS = envelope.MS(time.Since(start).Nanoseconds())
	writeEnvelope(w, resp)
}

// newID returns a random id (task ids and job ids).
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// taskID is the request's req_id, else the X-Request-ID a proxy set, else a
// fresh id.
func taskID(reqID string, r *http.Request) string {
	if reqID != "" {
		return reqID
	}
	if id := r.Header.Get("X-Request-ID"); id != "" && len(id) <= 128 {
		return id
	}
	return newID("mortred-")
}
