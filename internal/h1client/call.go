package h1client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/internal/h1syntax"
)

// Call is one request whose head the caller wrote, with its response
// read raw: for a proxy that passes heads on without building header
// maps. The same rules hold as for RoundTrip: sent once (re-sent on
// another connection only when not one byte was written), pooled
// connections checked before reuse. A Call may be reused after Close.
type Call struct {
	// Status is the final response's status code.
	Status int
	// Header holds the response's field lines as received, each ending in
	// CRLF, framing fields included. Valid until Close.
	Header []byte
	// ContentLength is the body's length, -1 when unknown (chunked or
	// until close).
	ContentLength int64

	c       *Client
	mu      sync.Mutex
	pc      *conn
	aborted bool
	cancel  context.CancelFunc // a dial in progress
	// deadline, when set, applies to the connection (see SetDeadline).
	deadline    time.Time
	hasDeadline bool

	chunked bool
	body    io.Reader // chunked decoder, when chunked
	left    int64     // body bytes left when ContentLength >= 0
	keep    bool
	done    bool
	clean   bool
}

// Get returns the value of the first response field named name (ASCII
// case-insensitive), without surrounding whitespace; nil when absent.
func (x *Call) Get(name string) []byte {
	for b := x.Header; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		line := bytes.TrimRight(b[:i+1], "\r\n")
		b = b[i+1:]
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

// Send writes head (request line and header through the blank line, the
// Content-Length matching body) and body to addr, and reads the final
// response's head. Every read and write of the exchange ends at the
// deadline SetDeadline gives, before or during Send (none until then).
// On error the Call is done; otherwise read the body with Read and end
// with Close.
func (c *Client) Send(x *Call, addr string, head, body []byte) error {
	x.c, x.Status, x.Header, x.ContentLength = c, 0, x.Header[:0], 0
	x.chunked, x.body, x.left, x.keep, x.done, x.clean = false, nil, 0, false, false, false
	for {
		pc, reused := c.get(addr)
		if pc == nil {
			nc, err := x.dial(addr)
			if err != nil {
				x.done = true
				return err
			}
			pc = &conn{addr: addr, nc: nc, br: bufio.NewReaderSize(nc, bufSize)}
		}
		if !x.attach(pc) {
			pc.nc.Close()
			x.done = true
			return errAborted
		}
		n, err := pc.writeParts(head, body)
		if err != nil {
			pc.nc.Close()
			if x.isAborted() {
				x.done = true
				return errAborted
			}
			if n == 0 && reused && !errors.Is(err, os.ErrDeadlineExceeded) {
				continue // not one byte went out, on a dead connection
			}
			x.done = true
			return fmt.Errorf("writing the request: %w", err)
		}
		if err := x.readHead(pc); err != nil {
			pc.nc.Close()
			x.done = true
			switch {
			case x.isAborted():
				return errAborted
			case reused && errors.Is(err, io.EOF):
				return errors.New("the server closed the kept-alive connection without answering")
			}
			return fmt.Errorf("reading the response: %w", err)
		}
		if x.ContentLength == 0 && !x.chunked {
			x.finish(true)
		}
		return nil
	}
}

// errAborted is the error of a Call ended by Abort.
var errAborted = errors.New("the request was aborted")

// IsAborted reports whether err is a Call's error after Abort.
func IsAborted(err error) bool { return errors.Is(err, errAborted) }

func (x *Call) dial(addr string) (nc net.Conn, err error) {
	x.mu.Lock()
	if x.aborted {
		x.mu.Unlock()
		return nil, errAborted
	}
	ctx, cancel := context.WithCancel(context.Background())
	if x.hasDeadline {
		ctx, cancel = context.WithDeadline(ctx, x.deadline)
	}
	defer cancel()
	x.cancel = cancel
	x.mu.Unlock()
	nc, err = x.c.dial(ctx, "tcp", addr)
	x.mu.Lock()
	x.cancel = nil
	aborted := x.aborted
	x.mu.Unlock()
	if aborted {
		if nc != nil {
			nc.Close()
		}
		return nil, errAborted
	}
	return nc, err
}

func (x *Call) attach(pc *conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.aborted {
		return false
	}
	x.pc = pc
	if x.hasDeadline {
		_ = pc.nc.SetDeadline(x.deadline)
	}
	return true
}

// SetDeadline ends every read and write of the exchange at t, from any
// goroutine: a proxy sets it only for exchanges that outlive a moment,
// sparing the rest a timer.
func (x *Call) SetDeadline(t time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deadline, x.hasDeadline = t, true
	if x.pc != nil {
		_ = x.pc.nc.SetDeadline(t)
	}
}

func (x *Call) isAborted() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.aborted
}

