package warmup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// taskPayloads names, per {task} of the inference path, the
// components.schemas one of which results[].data must match: the
// document's Item.data itself is untyped, so this is the one place that
// ties a task to its payloads. A task not listed may answer any of them;
// names the instance's document lacks are skipped.
var taskPayloads = map[string][]string{
	"classification":   {"Classification"},
	"detection":        {"DetectionList"},
	"face_detection":   {"FaceDetectionList"},
	"segmentation":     {"Segmentation", "ImageOutput"},
	"super_resolution": {"SuperResolution", "ImageOutput"},
	// The PP-OCR family: the pipeline, its detector, recogniser and
	// direction classifier.
	"ocr": {"OCRLineList", "TextDetectionList", "TextRecognition", "Classification"},
}

// anyPayload is the candidates of a task taskPayloads does not list.
var anyPayload = []string{"Classification", "DetectionList", "FaceDetectionList", "Segmentation", "SuperResolution", "TextDetectionList", "TextRecognition", "OCRLineList", "ImageOutput"}

// validator checks answers against one instance's OpenAPI document.
type validator struct {
	doc *openapi3.T
	// route and params are the document's operation for POST {URI}; nil
	// route when the document has none, and then the body is checked
	// against components.schemas.Response alone.
	route    *routers.Route
	params   map[string]string
	task     string   // the route's {task}; empty without one
	payloads []string // candidate schemas of results[].data, in the document
}

// loadValidator fetches t's /openapi.json and finds its inference route.
// A failed fetch is a *fetchError.
func loadValidator(ctx context.Context, t Target) (*validator, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.BaseURL+"/openapi.json", nil)
	if err != nil {
		return nil, err
	}
	a, err := fetch(t, req)
	if err != nil {
		return nil, err
	}
	if a.code != http.StatusOK {
		return nil, &fetchError{reason: fmt.Sprintf("GET %s: HTTP %d: %s", req.URL, a.code, snippet(a.body))}
	}
	if !jsonValid(a.body) {
		return nil, fmt.Errorf("GET %s answered HTTP 200 but not JSON: %s", req.URL, snippet(a.body))
	}
	loader := openapi3.NewLoader() // external $refs stay refused
	loader.Context = ctx
	doc, err := loader.LoadFromData(a.body)
	if err != nil {
		return nil, fmt.Errorf("not an OpenAPI document: %s", oneLine(err.Error()))
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("invalid: %s", oneLine(err.Error()))
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("no router: %s", oneLine(err.Error()))
	}
	v := &validator{doc: doc}
	probe, err := http.NewRequest(http.MethodPost, t.BaseURL+t.URI, nil)
	if err != nil {
		return nil, err
	}
	if route, params, err := router.FindRoute(probe); err == nil {
		v.route, v.params, v.task = route, params, params["task"]
	} else if v.schema("Response") == nil {
		return nil, fmt.Errorf("no operation for POST %s and no components.schemas.Response", t.URI)
	}
	names, ok := taskPayloads[v.task]
	if !ok {
		names = anyPayload
	}
	for _, n := range names {
		if v.schema(n) != nil {
			v.payloads = append(v.payloads, n)
		}
	}
	return v, nil
}

func (v *validator) schema(name string) *openapi3.Schema {
	if v.doc.Components == nil {
		return nil
	}
	if ref := v.doc.Components.Schemas[name]; ref != nil {
		return ref.Value
	}
	return nil
}

const notDocumented = "answer does not match the instance's /openapi.json: "

// check validates a's status, headers and body against the document;
// "" when they match.
func (v *validator) check(ctx context.Context, a *answer) string {
	var err error
	if v.route != nil {
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: a.req, PathParams: v.params, Route: v.route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			},
			Status:  a.code,
			Header:  a.header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(a.body)
		err = openapi3filter.ValidateResponse(ctx, in)
	} else {
		var tree any
		if err = json.Unmarshal(a.body, &tree); err == nil {
			err = v.schema("Response").VisitJSON(tree, openapi3.VisitAsResponse())
		}
	}
	if err == nil {
		return ""
	}
	var tree any
	_ = json.Unmarshal(a.body, &tree)
	return oneLine(notDocumented + schemaReason(err, "", tree))
}

