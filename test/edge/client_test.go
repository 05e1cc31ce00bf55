package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// The client-side limits under test, short so the cases stay quick: the
// router's SERVE_READ_HEADER_TIMEOUT_S, SERVE_BODY_TIMEOUT_S and
// SERVE_IDLE_TIMEOUT_S, the gateway's read_header_timeout_ms,
// body_timeout_ms and idle_timeout_ms.
const (
	headTimeout = 3 * time.Second
	bodyTimeout = 3 * time.Second
	idleTimeout = 3 * time.Second
	// cutSlack is how late past its limit a cut may come on a loaded
	// machine; the defects this catches were many seconds late (a slow
	// head cut at 18.5 s for a 10 s limit) or never.
	cutSlack = 5 * time.Second
	// connCap is SERVE_MAX_CONNECTIONS and the gateway's max_connections
	// in the cap test.
	connCap = 4
)

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// routerLimitsEnv and gatewayLimits set the short limits above.
var (
	routerLimitsEnv = []string{"SERVE_READ_HEADER_TIMEOUT_S=" + secs(headTimeout), "SERVE_BODY_TIMEOUT_S=" + secs(bodyTimeout),
		"SERVE_IDLE_TIMEOUT_S=" + secs(idleTimeout), "SERVING_TIMEOUT_S=" + servingTimeout}
	gatewayLimits = map[string]any{"read_header_timeout_ms": headTimeout.Milliseconds(), "body_timeout_ms": bodyTimeout.Milliseconds(),
		"idle_timeout_ms": idleTimeout.Milliseconds()}
)

// rawRequest is a whole request for model carrying marker, framed by
// Content-Length or chunked.
func rawRequest(f *frontend, model, marker string, chunked bool) string {
	b := f.body(model, marker)
	head := "POST " + f.target(model) + " HTTP/1.1\r\nHost: " + f.addr + "\r\n" + f.auth + "Content-Type: application/json\r\n"
	if chunked {
		return head + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(b), b)
	}
	return head + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(b), b)
}

// watchClose reads c until the frontend closes (or resets) it, and
// reports when, and what it read before: an answer is not enough, the
// connection itself must be let go.
func watchClose(c net.Conn) <-chan closed {
	ch := make(chan closed, 1)
	go func() {
		var got []byte
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				ch <- closed{time.Now(), got, err}
				return
			}
		}
	}()
	return ch
}

type closed struct {
	at   time.Time
	read []byte
	err  error
}

// checkCut fails unless the connection was closed between limit and
// limit+cutSlack after from, with no 2xx answer before.
func checkCut(t *testing.T, what string, from time.Time, limit time.Duration, cl closed) {
	t.Helper()
	took := cl.at.Sub(from)
	t.Logf("%s: closed after %s (limit %s): %v, read %q", what, took.Round(time.Millisecond), limit, cl.err, clip(cl.read))
	if took < limit-100*time.Millisecond {
		t.Errorf("%s: closed after %s, before its limit %s", what, took, limit)
	}
	if took > limit+cutSlack {
		t.Errorf("%s: closed only after %s; the limit is %s", what, took, limit)
	}
	if strings.HasPrefix(string(cl.read), "HTTP/1.1 2") {
		t.Errorf("%s: answered %q", what, clip(cl.read))
	}
}

// neverCut fails the test for a connection still open at the end of its
// bounded run, saying what the frontend had written on it.
func neverCut(t *testing.T, c net.Conn, cut <-chan closed, what string, start time.Time, limit time.Duration) {
	t.Helper()
	c.Close()
	cl := <-cut
	t.Fatalf("%s: the connection was still open %s after the start (limit %s); the frontend had written %q", what, time.Since(start).Round(time.Millisecond), limit, clip(cl.read))
}