// Abort ends the exchange from any goroutine: a pending write or read
// fails at once and the connection is not reused.
func (x *Call) Abort() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.aborted = true
	if x.cancel != nil {
		x.cancel()
	}
	if x.pc != nil {
		_ = x.pc.nc.SetDeadline(aLongTimeAgo)
	}
}

// writeParts sends head and body, in one write when body is small.
func (pc *conn) writeParts(head, body []byte) (int64, error) {
	if len(body) <= maxInlineBody && len(head)+len(body) <= 2*maxInlineBody {
		bp := heads.Get().(*[]byte)
		b := append(append((*bp)[:0], head...), body...)
		n, err := pc.nc.Write(b)
		*bp = b
		putHead(bp)
		return int64(n), err
	}
	bufs := net.Buffers{head, body}
	return bufs.WriteTo(pc.nc)
}

// readHead reads the final response head (skipping 1xx) into x.
func (x *Call) readHead(pc *conn) error {
	for range 5 {
		status, n, err := x.parseHead(pc.br)
		if err != nil {
			return err
		}
		if status == http.StatusSwitchingProtocols {
			return errors.New("the server switched protocols unasked (101)")
		}
		raw, _ := pc.br.Peek(n)
		if status >= 100 && status < 200 {
			// Dropped, but checked as a final head is: a line read
			// differently here than by another parser would shift where
			// the final response starts.
			if err := checkFields(raw[statusLineLen(raw) : n-2]); err != nil {
				return err
			}
			_, _ = pc.br.Discard(n)
			continue
		}
		// The head's bytes are copied out: body reads reuse the buffer.
		x.Header = append(x.Header[:0], raw[statusLineLen(raw):n-2]...)
		_, _ = pc.br.Discard(n)
		x.Status = status
		return x.framing()
	}
	return errors.New("too many interim (1xx) responses")
}

func statusLineLen(b []byte) int { return bytes.IndexByte(b, '\n') + 1 }

// parseHead waits for a complete head in br and checks its status line;
// it returns the status and the head's length. A head larger than the
// buffer is refused: no engine sends one.
func (x *Call) parseHead(br *bufio.Reader) (status, n int, err error) {
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			n = i + 4
			break
		}
		if len(buf) >= bufSize {
			return 0, 0, fmt.Errorf("response head larger than %d bytes", bufSize)
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return 0, 0, fmt.Errorf("response head larger than %d bytes", bufSize)
			}
			return 0, 0, err
		}
	}
	buf, _ := br.Peek(n)
	// The head holds CRLFCRLF, so a LF is there; a bare one ends no line.
	i := bytes.IndexByte(buf, '\n')
	if i < 1 || buf[i-1] != '\r' {
		return 0, 0, fmt.Errorf("malformed status line %q (not ended by CRLF)", buf[:i])
	}
	line := buf[:i-1]
	proto, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || (string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0") || len(rest) < 3 {
		return 0, 0, fmt.Errorf("malformed status line %q", line)
	}
	code := rest[:3]
	if len(rest) > 3 && rest[3] != ' ' {
		return 0, 0, fmt.Errorf("malformed status line %q", line)
	}
	status, err = strconv.Atoi(string(code))
	if err != nil || status < 100 || code[0] == '+' || code[0] == '-' {
		return 0, 0, fmt.Errorf("malformed status line %q", line)
	}
	x.keep = string(proto) == "HTTP/1.1"
	return status, n, nil
}

