package edge

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// seen is one request as the recording upstream received it.
type seen struct {
	conn int    // the upstream connection it came on, from 1
	raw  []byte // exactly the bytes of this request: head and body
	head []byte // raw's head, up to and including the empty line
	// req is raw as net/http parses it, body its decoded body; when the
	// bytes do not parse, err says why and raw is what had arrived.
	req  *http.Request
	body []byte
	err  error
}

func (s seen) String() string {
	if s.err != nil {
		return fmt.Sprintf("conn %d: unparsable (%v): %q", s.conn, s.err, clip(s.raw))
	}
	return fmt.Sprintf("conn %d: %q", s.conn, clip(s.raw))
}

func clip(b []byte) []byte {
	if len(b) > 600 {
		return append(b[:600:600], "…"...)
	}
	return b
}

// answerFunc writes the upstream's answer to one request (not a probe);
// it reports whether the connection stays open for another.
type answerFunc func(c net.Conn, br *bufio.Reader, s seen) (keep bool)

// upstream is a raw recording engine or model server: a loopback TCP
// listener that keeps every byte it reads, splits the bytes into requests
// exactly where net/http's parser ends each one, and answers each with a
// fixed valid response (or what answer says). A router's own requests —
// its probe (GET /v1/models, answered with the model list) and its metrics
// scrape (GET /metrics, answered with an empty exposition) — are kept
// apart, so the requests a case sent are the only ones in Requests.
type upstream struct {
	srv    *testproc.ConnServer
	models []string
	answer atomic.Pointer[answerFunc]

	mu     sync.Mutex
	reqs   []seen
	probes int
	conns  int
	// arrived is closed and replaced on every request recorded.
	arrived chan struct{}
}

// okBody is the fixed answer: valid JSON for a router's client (an OpenAI
// chat completion) and for a gateway's.
const okBody = `{"id":"edge-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`

// writeOK is the default answer: 200 with a Content-Length body, keep-alive.
func writeOK(c net.Conn, _ *bufio.Reader, _ seen) bool {
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(okBody), okBody)
	return err == nil
}

func newUpstream(t testing.TB, models ...string) *upstream {
	t.Helper()
	u := &upstream{models: models, arrived: make(chan struct{})}
	u.setAnswer(writeOK)
	u.srv = testproc.NewConnServer(t, u.serve)
	return u
}

// Addr is the upstream's host:port.
func (u *upstream) Addr() string { return u.srv.Addr() }

func (u *upstream) setAnswer(f answerFunc) { u.answer.Store(&f) }

// recordingReader keeps every byte read through it.
type recordingReader struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func (u *upstream) serve(c net.Conn, _ *bufio.Reader) {
	u.mu.Lock()
	u.conns++
	conn := u.conns
	u.mu.Unlock()
	rr := &recordingReader{r: c}
	br := bufio.NewReader(rr)
	for {
		start := rr.buf.Len() - br.Buffered()
		req, err := http.ReadRequest(br)
		if err != nil {
			u.recordRest(conn, rr.buf.Bytes()[start:], c, br, err)
			return
		}
		probe := req.Method == http.MethodGet && (req.URL.Path == "/v1/models" || req.URL.Path == "/metrics")
		// The request is listed as soon as its head is in, so it keeps
		// its place among the others while its body arrives.
		i := -1
		if !probe {
			i = u.record(seen{conn: conn, err: errBodyPending})
		}
		body, err := io.ReadAll(req.Body)
		end := rr.buf.Len() - br.Buffered()
		if err != nil {
			if i >= 0 {
				u.update(i, seen{conn: conn, raw: bytes.Clone(rr.buf.Bytes()[start:end]), err: err})
			}
			return
		}
		raw := bytes.Clone(rr.buf.Bytes()[start:end])
		s := seen{conn: conn, raw: raw, req: req, body: body}
		if i := bytes.Index(raw, []byte("\r\n\r\n")); i >= 0 {
			s.head = raw[:i+4]
		} else if i := bytes.Index(raw, []byte("\n\n")); i >= 0 {
			s.head = raw[:i+2]
		}
		if probe {
			u.mu.Lock()
			u.probes++
			u.mu.Unlock()
			if req.URL.Path == "/metrics" {
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 0\r\n\r\n"); err != nil {
					return
				}
			} else if !u.writeModels(c) {
				return
			}
			continue
		}
		u.update(i, s)
		if !(*u.answer.Load())(c, br, s) {
			return
		}
	}
}