// slowHead sends a 5 KiB head at once, then one more field every 100 ms
// (never the end of the head), for at most headTimeout+cutSlack+2 s.
func slowHead(t *testing.T, f *frontend, model string) {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	cut := watchClose(c)
	head := "POST " + f.target(model) + " HTTP/1.1\r\nHost: " + f.addr + "\r\n" + f.auth
	for i := 0; len(head) < 5<<10; i++ {
		head += fmt.Sprintf("X-Pad-%d: %s\r\n", i, strings.Repeat("p", 100))
	}
	_, _ = io.WriteString(c, head)
	stop := time.After(headTimeout + cutSlack + 2*time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case cl := <-cut:
			checkCut(t, "slow head", start, headTimeout, cl)
			return
		case <-stop:
			neverCut(t, c, cut, "slow head", start, headTimeout)
		case <-tick.C:
			_, _ = fmt.Fprintf(c, "X-Slow-%d: s\r\n", i)
		}
	}
}

// slowBody sends a whole head and the start of its body, then (trickle)
// a byte every 200 ms, never idle and never done, or nothing more. The
// frontend must close the connection at its body limit (an answer alone
// leaves the connection to the client) and no complete request may
// reach the upstream.
func slowBody(t *testing.T, f *frontend, up *upstream, model string, trickle bool) {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mark := up.mark()
	body := f.body(model, "slow-body")
	body = body[:len(body)-1] + strings.Repeat(" ", 200) + "}"
	head := "POST " + f.target(model) + " HTTP/1.1\r\nHost: " + f.addr + "\r\n" + f.auth +
		fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	cut := watchClose(c)
	_, _ = io.WriteString(c, head+body[:10])
	start := time.Now()
	if trickle {
		defer testproc.Trickle(c, []byte(body[10:len(body)-1]), 200*time.Millisecond)() // never the last byte
	}
	select {
	case cl := <-cut:
		checkCut(t, "slow body", start, bodyTimeout, cl)
		for _, s := range up.since(mark) {
			if hasMarker("slow-body")(s) {
				t.Errorf("the slow body reached the upstream as a whole request: %s", s)
			}
		}
	case <-time.After(bodyTimeout + cutSlack + 2*time.Second):
		neverCut(t, c, cut, "slow body", start, bodyTimeout)
	}
}

// idleKeepAlive serves one request on a keep-alive connection and checks
// that the frontend closes the connection once it has been idle for
// idleTimeout.
func idleKeepAlive(t *testing.T, f *frontend, model string) {
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(idleTimeout + cutSlack + 10*time.Second))
	if _, err := io.WriteString(c, rawRequest(f, model, "idle", false)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("keep-alive request: %d close=%v", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	n, err := br.Read(make([]byte, 1))
	checkCut(t, "idle keep-alive connection", start, idleTimeout, closed{time.Now(), nil, fmt.Errorf("read %d: %v", n, err)})
}

// halfClose sends a whole request and shuts down its write side. The
// client may get the real answer (the upstream then has the request) or
// an abort, never a 2xx for a request the upstream did not see.
func halfClose(t *testing.T, f *frontend, up *upstream, model string) {
	for _, chunked := range []bool{false, true} {
		m := fmt.Sprintf("half-close-%v", chunked)
		mark := up.mark()
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, rawRequest(f, model, m, chunked)); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Logf("chunked %v: aborted (%v)", chunked, err)
			c.Close()
			continue
		}
		b, berr := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		t.Logf("chunked %v: %d %q %v", chunked, resp.StatusCode, clip(b), berr)
		if resp.StatusCode < 200 || resp.StatusCode >= 300 {
			continue
		}
		if berr != nil || string(b) != okBody {
			t.Errorf("chunked %v: %d with body %q (%v), not the upstream's answer", chunked, resp.StatusCode, clip(b), berr)
		}
		got, found := up.waitFor(mark, 10*time.Second, hasMarker(m))
		if !found {
			t.Errorf("chunked %v: the client got %d but the upstream never received the request: %v", chunked, resp.StatusCode, got)
		}
	}
}