// framing reads the body's framing from the header (RFC 9112 §6.3) and
// checks every field line.
func (x *Call) framing() error {
	x.ContentLength = -1
	http10 := !x.keep // parseHead set keep for HTTP/1.1 only
	lengths := 0
	// An empty Transfer-Encoding (nil once trimmed) is still one: no
	// chunked last, so the body runs until close (RFC 9112 §6.3).
	var te []byte
	hasTE := false
	for b := x.Header; len(b) > 0; {
		k, v, rest, err := nextFieldLine(b)
		if err != nil {
			return err
		}
		b = rest
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, ok := h1syntax.ParseLength(v)
			if !ok || (lengths > 0 && n != x.ContentLength) {
				return fmt.Errorf("invalid Content-Length %q", v)
			}
			lengths++
			x.ContentLength = n
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			te, hasTE = v, true
		case bytes.EqualFold(k, []byte("Connection")):
			for f := range bytes.SplitSeq(v, []byte(",")) {
				f = bytes.TrimSpace(f)
				switch {
				case bytes.EqualFold(f, []byte("close")):
					x.keep = false
				case bytes.EqualFold(f, []byte("keep-alive")) && http10:
					x.keep = true
				}
			}
		}
	}
	switch {
	case x.Status == http.StatusNoContent || x.Status == http.StatusNotModified:
		x.ContentLength = 0
	case hasTE:
		last := te
		if i := bytes.LastIndexByte(te, ','); i >= 0 {
			last = bytes.TrimSpace(te[i+1:])
		}
		x.ContentLength = -1
		if bytes.EqualFold(last, []byte("chunked")) {
			x.chunked = true
		} else {
			x.keep = false
		}
		if lengths > 0 || http10 {
			// Both framings, or a transfer coding HTTP/1.0 does not
			// have: the connection cannot be trusted after (RFC 9112
			// §6.1, §6.3).
			x.keep = false
		}
	case lengths == 0:
		x.keep = false // until close
	}
	x.left = x.ContentLength
	return nil
}

// checkFields checks every field line of a head.
func checkFields(b []byte) error {
	for len(b) > 0 {
		_, _, rest, err := nextFieldLine(b)
		if err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// nextFieldLine splits off the first of b's field lines and checks it:
// CRLF-ended, a token for a name right before the colon, a value of
// visible characters, spaces and tabs (RFC 9110 §5.1, §5.5), as net/http
// reads a field. The proxy passes these lines on as they are, so a line
// another parser could read differently (a name with whitespace, a
// control byte) must not get through.
func nextFieldLine(b []byte) (k, v, rest []byte, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, nil, errors.New("malformed response header: bare LF")
	}
	line := b[:i-1]
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(k) == 0 {
		return nil, nil, nil, fmt.Errorf("malformed response header line %q", line)
	}
	for _, c := range k {
		if !h1syntax.IsTokenChar(c) {
			return nil, nil, nil, fmt.Errorf("malformed response header line %q", line)
		}
	}
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, nil, fmt.Errorf("malformed response header line %q", line)
		}
	}
	return k, v, b[i+1:], nil
}

// Read reads the response body; io.EOF at its end.
func (x *Call) Read(p []byte) (int, error) {
	if x.done {
		return 0, io.EOF
	}
	x.mu.Lock()
	pc := x.pc
	x.mu.Unlock()
	if pc == nil {
		return 0, errAborted
	}
	br := pc.br
	var n int
	var err error
	switch {
	case x.chunked:
		if x.body == nil {
			x.body = httputil.NewChunkedReader(br)
		}
		n, err = x.body.Read(p)
		if err == io.EOF {
			err = readTrailer(br)
			if err == nil {
				x.finish(true)
				return n, io.EOF
			}
		}
	case x.left >= 0:
		if int64(len(p)) > x.left {
			p = p[:x.left]
		}
		n, err = br.Read(p)
		x.left -= int64(n)
		if err == nil && x.left == 0 {
			x.finish(true)
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	default:
		n, err = br.Read(p)
		if err == io.EOF {
			x.finish(false)
			return n, io.EOF
		}
	}
	if err != nil {
		x.finish(false)
		if x.isAborted() {
			err = errAborted
		}
	}
	return n, err
}

// readTrailer reads the trailer section after the last chunk, up to its
// blank line; trailers are dropped.
func readTrailer(br *bufio.Reader) error {
	for range 64 {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
	return errors.New("too many trailer fields")
}

// Close ends the exchange: the connection goes back to the pool when its
// response was read whole and it may carry another request.
func (x *Call) Close() {
	if !x.done {
		x.finish(false)
	}
	x.mu.Lock()
	x.pc, x.aborted, x.cancel, x.hasDeadline = nil, false, nil, false
	x.mu.Unlock()
}

func (x *Call) finish(clean bool) {
	x.done = true
	// Detached first: once pooled, the connection is another request's,
	// and a late Abort must not touch it.
	x.mu.Lock()
	pc, aborted, timed := x.pc, x.aborted, x.hasDeadline
	x.pc = nil
	x.mu.Unlock()
	if pc == nil {
		return
	}
	if clean && x.keep && !aborted && pc.br.Buffered() == 0 {
		// Pooled connections carry no deadline.
		if !timed || pc.nc.SetDeadline(time.Time{}) == nil {
			x.c.put(pc)
			return
		}
	}
	pc.nc.Close()
}
