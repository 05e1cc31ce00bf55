package app

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An MCP session's GET stream, which lasts until its client leaves, ends
// when the stop closes the listener: it does not hold the stop for
// SERVE_SHUTDOWN_S.
func TestStopEndsMCPStreams(t *testing.T) {
	r := runApp(t, map[string]string{"SERVE_DRAIN_S": "0.05", "SERVE_SHUTDOWN_S": "20"})
	base := r.base

	mcp := func(method, body, session string) *http.Response {
		t.Helper()
		return mcpDo(t, base, method, session, "2025-06-18", body)
	}
	resp := mcp("POST", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, "")
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, session)
	}
	resp = mcp("POST", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session)
	resp.Body.Close()
	get := mcp("GET", "", session)
	defer get.Body.Close()
	if get.StatusCode != 200 || !strings.HasPrefix(get.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /mcp: %d %s", get.StatusCode, get.Header.Get("Content-Type"))
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		br := bufio.NewReader(get.Body)
		for {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
		t.Fatal("the GET stream ended before the stop")
	case <-time.After(200 * time.Millisecond):
	}

	stopped := time.Now()
	r.stop()
	select {
	case <-r.finished:
		if r.err != nil {
			t.Fatalf("Run: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return: the GET stream held the stop")
	}
	<-ended
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("the stop took %v", d)
	}
}
