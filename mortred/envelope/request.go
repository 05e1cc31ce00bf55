package envelope

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Request is the data-plane request envelope (POST {server_uri}, POST /jobs).
type Request struct {
	ReqID   string                     `json:"req_id,omitempty" doc:"client request id; echoed as task_id and X-Request-ID (generated when absent)"`
	Images  []string                   `json:"images" doc:"base64-encoded images, at least one; generative models ignore the pixels"`
	Params  map[string]json.RawMessage `json:"params,omitempty" doc:"model-specific knobs; unknown keys answer 422"`
	Options map[string]json.RawMessage `json:"options,omitempty" doc:"output options: encoding (png|jpeg|webp), include_image, max_results (0 = all), echo_params"`
}

// FieldError names a bad part of a request by JSON pointer (RFC 6901); the
// pointer "" is the whole request.
type FieldError struct {
	Pointer string `json:"pointer" doc:"RFC 6901 JSON pointer into the request; empty for the whole request"`
	Message string `json:"message" doc:"what is wrong and how to fix it"`
}

// MigrationHint is the message for the removed img_data field.
const MigrationHint = `field 'img_data' was removed; use images: ["<base64>"] (migration: img_data -> images[0])`

// Parsed is a request that passed the envelope checks, with its images
// decoded from base64 into Data. Request.Images stays empty: a copy of the
// base64 text would cost as much as the decoding and nobody reads it.
type Parsed struct {
	Request
	Data   [][]byte
	Output OutputOptions
	pooled []*[]byte // Data's buffers, given back by Release
}

// dataPool holds decoded-image buffers: an image is decoded, turned into the
// model's input by Prepare (which keeps no reference to the bytes) and
// dropped within its request, so a fresh multi-megabyte buffer per image
// would only feed the collector and the kernel's page faults.
var dataPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledData bounds the buffers kept: one huge image must not pin its
// memory in the pool.
const maxPooledData = 8 << 20

// buffer returns n bytes from the pool, owned by p until Release.
func (p *Parsed) buffer(n int) []byte {
	b := dataPool.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	p.pooled = append(p.pooled, b)
	return (*b)[:n]
}

// Release hands Data's buffers back for reuse and clears Data. Call it once
// nothing reads Data any more (the server: when every image is prepared);
// calling it again, or on nil, does nothing.
func (p *Parsed) Release() {
	if p == nil {
		return
	}
	for _, b := range p.pooled {
		if cap(*b) <= maxPooledData {
			dataPool.Put(b)
		}
	}
	p.pooled, p.Data = nil, nil
}

// OutputOptions are the decoded options object.
type OutputOptions struct {
	Encoding     string // png, jpeg or webp; "" when not given
	IncludeImage bool
	MaxResults   int // 0 = all
	EchoParams   bool
}

// RequestError is a request refused before admission; Status picks the HTTP
// code through the status table.
type RequestError struct {
	Status Status
	Errors []FieldError
}

func (e *RequestError) Error() string {
	var b strings.Builder
	b.WriteString(Text(e.Status))
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "; %s: %s", f.Pointer, f.Message)
	}
	return b.String()
}

// Limits bound a request; zero fields mean no limit.
type Limits struct {
	MaxItems int
	// Params, when set, checks the params object (the model's
	// ValidateParams); its findings are part of the 422 answer.
	Params func(map[string]json.RawMessage) []FieldError
}

var knownKeys = map[string]bool{"req_id": true, "images": true, "params": true, "options": true}

// Parse checks body against the strict envelope, in the contract's order:
// JSON decode (status 50), envelope shape (66, every problem listed by JSON
// pointer), empty image (3), too many items (67). It never returns a
// partially valid request, and keeps no reference to body.
//
// A well-formed request takes one pass over the body (parseFast); anything
// else, including every request that fails, goes through parseFull, which
// alone decides what an error says.
func Parse(body []byte, lim Limits) (*Parsed, *RequestError) {
	if p := parseFast(body, lim); p != nil {
		return p, nil
	}
	return parseFull(body, lim)
}