// checkData validates a's results[0].data against the task's payload
// schemas; "" when one of them matches (or the document has none).
func (v *validator) checkData(a *answer) string {
	if len(v.payloads) == 0 {
		return ""
	}
	const base = "results[0].data"
	errs := make([]error, len(v.payloads))
	for i, name := range v.payloads {
		if errs[i] = v.schema(name).VisitJSON(a.data, openapi3.VisitAsResponse()); errs[i] == nil {
			return ""
		}
	}
	if len(v.payloads) == 1 {
		return oneLine(fmt.Sprintf("%s%s (components.schemas.%s)", notDocumented, schemaReason(errs[0], base, a.data), v.payloads[0]))
	}
	// Explain the failure of the first candidate of the data's own kind.
	closest := 0
	for i, name := range v.payloads {
		if t := v.schema(name).Type; t == nil || t.Is("array") == isArray(a.data) {
			closest = i
			break
		}
	}
	task := v.task
	if task == "" {
		task = "known"
	}
	return oneLine(fmt.Sprintf("%s%s matches none of the %s payloads (%s); as %s: %s", notDocumented, base, task,
		strings.Join(v.payloads, ", "), v.payloads[closest], schemaReason(errs[closest], base, a.data)))
}

func isArray(v any) bool { _, ok := v.([]any); return ok }

// schemaReason trims a kin-openapi error to "where: why", where is the
// failing value's path under base (as in results[0].data.scores[1]), found
// by walking root along the error's JSON pointer.
func schemaReason(err error, base string, root any) string {
	prefix := ""
	var re *openapi3filter.ResponseError
	if errors.As(err, &re) && !strings.HasPrefix(re.Reason, "response body doesn't match schema") {
		prefix = re.Reason
	}
	var se *openapi3.SchemaError
	if !errors.As(err, &se) {
		return err.Error()
	}
	// Descend to the innermost schema error (allOf, oneOf): its Reason is
	// the actual rule.
	ptr := se.JSONPointer()
	for {
		var inner *openapi3.SchemaError
		if se.Origin == nil || !errors.As(se.Origin, &inner) {
			break
		}
		se = inner
		// kin-openapi marks the errors of allOf/oneOf with the outer
		// keys too; other origins' paths are relative.
		if in := se.JSONPointer(); len(in) >= len(ptr) && slices.Equal(in[:len(ptr)], ptr) {
			ptr = in
		} else {
			ptr = append(ptr, in...)
		}
	}
	why := se.Reason
	switch {
	case why == "" && se.Origin != nil:
		why = se.Origin.Error()
	case why == "":
		why = fmt.Sprintf("does not match the schema's %q", se.SchemaField)
	}
	// A missing or unsupported property is named by the reason: the path
	// is its object's.
	if n := len(ptr); n > 0 && strings.Contains(why, fmt.Sprintf("property %q", ptr[n-1])) {
		ptr = ptr[:n-1]
	}
	msg := why
	if where := walk(base, root, ptr); where != "" {
		msg = where + ": " + why
	}
	if prefix != "" {
		msg = prefix + ": " + msg
	}
	return msg
}

// walk renders a JSON pointer into v as a path under base.
func walk(base string, v any, ptr []string) string {
	path := base
	for _, seg := range ptr {
		switch c := v.(type) {
		case []any:
			path += "[" + seg + "]"
			if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(c) {
				v = c[i]
			} else {
				v = nil
			}
		case map[string]any:
			path = field(path, seg)
			v = c[seg]
		default:
			path = field(path, seg)
			v = nil
		}
	}
	return path
}
