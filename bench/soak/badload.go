package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// BodyTimeout is the routers' SERVE_BODY_TIMEOUT_S and the gateway's
// body_timeout_ms: a stalled body must be answered 408 (or its
// connection closed) within it plus stallSlack.
const (
	BodyTimeout = 5 * time.Second
	stallSlack  = 5 * time.Second
)

// expect sends one bad request and judges it by its status: one of want
// is served (the refusal it deserves); a 5xx or a broken connection is a
// failure for the judge to attribute; any other status is a defect.
func expect(ctx context.Context, hc *http.Client, kind string, path []string, req *http.Request, want ...int) (res record.Result) {
	res = record.Result{Kind: kind, Path: path}
	ctx, cancel := context.WithTimeout(ctx, mentatDeadline)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	resp, err := hc.Do(req.WithContext(ctx))
	if err != nil {
		return failed(res, ctx, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	res.Status = resp.StatusCode
	switch {
	case slices.Contains(want, resp.StatusCode):
		if len(bytes.TrimSpace(raw)) == 0 {
			return defect(res, "HTTP %d with an empty body", resp.StatusCode)
		}
		return res
	case resp.StatusCode >= 500:
		res.Failed, res.Detail = true, fmt.Sprintf("HTTP %d: %.160s", resp.StatusCode, raw)
		return res
	}
	return defect(res, "HTTP %d, want %v: %.160s", resp.StatusCode, want, raw)
}

func newReq(method, url, token string, body []byte) *http.Request {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// stalled opens a connection to addr, sends a request head promising a
// body, sends part of it and stops: the server must answer 408 or close
// within BodyTimeout+stallSlack, and nothing may hang.
func stalled(ctx context.Context, kind string, path []string, addr, uri, token string) (res record.Result) {
	res = record.Result{Kind: kind, Path: path, Start: time.Now()}
	defer func() { res.End = time.Now() }()
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		res.Failed, res.Detail = true, "connection: "+err.Error()
		return res
	}
	defer c.Close()
	head := "POST " + uri + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n{\"model\":"); err != nil {
		res.Failed, res.Detail = true, "connection: "+err.Error()
		return res
	}
	_ = c.SetReadDeadline(time.Now().Add(BodyTimeout + stallSlack))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return defect(res, "a stalled body held the connection past %s with no answer", BodyTimeout+stallSlack)
		}
		// Closed without an answer: the server gave up on it, which is
		// what a stalled client deserves.
		return res
	}
	resp.Body.Close()
	res.Status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusBadRequest:
		return res
	case resp.StatusCode >= 500:
		res.Failed, res.Detail = true, fmt.Sprintf("HTTP %d", resp.StatusCode)
		return res
	}
	return defect(res, "a stalled body answered HTTP %d", resp.StatusCode)
}

// slowBody is an io.Reader that hands out its bytes in a few pieces with
// pauses, as a client on a slow link sends.
type slowBody struct {
	b     []byte
	piece int
	pause time.Duration
}

func (s *slowBody) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	n := copy(p[:min(len(p), s.piece)], s.b)
	s.b = s.b[n:]
	return n, nil
}

// hangUp starts a stream, reads a few frames and hangs up: served when
// those frames were well formed (what it costs the router shows in the
// health samples, not here).
func hangUp(ctx context.Context, c *mentatClient, r *rand.Rand) (res record.Result) {
	res = record.Result{Kind: "bad-hangup-mid-stream", Path: c.path(ModelA), Start: time.Now()}
	defer func() { res.End = time.Now() }()
	ctx, cancel := context.WithTimeout(ctx, mentatDeadline)
	defer cancel()
	b := fmt.Sprintf(`{"model":%q,"stream":true,"ignore_eos":true,"max_tokens":200,"messages":[{"role":"user","content":%q}]}`, ModelA, words(r, 20))
	resp, err := c.post(ctx, c.front+"/v1/chat/completions", []byte(b))
	if err != nil {
		return failed(res, ctx, err)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		return refused(res, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	for frames := 0; frames < 3; {
		if !sc.Scan() {
			return failed(res, ctx, fmt.Errorf("stream ended after %d frames: %v", frames, sc.Err()))
		}
		if l := sc.Text(); strings.HasPrefix(l, "data: {") {
			if strings.Contains(l, `"error"`) {
				res.Failed, res.Detail = true, "error event: "+l
				return res
			}
			frames++
		}
	}
	cancel()
	return res
}
