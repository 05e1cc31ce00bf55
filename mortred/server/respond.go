package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// writeJSON writes v with the contract's headers. taskID goes to
// X-Request-ID when not empty.
func writeJSON(w http.ResponseWriter, code int, taskID string, v any) {
	buf := outPool.Get().(*bytes.Buffer)
	defer putOut(buf)
	// Encode writes what json.Marshal would, then a newline.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		code = http.StatusInternalServerError
		buf.Reset()
		_ = json.NewEncoder(buf).Encode(envelope.New(envelope.StatusServerError, taskID, envelope.FieldError{Message: "encoding the answer failed: " + err.Error()}))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	if taskID != "" {
		h.Set("X-Request-ID", taskID)
	}
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// outPool holds answer buffers: an answer is encoded, written and dropped.
var outPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putOut(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		return // one huge answer must not pin its memory in the pool
	}
	b.Reset()
	outPool.Put(b)
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
