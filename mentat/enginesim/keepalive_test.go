package enginesim

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// An idle keep-alive connection is closed by the engine after
// --keepalive-timeout, as uvicorn does, and not before.
func TestKeepAliveIdleClose(t *testing.T) {
	const idle = 300 * time.Millisecond
	te := startEngine(t, false, func(c *Config) { c.KeepAliveTimeout = idle })
	conn, err := net.Dial("tcp", te.url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := 0; i < 2; i++ { // the connection is reused while busy
		if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.Close {
			t.Fatalf("request %d: %d, close=%v", i, res.StatusCode, res.Close)
		}
	}
	idleSince := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = br.ReadByte()
	closedAfter := time.Since(idleSince)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("want the server to close the idle connection (EOF), got %v after %v", err, closedAfter)
	}
	if closedAfter < idle*8/10 {
		t.Errorf("closed after %v, before the %v keep-alive timeout", closedAfter, idle)
	}
}