// errBodyPending marks a request whose head has arrived and whose body
// has not (yet).
var errBodyPending = errors.New("body still arriving")

// recordRest keeps whatever arrived after the last whole request and
// did not parse as one: a smuggled tail must not vanish.
func (u *upstream) recordRest(conn int, rest []byte, c net.Conn, br *bufio.Reader, err error) {
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.Copy(io.Discard, br)
	if len(rest) > 0 && !(err == io.EOF && len(bytes.TrimSpace(rest)) == 0) {
		u.record(seen{conn: conn, raw: bytes.Clone(rest), err: err})
	}
}

func (u *upstream) writeModels(c net.Conn) bool {
	var data []string
	for _, m := range u.models {
		data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"edge"}`, m))
	}
	b := `{"object":"list","data":[` + strings.Join(data, ",") + `]}`
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	return err == nil
}

// record lists s and returns its index.
func (u *upstream) record(s seen) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, s)
	u.wake()
	return len(u.reqs) - 1
}

// update replaces the request at index i.
func (u *upstream) update(i int, s seen) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs[i] = s
	u.wake()
}

func (u *upstream) wake() {
	close(u.arrived)
	u.arrived = make(chan struct{})
}

// mark is how many requests have been recorded so far.
func (u *upstream) mark() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

// since returns the requests recorded after mark.
func (u *upstream) since(mark int) []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs[mark:]...)
}

// waitFor waits up to timeout for a request recorded after mark that
// satisfies ok, and returns everything recorded after mark up to and
// including it (found false, and everything, at the timeout).
func (u *upstream) waitFor(mark int, timeout time.Duration, ok func(seen) bool) (got []seen, found bool) {
	deadline := time.After(timeout)
	for {
		u.mu.Lock()
		for i := mark; i < len(u.reqs); i++ {
			if ok(u.reqs[i]) {
				got = append([]seen(nil), u.reqs[mark:i+1]...)
				u.mu.Unlock()
				return got, true
			}
		}
		ch := u.arrived
		u.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return u.since(mark), false
		}
	}
}

// field is one header line of a raw head.
type field struct{ name, value string }

// headFields splits a raw head into its request line and fields, and
// reports every way its syntax is not the plain form a proxy must emit:
// each line ends in CRLF, no bare CR or LF, no obs-fold, no control bytes
// but HTAB in values, names are tokens, no space before the colon.
func headFields(head []byte) (line string, fields []field, problems []string) {
	s := string(head)
	if !strings.HasSuffix(s, "\r\n\r\n") {
		problems = append(problems, "head does not end in CRLF CRLF")
	}
	lines := strings.Split(strings.TrimSuffix(s, "\r\n\r\n"), "\r\n")
	line = lines[0]
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			problems = append(problems, fmt.Sprintf("bare CR or LF in %q", l))
		}
	}
	for _, l := range lines[1:] {
		if l == "" || l[0] == ' ' || l[0] == '\t' {
			problems = append(problems, fmt.Sprintf("empty or folded line %q", l))
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.ContainsFunc(name, func(r rune) bool { return !isTokenChar(r) }) {
			problems = append(problems, fmt.Sprintf("bad field name in %q", l))
			continue
		}
		if strings.ContainsFunc(value, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
			problems = append(problems, fmt.Sprintf("control byte in %q", l))
		}
		fields = append(fields, field{http.CanonicalHeaderKey(name), strings.Trim(value, " \t")})
	}
	return line, fields, problems
}

func isTokenChar(r rune) bool {
	return r < 0x7f && r > 0x20 && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}

// values is every value of the named field (canonical name).
func values(fields []field, name string) []string {
	var out []string
	for _, f := range fields {
		if f.name == name {
			out = append(out, f.value)
		}
	}
	return out
}
