package edge

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// badClient is the client of the bad-upstream cases: no compression of its
// own, so a body arrives as the frontend sent it, and a deadline far
// below the router's SERVING_TIMEOUT_S, so a hung exchange fails the test
// instead of waiting for the frontend's timeout.
var badClient = &http.Client{
	Timeout:   20 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableCompression: true, DisableKeepAlives: true},
}

// servingTimeout is the router's SERVING_TIMEOUT_S in these tests: far
// past badClient's deadline.
const servingTimeout = "120"

// badAnswer is one way an upstream answers badly, and what the client may
// then get.
type badAnswer struct {
	name   string
	answer answerFunc
	// check judges the client's answer (err is badClient's error).
	check func(code int, h http.Header, body []byte, err error) error
	// once: the request must reach the upstream exactly once (never
	// re-sent after its bytes were written).
	once bool
	// warm sends a good request first, so the bad one may take the
	// pooled connection it left.
	warm bool
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = io.WriteString(w, s)
	_ = w.Close()
	return b.Bytes()
}

// notTwoXX accepts any failure the client can see: an error status, or
// the connection cut.
func notTwoXX(code int, _ http.Header, body []byte, err error) error {
	if err == nil && code >= 200 && code < 300 {
		return fmt.Errorf("client got %d %q for an upstream that never answered validly", code, clip(body))
	}
	if err != nil && strings.Contains(err.Error(), "Client.Timeout") {
		return fmt.Errorf("the exchange hung: %v", err)
	}
	return nil
}

// status502 wants the frontend's own 502.
func status502(code int, _ http.Header, body []byte, err error) error {
	if err != nil || code != http.StatusBadGateway {
		return fmt.Errorf("client got %d %q %v; want 502", code, clip(body), err)
	}
	return nil
}

var badAnswers = []badAnswer{
	{name: "bare-LF head, connection kept open", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: %d\n\n%s", len(okBody), okBody)
		return err == nil // and wait on the connection for the next request
	}, check: func(code int, h http.Header, body []byte, err error) error {
		// net/http's Transport reads a bare-LF head; a refusal (502) is
		// also sound. A hang until SERVING_TIMEOUT_S is not.
		if err == nil && (code == http.StatusBadGateway || (code == 200 && string(body) == okBody)) {
			return nil
		}
		return fmt.Errorf("client got %d %q %v; want the answer or 502, promptly", code, clip(body), err)
	}, once: true},
	{name: "Transfer-Encoding gzip, chunked", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		z := gzipped(okBody)
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(z), z)
		return err == nil
	}, check: func(code int, h http.Header, body []byte, err error) error {
		if err != nil || code == http.StatusBadGateway {
			return notTwoXX(code, h, body, err)
		}
		if string(body) == okBody {
			return nil // decoded
		}
		if strings.EqualFold(h.Get("Content-Encoding"), "gzip") && bytes.Equal(body, gzipped(okBody)) {
			return nil // labelled
		}
		return fmt.Errorf("client got %d Content-Encoding %q body %q: gzip bytes passed off as identity", code, h.Get("Content-Encoding"), clip(body))
	}, once: true},
	{name: "closes after reading the request", answer: func(net.Conn, *bufio.Reader, seen) bool { return false },
		check: status502, once: true},
	{name: "malformed status line", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 2OO OK\r\nContent-Length: %d\r\n\r\n%s", len(okBody), okBody)
		return false
	}, check: status502, once: true},
	{name: "not HTTP at all", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
		return false
	}, check: status502, once: true},
	{name: "conflicting Content-Length", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: 3\r\n\r\n%s", len(okBody), okBody)
		return false
	}, check: status502, once: true},
	{name: "Content-Length and chunked", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(okBody), okBody)
		return err == nil
	}, check: func(code int, h http.Header, body []byte, err error) error {
		if err == nil && code == 200 && string(body) == okBody {
			return nil // chunked wins, as RFC 9112 §6.3 says
		}
		return notTwoXX(code, h, body, err)
	}, once: true},
	{name: "second request on a kept connection: read, then closed", answer: closeUnlessWarm,
		check: status502, once: true, warm: true},
	{name: "extra answer after the warm-up's body (desync)", answer: func(c net.Conn, br *bufio.Reader, s seen) bool {
		if !hasMarker("warm")(s) {
			return writeOK(c, br, s)
		}
		// The warm-up's answer, then an answer nobody asked for, which
		// a pooled connection must not hand to the next request.
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"+
			"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n\"poison\"", len(okBody), okBody)
		return err == nil
	}, check: func(code int, h http.Header, body []byte, err error) error {
		if err != nil || code != 200 || string(body) != okBody {
			return fmt.Errorf("client got %d %q %v; want its own answer, not the one queued on the pooled connection", code, clip(body), err)
		}
		return nil
	}, once: true, warm: true},
	{name: "hop-by-hop response headers", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive, X-Up-Named\r\nX-Up-Named: up-secret\r\n"+
			"Keep-Alive: timeout=77\r\nProxy-Connection: keep-alive\r\nUpgrade: up-proto\r\nTrailer: X-Up-Trailer\r\nX-Up-Kept: kept\r\nContent-Length: %d\r\n\r\n%s", len(okBody), okBody)
		return err == nil
	}, check: func(code int, h http.Header, body []byte, err error) error {
		if err != nil || code != 200 || string(body) != okBody {
			return fmt.Errorf("client got %d %q %v; want the upstream's answer", code, clip(body), err)
		}
		if h.Get("X-Up-Kept") != "kept" {
			return fmt.Errorf("an end-to-end header was dropped: %v", h)
		}
		for _, k := range []string{"X-Up-Named", "Keep-Alive", "Proxy-Connection", "Upgrade", "Trailer"} {
			if v, ok := h[k]; ok {
				return fmt.Errorf("hop-by-hop response header %s: %q reached the client", k, v)
			}
		}
		if v := h.Values("Connection"); len(v) > 0 && !(len(v) == 1 && v[0] == "close") {
			return fmt.Errorf("the upstream's Connection %q reached the client", v)
		}
		return nil
	}, once: true},
	{name: "100 Continue before the answer", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, err := fmt.Fprintf(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(okBody), okBody)
		return err == nil
	}, check: func(code int, h http.Header, body []byte, err error) error {
		if err != nil || code != 200 || string(body) != okBody {
			return fmt.Errorf("client got %d %q %v; want the final answer", code, clip(body), err)
		}
		return nil
	}, once: true},
	{name: "101 Switching Protocols to a POST", answer: func(c net.Conn, _ *bufio.Reader, _ seen) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\nraw bytes of another protocol")
		return false
	}, check: status502, once: true},
}

