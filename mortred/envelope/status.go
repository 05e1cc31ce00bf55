// Package envelope is mortred's JSON contract: the request envelope, the
// response envelope and the one table that maps each status to its HTTP code
// and text (docs/openapi.json is generated from the same table).
package envelope

import "net/http"

// Status is the top-level and per-item "status" field.
type Status int

// The statuses of the contract (mortred.txt). Anything not listed is a server
// error (HTTP 500).
const (
	StatusOK               Status = 0
	StatusEmptyImage       Status = 3
	StatusRunTimeout       Status = 4
	StatusOutputContract   Status = 6
	StatusJSONDecode       Status = 50
	StatusUnsupportedMedia Status = 60
	StatusTooLarge         Status = 61
	StatusMethodNotAllowed Status = 62
	StatusNotFound         Status = 63
	StatusNotReady         Status = 65
	StatusInvalidRequest   Status = 66
	StatusTooManyItems     Status = 67
	StatusPartial          Status = 68
	StatusServerError      Status = 500
	StatusUnauthorized     Status = 401
	// StatusForbidden is the gateway's refusal of a model outside the
	// presented API key's scope; model servers never answer it.
	StatusForbidden   Status = 403
	StatusRateLimited Status = 429
)

// Headers between the gateway and a model server (docs/mortred-server.md).
const (
	// HeaderItems is the model server's count of the input images of a
	// request it accepted, on inference answers and job submissions.
	HeaderItems = "X-Mortred-Items"
	// HeaderTenant is the API key id the gateway sends with a job's
	// submission and reads; a job is then served only to the same tenant.
	HeaderTenant = "X-Mortred-Tenant"
)

// StatusInfo is one row of the status table.
type StatusInfo struct {
	Status Status
	Text   string
	HTTP   int
}

// Table is the status table, in the order of the spec. Docs and tests range
// over it; code uses HTTPCode and Text.
var Table = []StatusInfo{
	{StatusOK, "OK", http.StatusOK},
	{StatusPartial, "deadline exceeded, partial results", http.StatusOK},
	{StatusJSONDecode, "JSON decode error", http.StatusBadRequest},
	{StatusEmptyImage, "empty input image", http.StatusBadRequest},
	{StatusInvalidRequest, "invalid request parameter", http.StatusUnprocessableEntity},
	{StatusUnsupportedMedia, "unsupported media type", http.StatusUnsupportedMediaType},
	{StatusTooLarge, "request entity too large", http.StatusRequestEntityTooLarge},
	{StatusTooManyItems, "too many items in one request", http.StatusRequestEntityTooLarge},
	{StatusMethodNotAllowed, "method not allowed", http.StatusMethodNotAllowed},
	{StatusNotFound, "not found", http.StatusNotFound},
	{StatusNotReady, "service not ready", http.StatusServiceUnavailable},
	{StatusRunTimeout, "model run timeout", http.StatusGatewayTimeout},
	{StatusOutputContract, "model output contract failed", http.StatusInternalServerError},
	{StatusUnauthorized, "unauthorized", http.StatusUnauthorized},
	{StatusForbidden, "forbidden", http.StatusForbidden},
	{StatusRateLimited, "rate limited or queue full", http.StatusTooManyRequests},
	{StatusServerError, "server error", http.StatusInternalServerError},
}

var byStatus = func() map[Status]StatusInfo {
	m := make(map[Status]StatusInfo, len(Table))
	for _, r := range Table {
		m[r.Status] = r
	}
	return m
}()

// HTTPCode maps a status to its HTTP code; unknown statuses are 500.
func HTTPCode(s Status) int {
	if r, ok := byStatus[s]; ok {
		return r.HTTP
	}
	return http.StatusInternalServerError
}

// Text is the status_str of a status; unknown statuses read "server error".
func Text(s Status) string {
	if r, ok := byStatus[s]; ok {
		return r.Text
	}
	return byStatus[StatusServerError].Text
}
