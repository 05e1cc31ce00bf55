package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A client that trickles its body is cut at the request deadline
// (model_run_timeout): 400 with the reason, then the connection closes.
// The deadline is lifted once a body is in, so a request sent at once and
// answered inside the deadline on the same connection still works.
func TestSlowBodyCutAtRequestDeadline(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"model_run_timeout": "300"}})
	conn, err := net.Dial("tcp", f.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"images\":[\"", inferURI, token)
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	status, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 400") {
		t.Fatalf("slow body answered %q %v after %s; want 400", status, err, time.Since(start))
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("connection not closed after the answer: %v", err)
	}
	if !strings.Contains(string(rest), "model_run_timeout") {
		t.Fatalf("answer does not name the deadline: %s", rest)
	}

	// Keep-alive: a whole body sent at once, then a second request on the
	// same connection after the first one's deadline has passed.
	c2, err := net.Dial("tcp", f.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	body := images(darkPNG)
	r2 := bufio.NewReader(c2)
	send := func() (int, error) {
		fmt.Fprintf(c2, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", inferURI, token, len(body), body)
		_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(r2, nil)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	if code, err := send(); code != http.StatusOK || err != nil {
		t.Fatalf("first request: %d %v", code, err)
	}
	time.Sleep(400 * time.Millisecond)
	if code, err := send(); code != http.StatusOK || err != nil {
		t.Fatalf("second request on the kept-alive connection: %d %v", code, err)
	}
}
