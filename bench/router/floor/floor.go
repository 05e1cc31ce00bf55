// Package floor is the least a reverse proxy built on net/http and
// http.Transport does per request, measured beside the router so the
// report shows how much of the router's cost is the library's: read the
// request body into a buffer, one RoundTrip to the engine, copy the status,
// headers and body back (flushing event streams per chunk). No routing, no
// metrics, no limits, no logging.
//
// It runs as a child of the benchmark binary (`self floor-proxy
// LISTEN=UPSTREAM ...`), pinned like the router, so its CPU time is its
// own process's.
package floor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// ChildArg is the first argument that makes the benchmark binary run the
// floor proxy. The binary's main must hand such a call to Main.
const ChildArg = "floor-proxy"

// Transport settings, the router's (mentat/serve/proxy.NewTransport):
// keep-alive with an idle pool above any load's connection count, idle
// connections dropped before the engines' 5 s keep-alive, no environment
// proxy, no compression, HTTP/1.1 only.
const (
	maxIdleConnsPerHost = 256
	idleConnTimeout     = 2 * time.Second
	dialTimeout         = 10 * time.Second
	maxResponseHeader   = 64 << 10
)

// NewTransport returns the floor's Transport: a plain http.Transport with
// the router's settings, none of the router's own additions. Its buffers
// are the router's sizes (internal/httpx), not net/http's 4 KiB: every
// open stream holds them, so with net/http's defaults the floor would
// measure a tuning choice the router has already made, not the library.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxResponseHeader,
		ReadBufferSize:         httpx.TransportReadBufSize,
		WriteBufferSize:        httpx.TransportWriteBufSize,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
	}
}

// bodyBufs, copyBufs and eventBufs are pooled so the floor pays for no
// per-request growth the router avoids too; what remains is net/http's
// own cost. An event stream is relayed through a buffer of the router's
// event size (httpx.EventBufSize) because an idle stream holds it for its
// whole life; a bulk answer through the router's bulk size.
var (
	bodyBufs  = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	copyBufs  = sync.Pool{New: func() any { b := make([]byte, httpx.CopyBufSize); return &b }}
	eventBufs = sync.Pool{New: func() any { b := make([]byte, httpx.EventBufSize); return &b }}
)

// hopByHop are the fields a proxy does not forward (RFC 9110 §7.6.1);
// net/http writes its own framing and connection fields.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Handler proxies every request to upstream (scheme://host:port) with tr.
func Handler(upstream *url.URL, tr http.RoundTripper) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := bodyBufs.Get().(*bytes.Buffer)
		defer func() { buf.Reset(); bodyBufs.Put(buf) }()
		if r.ContentLength > 0 {
			buf.Grow(int(r.ContentLength))
		}
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}

		u := *upstream
		u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
		out := (&http.Request{Method: r.Method, URL: &u, Header: r.Header.Clone(), Host: u.Host,
			Body: io.NopCloser(bytes.NewReader(buf.Bytes())), ContentLength: int64(buf.Len()),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(r.Context())
		if buf.Len() == 0 {
			out.Body = nil
		}
		for _, h := range hopByHop {
			out.Header.Del(h)
		}
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()

		for _, h := range hopByHop {
			resp.Header.Del(h)
		}
		dst := w.Header()
		for k, v := range resp.Header {
			dst[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		events := httpx.IsEventStream(resp.Header.Get("Content-Type"))
		if err := relay(w, resp.Body, events || resp.ContentLength < 0, events); err != nil {
			// The status is out; cutting the connection is the only way
			// to tell the client the answer is incomplete.
			panic(http.ErrAbortHandler)
		}
	})
}

// relay copies src to w through a pooled buffer (the small one for an
// event stream), flushing after each chunk when flush is set so a
// stream's frame leaves when it arrives. It returns the first read or
// write error (nil at EOF).
func relay(w http.ResponseWriter, src io.Reader, flush, events bool) error {
	pool := &copyBufs
	if events {
		pool = &eventBufs
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	rc := http.NewResponseController(w)
	for {
		n, rerr := src.Read(*bp)
		if n > 0 {
			if _, err := w.Write((*bp)[:n]); err != nil {
				return err
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// Route is one listener and the upstream it forwards to.
type Route struct {
	Listen   string
	Upstream *url.URL
}

// ParseRoute parses LISTEN=UPSTREAM, e.g. 127.0.0.1:9001=http://127.0.0.1:8001.
func ParseRoute(s string) (Route, error) {
	listen, up, ok := strings.Cut(s, "=")
	if !ok || listen == "" {
		return Route{}, fmt.Errorf("route %q: want LISTEN=UPSTREAM", s)
	}
	u, err := url.Parse(up)
	if err != nil {
		return Route{}, fmt.Errorf("route %q: %w", s, err)
	}
	if u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return Route{}, fmt.Errorf("route %q: the upstream must be http://host:port", s)
	}
	u.Path = ""
	return Route{Listen: listen, Upstream: u}, nil
}

// Serve serves every route, each with a Transport of its own, until ctx
// ends; it returns the first listen or serve error.
func Serve(ctx context.Context, routes []Route) error {
	var srvs []*http.Server
	errc := make(chan error, len(routes))
	for _, rt := range routes {
		ln, err := net.Listen("tcp", rt.Listen)
		if err != nil {
			for _, s := range srvs {
				s.Close()
			}
			return err
		}
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		s := &http.Server{Handler: Handler(rt.Upstream, tr), ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, s)
		go func() { errc <- s.Serve(ln) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, s := range srvs {
		s.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Main runs the floor proxy with args LISTEN=UPSTREAM... until SIGTERM or
// SIGINT and returns the exit status.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: floor-proxy LISTEN=UPSTREAM...")
		return 2
	}
	var routes []Route
	for _, a := range args {
		rt, err := ParseRoute(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor-proxy:", err)
			return 2
		}
		routes = append(routes, rt)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Serve(ctx, routes); err != nil {
		fmt.Fprintln(os.Stderr, "floor-proxy:", err)
		return 1
	}
	return 0
}
