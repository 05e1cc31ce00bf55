// Package warmup is the supervisor's check of a freshly started model
// server before a rollout switches traffic to it: each sample image goes
// through the new instance, whose answers must succeed and match the OpenAPI
// document that instance serves, and, when the old version still runs, must
// have the same shape as the old version's answers to the same images.
//
// Check is sequential (one request per sample, the new version first, then
// the old one) and holds no state between calls: every call fetches the
// instance's /openapi.json afresh.
package warmup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// MaxAnswerBytes bounds what Check reads of one answer (and of the OpenAPI
// document): a longer body fails the sample.
const MaxAnswerBytes = 32 << 20

// maxAnswer is MaxAnswerBytes; tests lower it.
var maxAnswer int64 = MaxAnswerBytes

// Target is one model server instance.
type Target struct {
	// BaseURL is the instance's origin, e.g. http://127.0.0.1:9001 (a
	// trailing slash is ignored). Required.
	BaseURL string
	// URI is the instance's server_uri, e.g.
	// /mortred_ai_server_v1/classification/resnet. Required.
	URI string
	// Token is sent as Authorization: Bearer <Token>; empty sends none.
	Token string
	// Client sends the requests; nil means http.DefaultClient. Check's ctx
	// bounds every request whatever the client's own timeout.
	Client *http.Client
}

// Report is what Check saw, sample by sample. Its JSON form is part of the
// supervisor's rollout answer (latencies in milliseconds).
type Report struct {
	// Model is the model the new instance named in its last successful
	// answer; zero when none succeeded.
	Model envelope.ModelInfo `json:"model"`
	// RefModel is the same for the old version; zero without one.
	RefModel envelope.ModelInfo `json:"ref_model,omitzero"`
	// Samples has one entry per sample sent, in order. It stops short of
	// len(samples) when a transport error or ctx ended the check early.
	Samples []Sample `json:"samples"`
}

// Sample is one sample's outcome.
type Sample struct {
	Index int
	// Latency is the new instance's round trip, request to last byte.
	Latency time.Duration
	// RefLatency is the old version's; zero without one or when the
	// sample failed before it was sent there.
	RefLatency time.Duration
	OK         bool
	// Reason says why the sample failed; empty when OK.
	Reason string
}

// sampleJSON is Sample's JSON form.
type sampleJSON struct {
	Index        int     `json:"index"`
	LatencyMS    float64 `json:"latency_ms"`
	RefLatencyMS float64 `json:"ref_latency_ms,omitempty"`
	OK           bool    `json:"ok"`
	Reason       string  `json:"reason,omitempty"`
}

// MarshalJSON writes the latencies as milliseconds (latency_ms,
// ref_latency_ms, rounded to 0.001 ms).
func (s Sample) MarshalJSON() ([]byte, error) {
	return json.Marshal(sampleJSON{Index: s.Index, LatencyMS: envelope.MS(s.Latency.Nanoseconds()),
		RefLatencyMS: envelope.MS(s.RefLatency.Nanoseconds()), OK: s.OK, Reason: s.Reason})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Sample) UnmarshalJSON(b []byte) error {
	var j sampleJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ms := func(v float64) time.Duration { return time.Duration(math.Round(v * 1e6)) }
	*s = Sample{Index: j.Index, Latency: ms(j.LatencyMS), RefLatency: ms(j.RefLatencyMS), OK: j.OK, Reason: j.Reason}
	return nil
}

// OK reports whether every sample passed.
func (r Report) OK() bool {
	for _, s := range r.Samples {
		if !s.OK {
			return false
		}
	}
	return len(r.Samples) > 0
}

// Error is Check's failure: the first sample that failed and why.
type Error struct {
	// Sample is the index of the failing sample; -1 when the check failed
	// before any sample was sent (a bad Target, the OpenAPI document).
	Sample int
	// Ref is true when the old version's answer was the one at fault (the
	// shapes could not be compared); the new instance passed that sample.
	Ref bool
	// Reason is one line: what failed and why.
	Reason string
	// Err is the transport or context error behind Reason, if any
	// (errors.Is(err, context.Canceled) works through it).
	Err error
}

