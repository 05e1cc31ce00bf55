package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// OpenAI error types used in bodies.
const (
	typeInvalid = "invalid_request_error"
	typeServer  = "server_error"
)

// StatusClientClosed is the status metrics record for a client that hung
// up before its answer was complete (nginx's 499). It is never sent.
const StatusClientClosed = 499

// Error is a refusal or failure of one request: the client-facing text
// apart from the cause, which is only logged.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Type and Code fill the OpenAI-style body; Param names the request
	// field at fault ("" when none).
	Type, Code, Param string
	// Message says what failed and what to do; it is sent to the client.
	Message string
	// Cause is the underlying error, logged and never sent.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// errClientGone marks a request whose client went away; nothing is
// written and nothing is logged above debug.
var errClientGone = errors.New("client closed the connection")

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// WriteError writes e as an OpenAI-style JSON error body:
// {"error":{"message":…,"type":…,"param":…,"code":…}}. It is the only
// place the proxy writes an error response, and other router handlers may
// use it for the same shape.
func WriteError(w http.ResponseWriter, e *Error) {
	b := e.body()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}

// BodyType is the body's type field: Type, else invalid_request_error
// below 500 and server_error from 500.
func (e *Error) BodyType() string {
	switch {
	case e.Type != "":
		return e.Type
	case e.Status < 500:
		return typeInvalid
	}
	return typeServer
}

// body is e's JSON body, newline-terminated.
func (e *Error) body() []byte {
	f := errorFields{Message: e.Message, Type: e.BodyType(), Code: e.Code}
	if e.Param != "" {
		f.Param = &e.Param
	}
	b, _ := json.Marshal(errorBody{Error: f})
	return append(b, '\n')
}

// Refusal is the answer for a model that does not route in snap: 503
// with the group's why_not and what to do about it when a group serves
// the name but is not admitted, else 404 listing the models that do
// route. A 404 also names the groups that are not admitted and whose
// models are not known yet (an engine still loading has listed none),
// and, when nothing is known because no daemon answers, says so.
func Refusal(snap *routes.Snapshot, model string) *Error {
	if _, g := snap.Lookup(model); g != nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: "model_unavailable", Param: "model",
			Message: fmt.Sprintf("model %q is served by group %q, which is not routable now: %s (%s; see /status.json)", model, g.Name, g.WhyNot, nextStep(g.WhyNot))}
	}
	avail := "none"
	if a := snap.Available(); len(a) > 0 {
		avail = strings.Join(a, ", ")
	} else if note := snap.DiscoveryNote(); note != "" {
		avail += "; " + note
	}
	msg := fmt.Sprintf("model %q is not served by this cluster; available models: %s", model, avail)
	var pending []string
	for _, name := range snap.GroupNames() {
		if g := snap.Groups[name]; !g.Healthy && len(g.Models) == 0 {
			pending = append(pending, fmt.Sprintf("%q (%s)", name, g.WhyNot))
		}
	}
	if len(pending) > 0 {
		msg += "; not routable yet, with models unknown until their engine answers /models: group " + strings.Join(pending, ", group ") +
			"; an engine still loading looks like this: retry once GET /v1/models lists the model"
	}
	return &Error{Status: http.StatusNotFound, Code: "model_not_found", Param: "model", Message: msg}
}

// nextStep is what to do about a group's why_not.
func nextStep(whyNot string) string {
	switch {
	case strings.HasPrefix(whyNot, routes.WhyProbeFailed), whyNot == routes.WhyUnprobed:
		return "an engine still loading answers like this until it serves /models; retry then"
	case whyNot == routes.WhyStale:
		return "the engine has stopped answering probes within PROBE_TIMEOUT_S"
	case whyNot == routes.WhyNoActors:
		return "the daemon reports no running actor for the group; start or restart its model container"
	case strings.HasPrefix(whyNot, routes.WhyNotAllowed):
		return "add a prefix matching one of the node's addresses to the router's ALLOWED_SOURCES"
	case whyNot == routes.WhyNoEndpoint:
		return "set MENTAT_OPENAI_API for the agent on the rank that serves the API"
	}
	return "the group's entry in /status.json says more"
}

// classifyUpstream turns a failed round trip into the client's answer.
// parent is the client's context, ctx the upstream one (parent plus the
// SERVING_TIMEOUT_S deadline).
func classifyUpstream(err error, parent, ctx context.Context, x *exchange) error {
	if parent.Err() != nil {
		return errClientGone
	}
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	timedOut := ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
	return upstreamError(inner, timedOut, x)
}

// upstreamError is the answer for a failed exchange with the engine: 504
// past SERVING_TIMEOUT_S, 502 when it could not be reached or failed.
func upstreamError(inner error, timedOut bool, x *exchange) error {
	where := fmt.Sprintf("upstream %s of group %q", x.upstream(), x.route.Group)
	if timedOut {
		return &Error{Status: http.StatusGatewayTimeout, Code: "upstream_timeout",
			Message: fmt.Sprintf("%s did not finish within SERVING_TIMEOUT_S (%s); the request was cancelled. Raise SERVING_TIMEOUT_S if generations legitimately run longer", where, x.timeout),
			Cause:   inner}
	}
	var op *net.OpError
	var dns *net.DNSError
	if (errors.As(inner, &op) && op.Op == "dial") || errors.As(inner, &dns) {
		return &Error{Status: http.StatusBadGateway, Code: "upstream_unreachable",
			Message: fmt.Sprintf("cannot connect to %s: %v; the engine may be down or restarting (see /status.json)", where, inner),
			Cause:   inner}
	}
	return &Error{Status: http.StatusBadGateway, Code: "upstream_error",
		Message: fmt.Sprintf("%s failed before answering: %v; the request was not retried (it may have reached the engine)", where, inner),
		Cause:   inner}
}
