package envelope

import (
	"encoding/json"
	"math"
)

// Response is the UnifiedResponse every model-server answer uses (admitted
// requests and rejections alike). Clients read the HTTP status first, then
// Status, then each Results[i].Status.
type Response struct {
	Status    Status     `json:"status" doc:"top-level status; see the status table"`
	StatusStr string     `json:"status_str" doc:"text of status"`
	TaskID    string     `json:"task_id" doc:"req_id of the request, or a server-generated id; also in X-Request-ID"`
	Model     *ModelInfo `json:"model,omitempty" doc:"the model that answered (admitted requests)"`
	Results   []Item     `json:"results" doc:"one entry per image of an admitted request, in order; rejections may leave it empty"`
	// ServerTimeMS is the time from arrival to the answer, in milliseconds.
	ServerTimeMS float64      `json:"server_time_ms" doc:"milliseconds from arrival to the answer"`
	Partial      bool         `json:"partial" doc:"true when the deadline fired after at least one item finished (status 68)"`
	Errors       []FieldError `json:"errors,omitempty" doc:"what was wrong with the request, by JSON pointer; present only when non-empty"`
}

// ModelInfo names the model in a response.
type ModelInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Item is one image's outcome. Data is null when the item failed.
type Item struct {
	Status  Status          `json:"status" doc:"this item's status (0 = OK)"`
	Data    json.RawMessage `json:"data" doc:"task payload (components.schemas.Classification, DetectionList, TextDetectionList, TextRecognition, OCRLineList, ImageOutput); null when the item failed"`
	Message string          `json:"message,omitempty" doc:"why the item failed"`
}

// Null is the JSON null an item's Data holds when it failed.
var Null = json.RawMessage("null")

// New returns a rejection envelope for status with an empty results list.
func New(s Status, taskID string, errs ...FieldError) *Response {
	return &Response{Status: s, StatusStr: Text(s), TaskID: taskID, Results: []Item{}, Errors: errs}
}

// MS converts nanoseconds to milliseconds rounded to 0.001 ms.
func MS(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

// Job states of the async ledger.
const (
	JobPending = "pending"
	JobRunning = "running"
	JobDone    = "done"
	JobFailed  = "failed"
	JobTimeout = "timeout"
)

// JobStates lists the states in lifecycle order.
var JobStates = []string{JobPending, JobRunning, JobDone, JobFailed, JobTimeout}

// JobAccepted is the 202 answer of POST /jobs.
type JobAccepted struct {
	JobID     string `json:"job_id"`
	State     string `json:"state" doc:"always pending: the job is admitted, inference has not run yet"`
	PollURL   string `json:"poll_url" doc:"GET for the job's state"`
	ResultURL string `json:"result_url" doc:"GET for the standard envelope once done (409 until then)"`
}

// JobStatus is the answer of GET /jobs/{id} and /jobs/{id}/wait, and the body
// of a 409 from /jobs/{id}/result.
type JobStatus struct {
	JobID     string  `json:"job_id"`
	State     string  `json:"state" doc:"pending, running, done, failed or timeout"`
	ElapsedMS float64 `json:"elapsed_ms" doc:"milliseconds since submission, frozen when the job finished"`
	Error     string  `json:"error,omitempty" doc:"why the job failed or timed out"`
}
