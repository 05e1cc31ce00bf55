package httpx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"time"
)

// MaxResponseHeaderBytes bounds an upstream answer's head. An engine or
// model server answering with a larger one gets 502: the Transport stops
// reading at this size instead of buffering the head.
const MaxResponseHeaderBytes = 64 << 10

// CopyBufSize is the buffer an answer streams through (Relay).
const CopyBufSize = 32 << 10

// The Transport's per-connection buffers, unless TransportConfig says
// otherwise. Every upstream connection holds both for its whole life, an
// open stream's included, so they are sized for what passes through them
// rather than net/http's 4 KiB: the read buffer takes an answer's head and
// the small reads of an event stream (RelayEvents reads EventBufSize at a
// time), while a bulk read (Relay's CopyBufSize) bypasses it; the write
// buffer takes a request's head and the start of its body, the rest of
// which goes straight from the request's own buffer (bodyConn).
const (
	TransportReadBufSize  = 1 << 10
	TransportWriteBufSize = 1 << 10
)

// TransportConfig is one kind of upstream (engines; model servers).
type TransportConfig struct {
	// DialTimeout bounds connecting (never the answer).
	DialTimeout time.Duration
	// IdleConnTimeout drops a pooled connection idle this long. It must be
	// below the upstream's own keep-alive, so the proxy closes an idle
	// connection before the upstream does and never sends a request into
	// one being closed.
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost is how many idle connections to keep per
	// upstream.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost caps connections per upstream; 0 means none.
	MaxConnsPerHost int
	// ResponseHeaderTimeout bounds the wait for an answer's head once the
	// request is written; 0 means none (the request context bounds it).
	ResponseHeaderTimeout time.Duration
	// ReadBufferSize and WriteBufferSize are each connection's buffers;
	// 0 means TransportReadBufSize and TransportWriteBufSize.
	ReadBufferSize, WriteBufferSize int
}

// NewTransport returns the Transport for one kind of upstream: plain
// HTTP/1.1 keep-alive, no environment proxy, no compression (answers pass
// byte for byte as the upstream wrote them, Content-Encoding included),
// and an answer head of at most MaxResponseHeaderBytes.
//
// Sent once: the Transport re-sends a request on a fresh connection only
// when none of its bytes were written (a pooled connection found closed
// first), and only when the body can be rewound (GetBody). A request of
// which any byte went out is never re-sent, whatever the error: POST is
// not idempotent, and the callers forward no Idempotency-Key (which would
// make it so for net/http). A retry would re-send work the upstream may
// already be doing.
func NewTransport(c TransportConfig) *http.Transport {
	d := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}
	if c.ReadBufferSize <= 0 {
		c.ReadBufferSize = TransportReadBufSize
	}
	if c.WriteBufferSize <= 0 {
		c.WriteBufferSize = TransportWriteBufSize
	}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return bodyConn{conn}, nil
		},
		MaxIdleConns:           0, // no total cap; per host below
		MaxIdleConnsPerHost:    c.MaxIdleConnsPerHost,
		MaxConnsPerHost:        c.MaxConnsPerHost,
		IdleConnTimeout:        c.IdleConnTimeout,
		ResponseHeaderTimeout:  c.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		ReadBufferSize:         c.ReadBufferSize,
		WriteBufferSize:        c.WriteBufferSize,
	}
}

// ErrSwitchingProtocols is the error for an upstream that answered 101
// Switching Protocols: neither product forwards Upgrade, so no request
// asked for it, and relaying it would hand the client's connection to
// another protocol.
var ErrSwitchingProtocols = errors.New("the upstream answered 101 Switching Protocols to a request that did not ask to switch protocols")

// RoundTrip sends req with tr, as tr.RoundTrip does, but refuses a 101
// answer (ErrSwitchingProtocols; the upstream connection is closed). The
// Transport handles every other 1xx itself.
func RoundTrip(tr http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := tr.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		return nil, ErrSwitchingProtocols
	}
	return resp, err
}

// bodyConn is an upstream connection that writes an in-memory body
// straight from its buffer. The Transport writes a body of known length
// as io.Copy(conn, io.LimitReader(body, n)) once its head is out; the
// LimitedReader hides the *bytes.Reader's WriteTo, so io.Copy would copy
// the body through a fresh 32 KiB buffer. ReadFrom recognises that shape
// and writes the bytes from the Body's buffer: no copy, no allocation.
type bodyConn struct{ net.Conn }

func (c bodyConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if br := inMemory(lr.R); br != nil && int64(br.Len()) <= lr.N {
			n, err := br.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// nopCloserWriterTo is the type of io.NopCloser(*bytes.Reader), the body
// Attach hands the Transport (which unwraps its own wrapper, not this one).
var nopCloserWriterTo = reflect.TypeOf(io.NopCloser(&bytes.Reader{}))

// inMemory is the *bytes.Reader r is or wraps with io.NopCloser, else nil
// (net/http looks inside io.NopCloser the same way).
func inMemory(r io.Reader) *bytes.Reader {
	if br, ok := r.(*bytes.Reader); ok {
		return br
	}
	if reflect.TypeOf(r) == nopCloserWriterTo {
		br, _ := reflect.ValueOf(r).Field(0).Interface().(*bytes.Reader)
		return br
	}
	return nil
}
