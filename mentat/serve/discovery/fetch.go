package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"syscall"
	"time"
)

// DefaultIdleConnTimeout keeps pooled connections for less time than
// uvicorn's 5 s keep-alive, so most reuse lands on a connection the server
// still holds.
const DefaultIdleConnTimeout = 4 * time.Second

// Getter performs the GETs that may be retried: the endpoint probe and the
// daemon status poll. A GET that fails on a reused keep-alive connection is
// sent once more on a fresh connection, because a server closing an idle
// connection produces an error indistinguishable from a dead endpoint. A
// refused connect, or a failure on a fresh connection, is final.
//
// A Getter is safe for concurrent use. Close releases its idle connections.
type Getter struct {
	pooled *http.Client
	fresh  *http.Client
}

// NewGetter returns a Getter whose pooled connections idle at most idle
// (DefaultIdleConnTimeout when zero).
func NewGetter(idle time.Duration) *Getter {
	if idle <= 0 {
		idle = DefaultIdleConnTimeout
	}
	pooled := &http.Transport{
		Proxy:                 nil, // never route cluster traffic through an HTTP proxy
		DialContext:           (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       idle,
		ResponseHeaderTimeout: 0, // the per-request context carries the deadline
		DisableCompression:    true,
	}
	fresh := &http.Transport{
		Proxy:              nil,
		DialContext:        (&net.Dialer{}).DialContext,
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Getter{
		pooled: &http.Client{Transport: pooled, CheckRedirect: noRedirect},
		fresh:  &http.Client{Transport: fresh, CheckRedirect: noRedirect},
	}
}

// Close drops idle connections.
func (g *Getter) Close() {
	g.pooled.CloseIdleConnections()
	g.fresh.CloseIdleConnections()
}

// Result is one GET's outcome.
type Result struct {
	Status int
	Body   []byte
	// Retried is set when the first attempt failed on a reused connection
	// and the answer (or error) comes from a second, fresh connection.
	Retried bool
}

// StatusError is a non-2xx answer.
type StatusError struct{ Code int }

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d", e.Code) }

// TooLargeError is an answer over the size limit.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string { return fmt.Sprintf("answer over %d bytes", e.Limit) }

// Get fetches url with one attempt's deadline of timeout, reading at most
// limit bytes of body. A non-2xx status is a *StatusError.
func (g *Getter) Get(ctx context.Context, url string, timeout time.Duration, limit int64) (Result, error) {
	return g.GetWith(ctx, url, nil, timeout, limit)
}

// GetWith is Get sending the headers in h as well (an engine's
// Authorization).
func (g *Getter) GetWith(ctx context.Context, url string, h http.Header, timeout time.Duration, limit int64) (Result, error) {
	res, reused, err := g.once(ctx, g.pooled, url, h, timeout, limit)
	if err == nil || !reused || ctx.Err() != nil || errors.Is(err, syscall.ECONNREFUSED) {
		return res, err
	}
	var se *StatusError
	var tl *TooLargeError
	if errors.As(err, &se) || errors.As(err, &tl) {
		return res, err // the server answered; a fresh connection would not change that
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A closed idle connection fails at once; silence for a whole
		// timeout is an endpoint not answering, and a second timeout would
		// double the round that PROBE_FRESH_S is sized for.
		return res, err
	}
	res, _, err = g.once(ctx, g.fresh, url, h, timeout, limit)
	res.Retried = true
	return res, err
}

func (g *Getter) once(ctx context.Context, c *http.Client, url string, h http.Header, timeout time.Duration, limit int64) (Result, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		return Result{}, false, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return Result{}, reused, describe(err, timeout)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	res := Result{Status: resp.StatusCode, Body: body}
	if err != nil {
		return res, reused, describe(err, timeout)
	}
	if int64(len(body)) > limit {
		return res, reused, &TooLargeError{Limit: limit}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return res, reused, &StatusError{Code: resp.StatusCode}
	}
	return res, reused, nil
}

// describe turns transport errors into the short text operators read in
// why_not, keeping the cause for errors.Is.
func describe(err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &shortError{"no answer within " + timeout.String(), err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &shortError{"connection refused", err}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return &shortError{"no route to host", err}
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err // the URL is already in front of every why_not entry
	}
	return err
}

// shortError is a transport error reworded for operators; errors.Is still
// sees the cause.
type shortError struct {
	msg   string
	cause error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.cause }