// parseFull is Parse through encoding/json: it finds and reports every
// problem.
func parseFull(body []byte, lim Limits) (*Parsed, *RequestError) {
	var top map[string]json.RawMessage
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return nil, &RequestError{Status: StatusJSONDecode, Errors: []FieldError{{
			Pointer: "", Message: fmt.Sprintf("request body is not valid JSON (%v); send one JSON object {\"images\": [\"<base64>\"]}", err),
		}}}
	}
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, invalid(FieldError{Pointer: "", Message: "request body must be a JSON object with images: [\"<base64>\"]"})
	}
	var errs []FieldError
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case k == "img_data":
			errs = append(errs, FieldError{Pointer: "/img_data", Message: MigrationHint})
		case !knownKeys[k]:
			errs = append(errs, FieldError{Pointer: Pointer(k), Message: fmt.Sprintf("unknown field %q; the envelope has req_id, images, params and options (model knobs go in params)", k)})
		}
	}

	p := &Parsed{}
	if raw, ok := top["req_id"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &p.ReqID); err != nil {
			errs = append(errs, FieldError{Pointer: "/req_id", Message: "req_id must be a string"})
		}
	}
	nerr := len(errs)
	p.Params, errs = objectField(top, "params", errs)
	if lim.Params != nil && len(errs) == nerr {
		errs = append(errs, lim.Params(p.Params)...)
	}
	var opts map[string]json.RawMessage
	opts, errs = objectField(top, "options", errs)
	p.Request.Options = opts
	p.Output, errs = decodeOptions(opts, errs)

	var empty []int
	raw, ok := top["images"]
	switch {
	case !ok || isNull(raw):
		errs = append(errs, FieldError{Pointer: "/images", Message: "images is required: an array of at least one base64 string"})
	default:
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			errs = append(errs, FieldError{Pointer: "/images", Message: "images must be an array of base64 strings"})
			break
		}
		if len(items) == 0 {
			errs = append(errs, FieldError{Pointer: "/images", Message: "images must hold at least one base64 string"})
			break
		}
		p.Data = make([][]byte, len(items))
		for i, it := range items {
			ptr := fmt.Sprintf("/images/%d", i)
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				errs = append(errs, FieldError{Pointer: ptr, Message: "each image must be a base64 string"})
				continue
			}
			if strings.TrimSpace(s) == "" {
				empty = append(empty, i)
				continue
			}
			b, err := decodeBase64(s)
			if err != nil {
				errs = append(errs, FieldError{Pointer: ptr, Message: "image is not valid base64 (" + err.Error() + "); send standard base64 without a data: prefix"})
				continue
			}
			if len(b) == 0 {
				empty = append(empty, i)
				continue
			}
			p.Data[i] = b
		}
	}
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}
	if len(empty) > 0 {
		fe := make([]FieldError, len(empty))
		for j, i := range empty {
			fe[j] = FieldError{Pointer: fmt.Sprintf("/images/%d", i), Message: "image is empty; send the base64 bytes of a PNG, JPEG or WebP image"}
		}
		return nil, &RequestError{Status: StatusEmptyImage, Errors: fe}
	}
	if lim.MaxItems > 0 && len(p.Data) > lim.MaxItems {
		return nil, &RequestError{Status: StatusTooManyItems, Errors: []FieldError{{
			Pointer: "/images", Message: fmt.Sprintf("%d images in one request; this server accepts at most %d (max_request_items): split the request", len(p.Data), lim.MaxItems),
		}}}
	}
	return p, nil
}

func invalid(errs ...FieldError) *RequestError {
	return &RequestError{Status: StatusInvalidRequest, Errors: errs}
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func objectField(top map[string]json.RawMessage, key string, errs []FieldError) (map[string]json.RawMessage, []FieldError) {
	raw, ok := top[key]
	if !ok || isNull(raw) {
		return nil, errs
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, append(errs, FieldError{Pointer: "/" + key, Message: key + " must be a JSON object"})
	}
	return m, errs
}

func decodeOptions(m map[string]json.RawMessage, errs []FieldError) (OutputOptions, []FieldError) {
	var o OutputOptions
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw, ptr := m[k], "/options"+Pointer(k)
		switch k {
		case "encoding":
			if err := json.Unmarshal(raw, &o.Encoding); err != nil || (o.Encoding != "png" && o.Encoding != "jpeg" && o.Encoding != "webp") {
				errs = append(errs, FieldError{Pointer: ptr, Message: "encoding must be one of png, jpeg, webp"})
			}
		case "include_image":
			if err := json.Unmarshal(raw, &o.IncludeImage); err != nil {
				errs = append(errs, FieldError{Pointer: ptr, Message: "include_image must be a boolean"})
			}
		case "echo_params":
			if err := json.Unmarshal(raw, &o.EchoParams); err != nil {
				errs = append(errs, FieldError{Pointer: ptr, Message: "echo_params must be a boolean"})
			}
		case "max_results":
			if err := json.Unmarshal(raw, &o.MaxResults); err != nil || o.MaxResults < 0 {
				errs = append(errs, FieldError{Pointer: ptr, Message: "max_results must be a non-negative integer (0 = all)"})
			}
		default:
			errs = append(errs, FieldError{Pointer: ptr, Message: fmt.Sprintf("unknown option %q; options are encoding, include_image, max_results, echo_params", k)})
		}
	}
	return o, errs
}

// decodeBase64 accepts standard base64 with or without padding, and line
// breaks as written by base64(1).
func decodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n\t ") {
		s = strings.Map(func(r rune) rune {
			switch r {
			case '\r', '\n', '\t', ' ':
				return -1
			}
			return r
		}, s)
	}
	if strings.HasSuffix(s, "=") {
		return base64.StdEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// Pointer returns the JSON pointer of a top-level key, escaping "~" and "/".
func Pointer(key string) string {
	return "/" + strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
