package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// apiError is an error a client sees, in vLLM's shape:
//
//	{"object":"error","message":"...","type":"BadRequestError","param":null,"code":400}
//
// Handlers return it; errorResponse writes it.
type apiError struct {
	Code    int
	Type    string
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Message) }

func badRequest(format string, a ...any) *apiError {
	return &apiError{Code: http.StatusBadRequest, Type: "BadRequestError", Message: fmt.Sprintf(format, a...)}
}

func modelNotFound(name string) *apiError {
	return &apiError{Code: http.StatusNotFound, Type: "NotFoundError", Message: fmt.Sprintf("The model `%s` does not exist.", name)}
}

// errQueueFull is the answer beyond --max-waiting.
var errQueueFull = &apiError{
	Code: http.StatusServiceUnavailable, Type: "ServiceUnavailableError",
	Message: "The engine's waiting queue is full (--max-waiting); retry later or raise --max-waiting.",
}

// errInjected is the answer --fail-rate gives.
var errInjected = &apiError{
	Code: http.StatusInternalServerError, Type: "InternalServerError",
	Message: "EngineCore encountered an issue (injected by enginesim --fail-rate); retry the request.",
}

type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// writeError writes err as a vLLM error. Anything that is not an apiError
// is a 500 whose message still names what failed.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Code: http.StatusInternalServerError, Type: "InternalServerError", Message: err.Error()}
	}
	writeJSON(w, ae.Code, errorBody{Object: "error", Message: ae.Message, Type: ae.Type, Code: ae.Code})
}

// writeDetail writes FastAPI's own error shape, which vLLM sends for
// unknown paths and wrong methods.
func writeDetail(w http.ResponseWriter, code int, detail string) {
	writeJSON(w, code, map[string]string{"detail": detail})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"object":"error","message":"enginesim could not encode its response","type":"InternalServerError","param":null,"code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
