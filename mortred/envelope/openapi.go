package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Probe is the body of /healthz and /ready.
type Probe struct {
	OK    bool   `json:"ok" doc:"the process is alive"`
	Ready bool   `json:"ready" doc:"the model is loaded and warm; inference is admitted"`
	Model string `json:"model,omitempty" doc:"the model's name once loaded"`
}

// InferPathTemplate is how the document spells the inference path: each
// process serves its own server_uri, conventionally of this form.
const InferPathTemplate = "/mortred_ai_server_v1/{task}/{model}"

type obj = map[string]any

// OpenAPI builds docs/openapi.json from the envelope types and the status
// table. The output is deterministic (sorted keys, fixed indentation).
func OpenAPI() ([]byte, error) {
	g := &gen{schemas: obj{}}
	g.schemas["Status"] = statusSchema()
	req := g.ref(reflect.TypeFor[Request]())
	g.strict("Request")
	g.schemas["Request"].(obj)["properties"].(obj)["images"].(obj)["minItems"] = 1
	env := g.ref(reflect.TypeFor[Response]())
	accepted := g.ref(reflect.TypeFor[JobAccepted]())
	jobStatus := g.ref(reflect.TypeFor[JobStatus]())
	probe := g.ref(reflect.TypeFor[Probe]())
	for _, p := range payloads {
		s := g.ref(p.Type)
		if p.Array {
			g.schemas[p.Name+"List"] = obj{"type": "array", "items": s}
		}
	}
	for _, p := range paramsSchemas {
		g.ref(p.Type)
		g.strict(p.Name)
	}

	jsonBody := func(schema obj) obj { return obj{"application/json": obj{"schema": schema}} }
	headers := obj{
		"X-Request-ID":  obj{"description": "the task_id", "schema": obj{"type": "string"}},
		"Cache-Control": obj{"description": "always no-store", "schema": obj{"type": "string"}},
	}
	envResp := func(desc string, extra ...string) obj {
		h := obj{}
		for k, v := range headers {
			h[k] = v
		}
		for _, name := range extra {
			h[name] = extraHeaders[name]
		}
		return obj{"description": desc, "headers": h, "content": jsonBody(env)}
	}
	// One response per HTTP code, described by the table rows that map to it.
	byCode := func(codes ...int) obj {
		out := obj{}
		for _, c := range codes {
			var extra []string
			if c == http.StatusTooManyRequests {
				extra = append(extra, "Retry-After")
			}
			if c == http.StatusUnauthorized {
				extra = append(extra, "WWW-Authenticate")
			}
			if c == http.StatusMethodNotAllowed {
				extra = append(extra, "Allow")
			}
			out[strconv.Itoa(c)] = envResp(codeDescription(c), extra...)
		}
		return out
	}
	inferCodes := []int{200, 400, 401, 404, 405, 413, 415, 422, 429, 500, 503, 504}
	inferResponses := byCode(inferCodes...)
	// An admitted request's answers (200, and 504 when none finished)
	// count its images for the gateway's per-key images per minute.
	for _, c := range []string{"200", "504"} {
		inferResponses[c].(obj)["headers"].(obj)[HeaderItems] = extraHeaders[HeaderItems]
	}
	infer := obj{
		"summary":     "Run the model on every image of the envelope",
		"description": "The path is the process's server_uri; any unknown path (including /welcome and /hello_world) answers the 404 envelope. Admission order: Bearer auth (401), per-IP rate limit (429), POST only (405), not ready (503), application/json (415), Content-Length over request_size_limit (413), JSON decode (400, status 50), strict envelope (422, status 66), empty image (400, status 3), too many items (413, status 67), queue full (429 + Retry-After). Admitted requests always answer results[] of length N = len(images).",
		"operationId": "infer",
		"security":    []any{obj{"bearer": []any{}}},
		"requestBody": obj{"required": true, "content": jsonBody(req)},
		"responses":   inferResponses,
	}
	tenantParam := obj{
		"name": HeaderTenant, "in": "header", "required": false,
		"description": "set by the gateway only (the API key's id; a client's own is removed): a job submitted with a tenant is served only to reads with the same tenant (others answer 404); a read without the header sees every job",
		"schema":      obj{"type": "string"},
	}
	submit := obj{
		"summary":     "Submit the same envelope as an async job",
		"description": "202 at admission, before inference runs. 404 when async_enabled is off; 429 when async_max_queue jobs are unfinished.",
		"operationId": "submitJob",
		"security":    []any{obj{"bearer": []any{}}},
		"parameters":  []any{tenantParam},
		"requestBody": obj{"required": true, "content": jsonBody(req)},
		"responses": merge(byCode(400, 401, 404, 405, 413, 415, 422, 429, 500, 503), obj{
			"202": obj{
				"description": "accepted; poll poll_url or wait, then GET result_url",
				"headers":     obj{"Location": obj{"description": "the job's poll_url", "schema": obj{"type": "string"}}, HeaderItems: extraHeaders[HeaderItems]},
				"content":     jsonBody(accepted),
			},
		}),
	}
	jobParam := obj{"name": "job_id", "in": "path", "required": true, "schema": obj{"type": "string"}}
	getJob := obj{
		"summary": "State of a job", "operationId": "getJob",
		"security":   []any{obj{"bearer": []any{}}},
		"parameters": []any{jobParam, tenantParam},
		"responses":  merge(byCode(401, 404, 405, 429), obj{"200": obj{"description": "the job's state", "content": jsonBody(jobStatus)}}),
	}
	waitJob := obj{
		"summary": "Wait until the job is terminal or the wait budget expires", "operationId": "waitJob",
		"security": []any{obj{"bearer": []any{}}},
		"parameters": []any{jobParam, tenantParam, obj{
			"name": "timeout", "in": "query", "required": false,
			"description": "milliseconds; default 30000, values above 300000 are capped",
			"schema":      obj{"type": "integer", "minimum": 0},
		}},
		"responses": merge(byCode(401, 404, 405, 422, 429), obj{"200": obj{"description": "terminal state, or the state when the wait budget expired", "content": jsonBody(jobStatus)}}),
	}
	jobResult := obj{
		"summary": "The job's standard envelope (repeatable)", "operationId": "jobResult",
		"security":   []any{obj{"bearer": []any{}}},
		"parameters": []any{jobParam, tenantParam},
		"responses": merge(byCode(401, 404, 405, 429), obj{
			"200": envResp("the standard envelope of the finished job"),
			"409": obj{"description": "the job is not done (pending, running, failed or timeout)", "content": jsonBody(jobStatus)},
		}),
	}
	probeOp := func(id, summary string, codes ...int) obj {
		r := obj{}
		for _, c := range codes {
			r[strconv.Itoa(c)] = obj{"description": http.StatusText(c), "content": jsonBody(probe)}
		}
		return obj{"get": obj{"summary": summary, "operationId": id, "responses": r}}
	}
	paths := obj{
		"/healthz": probeOp("healthz", "Liveness probe (public, never rate-limited)", 200),
		"/ready":   probeOp("ready", "Readiness probe: 200 once the model is loaded and warm, else 503 (public)", 200, 503),
		"/openapi.json": obj{"get": obj{
			"summary": "This document (public)", "operationId": "openapi",
			"responses": obj{"200": obj{"description": "OpenAPI 3 document", "content": jsonBody(obj{"type": "object"})}},
		}},
		"/metrics": obj{"get": obj{
			"summary": "Prometheus metrics; requires the process token (an empty configured token answers 401)", "operationId": "metrics",
			"security": []any{obj{"bearer": []any{}}},
			"responses": merge(byCode(401, 429), obj{"200": obj{
				"description": "Prometheus text exposition",
				"content":     obj{"text/plain": obj{"schema": obj{"type": "string"}}},
			}}),
		}},
		InferPathTemplate: obj{
			"parameters": []any{
				obj{"name": "task", "in": "path", "required": true, "schema": obj{"type": "string"}},
				obj{"name": "model", "in": "path", "required": true, "schema": obj{"type": "string"}},
			},
			"post": infer,
		},
		"/jobs":                 obj{"post": submit},
		"/jobs/{job_id}":        obj{"get": getJob},
		"/jobs/{job_id}/wait":   obj{"get": waitJob},
		"/jobs/{job_id}/result": obj{"get": jobResult},
	}

	table := make([]any, 0, len(Table))
	for _, r := range Table {
		table = append(table, obj{"status": int(r.Status), "status_str": r.Text, "http": r.HTTP})
	}
	doc := obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":       "Mortred model server",
			"version":     "1",
			"description": "The data-plane contract of every mortred model process (loopback only; production traffic goes through mortred-gateway, which passes these statuses through unchanged). Generated by cmd/gen-openapi from mortred/envelope; do not edit.",
		},
		"paths": paths,
		"components": obj{
			"schemas":         g.schemas,
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}},
		},
		"x-mortred-status-table": table,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var extraHeaders = obj{
	"Retry-After":      obj{"description": "seconds until a retry may succeed (1-60)", "schema": obj{"type": "integer"}},
	"WWW-Authenticate": obj{"description": `Bearer realm="Mortred"`, "schema": obj{"type": "string"}},
	"Allow":            obj{"description": "the allowed method", "schema": obj{"type": "string"}},
	HeaderItems:        obj{"description": "the number of input images of the accepted request (images[] length); absent on refusals; the gateway charges it to the API key's images per minute and does not pass it on", "schema": obj{"type": "integer", "minimum": 0}},
}