// checkConnCap holds connCap keep-alive connections open and checks that
// one more is not served until one of them closes.
func checkConnCap(t *testing.T, f *frontend, model string) {
	// The readiness checks' pooled connections would count.
	httpClient.CloseIdleConnections()
	held := make([]net.Conn, 0, connCap)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	serve := func(c net.Conn, m string, wait time.Duration) (*http.Response, error) {
		_ = c.SetDeadline(time.Now().Add(wait))
		if _, err := io.WriteString(c, rawRequest(f, model, m, false)); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	// A connection closed just before may still hold its slot for a
	// moment, so each held one is given time to be accepted.
	for i := range connCap {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if resp, err := serve(c, fmt.Sprintf("held-%d", i), 15*time.Second); err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection %d: %v %v", i, resp, err)
		}
	}
	extra, err := net.Dial("tcp", f.addr) // the kernel accepts it into the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if resp, err := serve(extra, "over-cap", time.Second); err == nil {
		t.Fatalf("connection %d was served (%d) while %d were held; the cap is %d", connCap+1, resp.StatusCode, connCap, connCap)
	}
	held[0].Close()
	_ = extra.SetDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("connection %d once one of the held ones closed: %v %v", connCap+1, resp, err)
	}
	resp.Body.Close()
}

// TestRouterClients: the client-side limits of mentatd-serve.
func TestRouterClients(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "edge-clients")
	f := startRouter(t, map[string]*upstream{"edge-clients": up}, routerLimitsEnv...)
	t.Run("slow head cut at the head timeout", func(t *testing.T) { t.Parallel(); slowHead(t, f, "edge-clients") })
	t.Run("slow body cut at the body timeout", func(t *testing.T) { t.Parallel(); slowBody(t, f, up, "edge-clients", true) })
	t.Run("stalled body cut at the body timeout", func(t *testing.T) { t.Parallel(); slowBody(t, f, up, "edge-clients", false) })
	t.Run("idle keep-alive closed at the idle timeout", func(t *testing.T) { t.Parallel(); idleKeepAlive(t, f, "edge-clients") })
	t.Run("half-close never gets a fabricated 2xx", func(t *testing.T) { t.Parallel(); halfClose(t, f, up, "edge-clients") })
}

// TestGatewayClients: the client-side limits of mortred-gateway.
func TestGatewayClients(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	f := startGateway(t, map[string]*upstream{"CLIENTS": up}, gatewayLimits)
	t.Run("slow head cut at the head timeout", func(t *testing.T) { t.Parallel(); slowHead(t, f, "CLIENTS") })
	t.Run("slow body cut at the body timeout", func(t *testing.T) { t.Parallel(); slowBody(t, f, up, "CLIENTS", true) })
	t.Run("stalled body cut at the body timeout", func(t *testing.T) { t.Parallel(); slowBody(t, f, up, "CLIENTS", false) })
	t.Run("idle keep-alive closed at the idle timeout", func(t *testing.T) { t.Parallel(); idleKeepAlive(t, f, "CLIENTS") })
	t.Run("half-close never gets a fabricated 2xx", func(t *testing.T) { t.Parallel(); halfClose(t, f, up, "CLIENTS") })
}

// TestRouterConnectionCap: SERVE_MAX_CONNECTIONS holds.
func TestRouterConnectionCap(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "edge-cap")
	f := startRouter(t, map[string]*upstream{"edge-cap": up}, "SERVE_MAX_CONNECTIONS="+strconv.Itoa(connCap), "SERVE_IDLE_TIMEOUT_S=60")
	checkConnCap(t, f, "edge-cap")
}

// TestGatewayConnectionCap: [gateway] max_connections holds.
func TestGatewayConnectionCap(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	f := startGateway(t, map[string]*upstream{"CAP": up}, map[string]any{"max_connections": connCap, "idle_timeout_ms": 60000})
	checkConnCap(t, f, "CAP")
}
