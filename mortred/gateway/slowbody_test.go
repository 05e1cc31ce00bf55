package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A model server that answers before the client has sent its whole body
// (its request deadline cut a client trickling it) ends the exchange: the
// gateway sends that answer at once and closes the connection instead of
// reading the rest at the client's pace.
func TestAnswerBeforeBodyEndsTheExchange(t *testing.T) {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"status":50}`)
	}))
	defer model.Close()
	gw, _, _ := newGateway(t, Upstream{ID: "m", URI: "/m", Addr: strings.TrimPrefix(model.URL, "http://"), Token: modelTok})

	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/models/m/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"images\":[\"", tok)
	// Keep trickling, as a slow client does, until the gateway lets go.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte("A")); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()

	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || string(b) != `{"status":50}` {
		t.Fatalf("answer %d %s; want the model's 400", resp.StatusCode, b)
	}
	if _, err := rd.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after the answer: %v", err)
	}
}
