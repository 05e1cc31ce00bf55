package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// apiError carries the status code and the client-facing text apart from
// whatever caused it.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// respond writes an answer or an error; the one place responses are
// written, so every error reaches the client as {"error": "..."} with the
// status its kind calls for.
func (d *Daemon) respond(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	code, msg := http.StatusInternalServerError, err.Error()
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		code = ae.code
	case errors.Is(err, ErrUnknownAgent):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, ErrFull):
		code = http.StatusServiceUnavailable
	}
	if code >= 500 {
		d.log.Warn("api_error", "path", r.URL.Path, "status", code, "error", msg)
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decode reads exactly one JSON object of at most MaxBodyBytes with no
// unknown fields into v, then validates it.
func decode(w http.ResponseWriter, r *http.Request, v interface{ Validate() error }) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &apiError{http.StatusUnsupportedMediaType, "send Content-Type: application/json"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxBodyBytes)}
		}
		return badRequest("reading body: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("body is not the expected JSON object: %v", err)
	}
	if dec.More() {
		return badRequest("body has data after the JSON object")
	}
	if err := v.Validate(); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.reg.snapshot(r.URL.Query().Get("group")))
	})
	mux.HandleFunc("GET /events", d.serveEvents)
	api := func(path string, h func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			v, err := h(w, r)
			d.respond(w, r, v, err)
		})
	}
	api(PathRegister, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req RegisterRequest
		if err := decode(w, r, &req); err != nil {
			return nil, err
		}
		resp, err := d.reg.register(req, d.heartbeatEvery())
		if err == nil {
			d.log.Info("agent_register", "agent", resp.AgentID, "group", req.Group, "pid", req.PID)
		}
		return resp, err
	})
	api(PathHeartbeat, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req AgentRef
		if err := decode(w, r, &req); err != nil {
			return nil, err
		}
		return d.reg.heartbeat(req.AgentID)
	})
	api(PathActor, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req ActorUpdate
		if err := decode(w, r, &req); err != nil {
			return nil, err
		}
		if err := d.reg.setActor(req); err != nil {
			return nil, err
		}
		return map[string]bool{"ok": true}, nil
	})
	api(PathNote, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req NoteUpdate
		if err := decode(w, r, &req); err != nil {
			return nil, err
		}
		if err := d.reg.setNote(req); err != nil {
			return nil, err
		}
		return map[string]bool{"ok": true}, nil
	})
	api(PathDeregister, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var req AgentRef
		if err := decode(w, r, &req); err != nil {
			return nil, err
		}
		if err := d.reg.deregister(req.AgentID); err != nil {
			return nil, err
		}
		d.log.Info("agent_deregister", "agent", req.AgentID)
		return map[string]bool{"ok": true}, nil
	})
	return mux
}

// heartbeatEvery is what agents are told: three heartbeats per timeout.
func (d *Daemon) heartbeatEvery() time.Duration { return d.cfg.AgentTimeout / 3 }
