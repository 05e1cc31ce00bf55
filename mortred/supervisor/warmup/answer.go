package warmup

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// answer is one inference round trip.
type answer struct {
	req     *http.Request
	code    int
	header  http.Header
	body    []byte
	latency time.Duration
	env     envelope.Response // after decode
	data    any               // results[0].data, after decode
}

// fetchError is a request that got no complete answer: the transport
// failed, ctx ended, or the body was over maxAnswer.
type fetchError struct {
	reason string
	err    error // nil for an oversized body
}

func (e *fetchError) Error() string { return e.reason }
func (e *fetchError) Unwrap() error { return e.err }

// request is the envelope Check sends: one image, no params.
type request struct {
	ReqID  string         `json:"req_id"`
	Images []string       `json:"images"`
	Params map[string]any `json:"params"`
}

// send posts sample i to t's server_uri.
func send(ctx context.Context, t Target, i int, img []byte) (answer, error) {
	body, err := json.Marshal(request{
		ReqID:  "warmup-" + strconv.Itoa(i),
		Images: []string{base64.StdEncoding.EncodeToString(img)},
		Params: map[string]any{},
	})
	if err != nil {
		return answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.BaseURL+t.URI, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	return fetch(t, req)
}

// fetch sends req with t's token and reads the answer up to maxAnswer.
func fetch(t Target, req *http.Request) (answer, error) {
	a := answer{req: req}
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	start := time.Now()
	resp, err := t.Client.Do(req)
	if err != nil {
		a.latency = time.Since(start)
		return a, transportError(req, err)
	}
	defer resp.Body.Close()
	a.code, a.header = resp.StatusCode, resp.Header
	if resp.ContentLength > maxAnswer {
		a.latency = time.Since(start)
		return a, &fetchError{reason: fmt.Sprintf("%s %s: HTTP %d with a %d-byte answer, over the %d-byte bound", req.Method, req.URL, a.code, resp.ContentLength, maxAnswer)}
	}
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	a.latency = time.Since(start)
	if err != nil {
		return a, transportError(req, err)
	}
	if int64(len(a.body)) > maxAnswer {
		return a, &fetchError{reason: fmt.Sprintf("%s %s: HTTP %d with an answer over the %d-byte bound", req.Method, req.URL, a.code, maxAnswer)}
	}
	return a, nil
}

// transportError names what failed without url.Error's quoting, and says
// "cannot connect" for a dial error (connection refused, no route).
func transportError(req *http.Request, err error) error {
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	what := "request failed"
	var oe *net.OpError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		what = "gave up"
	case errors.As(err, &oe) && oe.Op == "dial":
		what = "cannot connect"
	}
	return &fetchError{reason: fmt.Sprintf("%s %s: %s: %v", req.Method, req.URL, what, inner), err: err}
}

// httpOK returns "" when the answer is HTTP 200 with a JSON body, else why
// not: for another code the envelope's status and first message.
func (a *answer) httpOK() string {
	if a.code == http.StatusOK {
		if !jsonValid(a.body) {
			return a.notJSON()
		}
		return ""
	}
	var env struct {
		Status    *envelope.Status `json:"status"`
		StatusStr string           `json:"status_str"`
		Errors    []struct {
			Message string `json:"message"`
		} `json:"errors"`
		Results []struct {
			Message string `json:"message"`
		} `json:"results"`
	}
	if json.Unmarshal(a.body, &env) != nil || env.Status == nil {
		return fmt.Sprintf("HTTP %d (Content-Type %q), not an envelope: %s", a.code, a.header.Get("Content-Type"), snippet(a.body))
	}
	text := env.StatusStr
	if text == "" {
		text = envelope.Text(*env.Status)
	}
	msg := fmt.Sprintf("HTTP %d, status %d (%s)", a.code, *env.Status, text)
	switch {
	case len(env.Errors) > 0 && env.Errors[0].Message != "":
		msg += ": " + env.Errors[0].Message
	case len(env.Results) > 0 && env.Results[0].Message != "":
		msg += ": " + env.Results[0].Message
	}
	return oneLine(msg)
}

func (a *answer) notJSON() string {
	return fmt.Sprintf("HTTP %d answer is not JSON (Content-Type %q): %s", a.code, a.header.Get("Content-Type"), snippet(a.body))
}

// decode fills env and data; "" when the body is an envelope.
func (a *answer) decode() string {
	if err := json.Unmarshal(a.body, &a.env); err != nil {
		return oneLine("answer is not a mortred envelope: " + err.Error())
	}
	a.data = nil
	if len(a.env.Results) > 0 && len(a.env.Results[0].Data) > 0 {
		if err := json.Unmarshal(a.env.Results[0].Data, &a.data); err != nil {
			return oneLine("results[0].data: " + err.Error())
		}
	}
	return ""
}

// succeeded returns "" when the decoded envelope is a full success for one
// image, else why not.
func (a *answer) succeeded() string {
	e := &a.env
	switch {
	case e.Status != envelope.StatusOK:
		msg := fmt.Sprintf("envelope status %d (%s)", e.Status, envelope.Text(e.Status))
		if e.Partial {
			msg += " with partial true"
		}
		for i, it := range e.Results {
			if it.Status != envelope.StatusOK {
				msg += fmt.Sprintf("; results[%d] status %d: %s", i, it.Status, it.Message)
				break
			}
		}
		return oneLine(msg)
	case e.Partial:
		return "envelope status 0 but partial true"
	case len(e.Results) != 1:
		return fmt.Sprintf("one image answered with %d results", len(e.Results))
	case e.Results[0].Status != envelope.StatusOK:
		it := e.Results[0]
		msg := fmt.Sprintf("envelope status 0 but results[0] failed with status %d (%s)", it.Status, envelope.Text(it.Status))
		if it.Message != "" {
			msg += ": " + it.Message
		}
		return oneLine(msg)
	case a.data == nil:
		return "results[0] has status 0 but its data is null"
	}
	return ""
}

func jsonValid(b []byte) bool { return len(bytes.TrimSpace(b)) > 0 && json.Valid(b) }

// snippet is the start of a body, quoted, for an error line.
func snippet(b []byte) string {
	const n = 120
	if len(b) == 0 {
		return "empty body"
	}
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "…"
	}
	return strconv.Quote(string(b))
}

// oneLine folds s onto one line of at most 400 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const n = 400
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
