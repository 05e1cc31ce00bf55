package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Progress pass-through.
//
// The SDK client hands incoming notifications to its handler queue but
// completes a call as soon as the response is read, so a progress
// notification sent just before the result can reach a handler after the
// call returned, too late to forward before the caller's result. So the
// router reads progress off the upstream's SSE bytes as they stream past
// (progressTap), in wire order, into a queue per call; the call drains its
// queue to the caller before returning the result.

// progressTokenPrefix marks the tokens the router gives upstream calls.
const progressTokenPrefix = "mentat-"

// progressQueue bounds the notifications waiting for one call; beyond it
// the oldest news is not worth blocking the upstream's stream for, so new
// ones are dropped.
const progressQueue = 64

// maxSSEEvent bounds the bytes the tap keeps of one SSE event; a larger
// event (a big result) is skipped by the tap and left to the SDK.
const maxSSEEvent = 1 << 20

// progressCall relays one forwarded call's progress to its caller.
type progressCall struct {
	ch   chan *sdk.ProgressNotificationParams
	done chan struct{}
}

// trackProgress gives a call an upstream progress token of its own (tokens
// of different callers may collide) and starts relaying to session under
// ctx, the caller's request context, so the SDK sends the notifications on
// that request's stream. finish stops tracking and returns once everything
// read before it has been relayed.
func (p *pool) trackProgress(ctx context.Context, session *sdk.ServerSession, callerToken any) (token string, finish func()) {
	token = fmt.Sprintf("%s%d", progressTokenPrefix, p.progressSeq.Add(1))
	c := &progressCall{ch: make(chan *sdk.ProgressNotificationParams, progressQueue), done: make(chan struct{})}
	p.progressMu.Lock()
	p.progress[token] = c
	p.progressMu.Unlock()
	go func() {
		defer close(c.done)
		for n := range c.ch {
			n.ProgressToken = callerToken
			if session == nil || ctx.Err() != nil {
				continue
			}
			if err := session.NotifyProgress(ctx, n); err != nil {
				p.logger.Debug("mcp_progress_relay_failed", "err", err)
			}
		}
	}()
	return token, func() {
		p.progressMu.Lock()
		delete(p.progress, token)
		p.progressMu.Unlock()
		close(c.ch)
		<-c.done
	}
}

// deliverProgress queues one upstream progress notification for its call.
func (p *pool) deliverProgress(n *sdk.ProgressNotificationParams) {
	tok, _ := n.ProgressToken.(string)
	p.progressMu.Lock()
	defer p.progressMu.Unlock()
	c := p.progress[tok]
	if c == nil {
		return
	}
	select {
	case c.ch <- n:
	default:
	}
}

// progressTap is the upstream HTTP transport: it watches every SSE response
// for progress notifications carrying one of the router's tokens.
type progressTap struct {
	next    *http.Transport
	deliver func(*sdk.ProgressNotificationParams)
}

func (t *progressTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &sseTap{body: resp.Body, deliver: t.deliver}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (t *progressTap) CloseIdleConnections() { t.next.CloseIdleConnections() }

// sseTap parses the SSE stream passing through it, line by line (lines end
// in \n, optionally preceded by \r), and hands on every progress
// notification before the bytes that follow it reach the reader.
type sseTap struct {
	body    io.ReadCloser
	deliver func(*sdk.ProgressNotificationParams)
	line    []byte // the current, unfinished line
	data    []byte // data of the current event
	skip    bool   // the current event outgrew maxSSEEvent
}

func (s *sseTap) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	s.feed(p[:n])
	return n, err
}

func (s *sseTap) Close() error { return s.body.Close() }

func (s *sseTap) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(s.line)+len(b) > maxSSEEvent {
				s.skip, s.line = true, s.line[:0]
			} else {
				s.line = append(s.line, b...)
			}
			return
		}
		if len(s.line)+i > maxSSEEvent {
			s.skip, s.line = true, s.line[:0]
		} else {
			s.line = append(s.line, b[:i]...)
		}
		b = b[i+1:]
		s.endLine(bytes.TrimSuffix(s.line, []byte{'\r'}))
		s.line = s.line[:0]
	}
}

func (s *sseTap) endLine(line []byte) {
	if len(line) == 0 { // end of event
		if !s.skip && len(s.data) > 0 {
			s.event(s.data)
		}
		s.data, s.skip = s.data[:0], false
		return
	}
	value, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || s.skip {
		return
	}
	value = bytes.TrimPrefix(value, []byte{' '})
	if len(s.data)+len(value)+1 > maxSSEEvent {
		s.skip, s.data = true, s.data[:0]
		return
	}
	if len(s.data) > 0 {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, value...)
}

func (s *sseTap) event(data []byte) {
	if !bytes.Contains(data, []byte("notifications/progress")) || !bytes.Contains(data, []byte(progressTokenPrefix)) {
		return
	}
	var msg struct {
		Method string                          `json:"method"`
		Params *sdk.ProgressNotificationParams `json:"params"`
	}
	if json.Unmarshal(data, &msg) != nil || msg.Method != "notifications/progress" || msg.Params == nil {
		return
	}
	if tok, ok := msg.Params.ProgressToken.(string); ok && strings.HasPrefix(tok, progressTokenPrefix) {
		s.deliver(msg.Params)
	}
}