// closeUnlessWarm answers the warm-up request and closes the connection
// after reading any other: a pooled connection that dies with the request
// written, which must not be re-sent.
func closeUnlessWarm(c net.Conn, br *bufio.Reader, s seen) bool {
	if hasMarker("warm")(s) {
		return writeOK(c, br, s)
	}
	return false
}

// runBadAnswers sends one request for each bad answer (each its own
// model on its own upstream) and checks the client's answer and that the
// upstream saw the request exactly once.
func runBadAnswers(t *testing.T, f *frontend, ups map[string]*upstream, model func(i int) string) {
	for i, b := range badAnswers {
		t.Run(b.name, func(t *testing.T) {
			up := ups[model(i)]
			mark := up.mark()
			if b.warm {
				// Pool a connection to the upstream first.
				if code, err := f.post(model(i), "warm"); err != nil || code != 200 {
					t.Fatalf("warm-up request: %d %v", code, err)
				}
			}
			m := fmt.Sprintf("bad-%d", i)
			req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+f.target(model(i)), strings.NewReader(f.body(model(i), m)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if name, v, ok := strings.Cut(strings.TrimSuffix(f.auth, "\r\n"), ": "); ok {
				req.Header.Set(name, v)
			}
			code, h, body, err := 0, http.Header(nil), []byte(nil), error(nil)
			resp, err := badClient.Do(req)
			if err == nil {
				code, h = resp.StatusCode, resp.Header
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			t.Logf("client: %d %v %q %v", code, h, clip(body), err)
			if err := b.check(code, h, body, err); err != nil {
				t.Error(err)
			}
			if b.once {
				n := 0
				for _, s := range up.since(mark) {
					if hasMarker(m)(s) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("the upstream received the request %d times; want exactly once: %v", n, up.since(mark))
				}
				if got := up.since(mark); b.warm && len(got) == 2 {
					// Which path ran: the pooled connection (the case's
					// point) or a fresh one (the frontend dropped it first).
					t.Logf("warm-up on upstream connection %d, the request on %d", got[0].conn, got[1].conn)
				}
			}
		})
	}
}

// badModels starts one upstream per bad answer.
func badModels(t *testing.T, name func(int) string) map[string]*upstream {
	ups := map[string]*upstream{}
	for i, b := range badAnswers {
		u := newUpstream(t, name(i))
		u.setAnswer(b.answer)
		ups[name(i)] = u
	}
	return ups
}

// TestRouterBadUpstreams: engines that answer badly get a prompt error or
// a faithful relay, never a hang, gzip bytes as identity, a 2xx for work
// not done, or a re-sent request.
func TestRouterBadUpstreams(t *testing.T) {
	t.Parallel()
	name := func(i int) string { return fmt.Sprintf("edge-bad-%d", i) }
	ups := badModels(t, name)
	f := startRouter(t, ups, "SERVING_TIMEOUT_S="+servingTimeout)
	runBadAnswers(t, f, ups, name)
}

// TestGatewayBadUpstreams is TestRouterBadUpstreams for model servers
// behind the gateway.
func TestGatewayBadUpstreams(t *testing.T) {
	t.Parallel()
	name := func(i int) string { return fmt.Sprintf("BAD%d", i) }
	ups := badModels(t, name)
	f := startGateway(t, ups, nil)
	runBadAnswers(t, f, ups, name)
}

// hugeHead answers with a 64 MiB response head, written until the reader
// hangs up.
func hugeHead(c net.Conn, _ *bufio.Reader, _ seen) bool {
	_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Huge: ")
	chunk := bytes.Repeat([]byte("h"), 1<<20)
	for range 64 {
		if _, err := c.Write(chunk); err != nil {
			return false
		}
	}
	_, _ = io.WriteString(c, "\r\n\r\n")
	return false
}

// checkHugeHead sends one request to model (whose upstream answers with
// hugeHead) and checks for a 502 and for the frontend's resident memory
// not growing by anything near the head's size.
func checkHugeHead(t *testing.T, f *frontend, model string) {
	for range 3 { // warm up: pools and buffers the normal path allocates
		if code, err := f.post(model+"-ok", "warm"); err != nil || code != 200 {
			t.Fatalf("warm-up request: %d %v", code, err)
		}
	}
	before, err := testproc.RSSKiB(f.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	// Both framings of the client's body: on main a chunked one took
	// another path through the frontend than a Content-Length one.
	for _, chunked := range []bool{false, true} {
		req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+f.target(model), strings.NewReader(f.body(model, "huge")))
		if err != nil {
			t.Fatal(err)
		}
		if chunked {
			req.Body = io.NopCloser(strings.NewReader(f.body(model, "huge"))) // hides the length
			req.ContentLength = -1
		}
		req.Header.Set("Content-Type", "application/json")
		if name, v, ok := strings.Cut(strings.TrimSuffix(f.auth, "\r\n"), ": "); ok {
			req.Header.Set(name, v)
		}
		resp, err := badClient.Do(req)
		if err != nil {
			t.Errorf("request (chunked %v) to an upstream with a 64 MiB head: %v; want 502", chunked, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s, chunked %v: %d %q", f.name, chunked, resp.StatusCode, clip(body))
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("chunked %v: client got %d %q (%d header bytes); want 502", chunked, resp.StatusCode, clip(body), len(fmt.Sprint(resp.Header)))
		}
	}
	after, err := testproc.RSSKiB(f.proc.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s RSS %d KiB → %d KiB", f.name, before, after)
	if after-before > 32<<10 {
		t.Errorf("%s RSS grew by %d KiB on a 64 MiB response head; the head must be cut at a limit, not buffered", f.name, after-before)
	}
}

// TestRouterHugeResponseHead: a 64 MiB response head is refused (502)
// without being buffered.
func TestRouterHugeResponseHead(t *testing.T) {
	t.Parallel()
	huge, good := newUpstream(t, "edge-huge"), newUpstream(t, "edge-huge-ok")
	huge.setAnswer(hugeHead)
	f := startRouter(t, map[string]*upstream{"edge-huge": huge, "edge-huge-ok": good}, "SERVING_TIMEOUT_S="+servingTimeout)
	checkHugeHead(t, f, "edge-huge")
}

// TestGatewayHugeResponseHead is TestRouterHugeResponseHead for the
// gateway.
func TestGatewayHugeResponseHead(t *testing.T) {
	t.Parallel()
	huge, good := newUpstream(t), newUpstream(t)
	huge.setAnswer(hugeHead)
	f := startGateway(t, map[string]*upstream{"HUGE": huge, "HUGE-ok": good}, nil)
	checkHugeHead(t, f, "HUGE")
}