func (e *Error) Error() string {
	if e.Sample < 0 {
		return e.Reason
	}
	return fmt.Sprintf("sample %d: %s", e.Sample, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Check runs each sample image (one request per sample) through t. Each
// answer must be HTTP 200 with envelope status 0, partial false and one
// result of status 0 with non-null data, and must validate against the
// OpenAPI document t serves at /openapi.json: the envelope through the
// document's route for t.URI, and results[0].data against the payload
// schemas of the route's {task} (see taskPayloads).
//
// If ref is not nil (the old version), each sample that passed is also sent
// to ref, whose answer must succeed the same way (it is not checked against
// a document) and whose results[0].data must have the same shape as t's:
// the same object keys, recursively; the same JSON types; arrays of numbers
// of the same length; arrays of anything else may differ in length, but
// their elements must have the same shape.
//
// Empty samples mean DefaultSamples(). Check does not modify samples.
// It goes on after a sample fails on its answer, so the report covers every
// sample, but stops at a transport error or when ctx is done. The error is
// an *Error for the first failure; the report is returned either way.
func Check(ctx context.Context, t Target, ref *Target, samples [][]byte) (Report, error) {
	var rep Report
	if len(samples) == 0 {
		samples = DefaultSamples()
	}
	newT, err := t.normalize()
	if err != nil {
		return rep, &Error{Sample: -1, Reason: "target: " + err.Error()}
	}
	var oldT *Target
	if ref != nil {
		r, err := ref.normalize()
		if err != nil {
			return rep, &Error{Sample: -1, Reason: "reference target: " + err.Error()}
		}
		oldT = &r
	}
	v, err := loadValidator(ctx, newT)
	if err != nil {
		var fe *fetchError
		if errors.As(err, &fe) {
			return rep, &Error{Sample: -1, Reason: "fetching the instance's OpenAPI document: " + fe.reason, Err: fe.err}
		}
		return rep, &Error{Sample: -1, Reason: "the instance's OpenAPI document: " + err.Error()}
	}

	var first *Error
	for i, img := range samples {
		s, model, refModel, serr := checkSample(ctx, v, newT, oldT, i, img)
		rep.Samples = append(rep.Samples, s)
		if model != nil {
			rep.Model = *model
		}
		if refModel != nil {
			rep.RefModel = *refModel
		}
		if serr == nil {
			continue
		}
		if first == nil {
			first = serr
		}
		if serr.Err != nil {
			break // the instance is unreachable or ctx is done: no point going on
		}
	}
	if first != nil {
		return rep, first
	}
	return rep, nil
}

// checkSample sends sample i to t and, when it passes and ref is set, to
// ref. It returns the models the answers named (nil when none passed).
func checkSample(ctx context.Context, v *validator, t Target, ref *Target, i int, img []byte) (Sample, *envelope.ModelInfo, *envelope.ModelInfo, *Error) {
	s := Sample{Index: i}
	fail := func(isRef bool, reason string, err error) (Sample, *envelope.ModelInfo, *envelope.ModelInfo, *Error) {
		s.Reason = reason
		return s, nil, nil, &Error{Sample: i, Ref: isRef, Reason: reason, Err: err}
	}
	a, err := send(ctx, t, i, img)
	s.Latency = a.latency
	if err != nil {
		var fe *fetchError
		if errors.As(err, &fe) {
			return fail(false, fe.reason, fe.err)
		}
		return fail(false, err.Error(), nil)
	}
	for _, step := range []func() string{a.httpOK, func() string { return v.check(ctx, &a) }, a.decode, a.succeeded, func() string { return v.checkData(&a) }} {
		if reason := step(); reason != "" {
			return fail(false, reason, nil)
		}
	}
	model := a.env.Model
	if ref == nil {
		s.OK = true
		return s, model, nil, nil
	}

	old := "the old version at " + ref.BaseURL
	b, err := send(ctx, *ref, i, img)
	s.RefLatency = b.latency
	if err != nil {
		var fe *fetchError
		if errors.As(err, &fe) {
			return fail(true, old+": "+fe.reason, fe.err)
		}
		return fail(true, old+": "+err.Error(), nil)
	}
	for _, step := range []func() string{b.httpOK, b.decode, b.succeeded} {
		if reason := step(); reason != "" {
			return fail(true, old+" failed the sample: "+reason, nil)
		}
	}
	if b.env.Model != nil && b.env.Model.Version != "" {
		old = fmt.Sprintf("version %q", b.env.Model.Version)
	}
	if diff := shapeDiff("results[0].data", a.data, b.data); diff != "" {
		return fail(false, "answer differs in shape from "+old+": "+diff, nil)
	}
	s.OK = true
	return s, model, b.env.Model, nil
}

// normalize checks t and fills its defaults.
func (t Target) normalize() (Target, error) {
	t.BaseURL = strings.TrimRight(t.BaseURL, "/")
	u, err := url.Parse(t.BaseURL)
	switch {
	case t.BaseURL == "":
		return t, errors.New("no BaseURL")
	case err != nil:
		return t, fmt.Errorf("BaseURL %q: %v", t.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return t, fmt.Errorf("BaseURL %q is not an http:// origin", t.BaseURL)
	case !strings.HasPrefix(t.URI, "/"):
		return t, fmt.Errorf("URI %q does not start with /", t.URI)
	}
	if t.Client == nil {
		t.Client = http.DefaultClient
	}
	return t, nil
}