func merge(a, b obj) obj {
	for k, v := range b {
		a[k] = v
	}
	return a
}

func codeDescription(code int) string {
	var parts []string
	for _, r := range Table {
		if r.HTTP == code {
			parts = append(parts, fmt.Sprintf("status %d (%s)", r.Status, r.Text))
		}
	}
	if len(parts) == 0 {
		return http.StatusText(code)
	}
	return http.StatusText(code) + ": " + strings.Join(parts, ", ")
}

func statusSchema() obj {
	enum := make([]int, 0, len(Table))
	var rows []string
	for _, r := range Table {
		enum = append(enum, int(r.Status))
		rows = append(rows, fmt.Sprintf("%d = %s (HTTP %d)", r.Status, r.Text, r.HTTP))
	}
	sort.Ints(enum)
	return obj{"type": "integer", "enum": enum, "description": "contract status: " + strings.Join(rows, "; ")}
}

type gen struct{ schemas obj }

var (
	statusType = reflect.TypeFor[Status]()
	rawType    = reflect.TypeFor[json.RawMessage]()
)

// ref returns a $ref to t's schema, adding it to components on first use.
func (g *gen) ref(t reflect.Type) obj {
	name := t.Name()
	ref := obj{"$ref": "#/components/schemas/" + name}
	if _, ok := g.schemas[name]; ok {
		return ref
	}
	g.schemas[name] = obj{} // placeholder against recursion
	props, required := obj{}, []string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		jname, opts, _ := strings.Cut(tag, ",")
		if jname == "" {
			jname = f.Name
		}
		s := g.schema(f.Type)
		if d := f.Tag.Get("doc"); d != "" {
			if _, isRef := s["$ref"]; isRef {
				s = obj{"allOf": []any{s}, "description": d}
			} else {
				s["description"] = d
			}
		}
		props[jname] = s
		if !strings.Contains(opts, "omitempty") {
			required = append(required, jname)
		}
	}
	s := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	g.schemas[name] = s
	return ref
}

// strict forbids unknown properties on a generated object (the request
// envelope; responses stay open so clients can ignore new fields).
func (g *gen) strict(name string) { g.schemas[name].(obj)["additionalProperties"] = false }

func (g *gen) schema(t reflect.Type) obj {
	switch {
	case t == statusType:
		return obj{"$ref": "#/components/schemas/Status"}
	case t == rawType:
		return obj{"nullable": true}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.Struct:
		return g.ref(t)
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int32, reflect.Int64:
		return obj{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return obj{"type": "number"}
	case reflect.Slice:
		return obj{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Array:
		return obj{"type": "array", "items": g.schema(t.Elem()), "minItems": t.Len(), "maxItems": t.Len()}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return obj{"nullable": true}
	}
	panic("envelope: no OpenAPI schema for " + t.String())
}
