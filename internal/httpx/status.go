package httpx

import "net/http"

// StatusWriter notes the status of the answer a handler writes, for the
// metrics and usage counted after it: Code is 0 until the handler writes,
// then the status it sent (200 for a body without WriteHeader).
type StatusWriter struct {
	http.ResponseWriter
	Code int
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.Code == 0 {
		w.Code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Code == 0 {
		w.Code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes).
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
