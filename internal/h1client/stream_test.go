package h1client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamedBody: a streamed body arrives whole with its length, and
// the connection is reused after it.
func TestStreamedBody(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n")
		if r.ContentLength == int64(len(body)) && body == strings.Repeat("b", len(body)) {
			io.WriteString(w, "y")
		} else {
			io.WriteString(w, "n")
		}
		return true
	})
	c := newClient(t, Options{})
	for _, n := range []int{1, 100 << 10} {
		body := strings.Repeat("b", n)
		_, got := do(t, c, &Request{Target: srvURL(t, srv, "/"), BodyReader: strings.NewReader(body), ContentLength: int64(n)})
		if got != "y" {
			t.Fatalf("%d-byte streamed body not received whole", n)
		}
	}
	if conns := srv.Conns(); conns != 1 {
		t.Fatalf("two streamed requests used %d connections, want 1", conns)
	}
}

// TestStreamedBodyEarlyAnswer: a server answering before the body ends is
// heard at once, while the body still blocks; the body's reader is left
// to its owner to end.
func TestStreamedBodyEarlyAnswer(t *testing.T) {
	early := newEarlyServer(t)
	pr, pw := io.Pipe()
	c := newClient(t, Options{})
	resp, err := c.RoundTrip(context.Background(), &Request{Target: mustURL(t, "http://"+early+"/"), BodyReader: pr, ContentLength: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusBadRequest || string(b) != "early" {
		t.Fatalf("answer %d %q %v, want the early 400", resp.StatusCode, b, err)
	}
	pw.CloseWithError(errors.New("abandoned"))
}

// TestStreamedBodyReadFailure: a body that fails before the server
// answers fails the request with the body's error.
func TestStreamedBodyReadFailure(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		return false // a short body gets no answer, only a close
	})
	c := newClient(t, Options{})
	cause := errors.New("client went away")
	body := io.MultiReader(strings.NewReader("part"), errReader{cause})
	_, err := c.RoundTrip(context.Background(), &Request{Target: srvURL(t, srv, "/"), BodyReader: body, ContentLength: 100})
	if !errors.Is(err, cause) {
		t.Fatalf("failed body: %v, want its cause", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestResponseHeaderTimeout: a server that never answers fails the
// request with ErrResponseHeaderTimeout, and a slow body after the header
// is not cut by it.
func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		if r.URL.Path == "/slow-body" {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no")
			w.Flush()
			time.Sleep(300 * time.Millisecond)
			io.WriteString(w, "k")
			return true
		}
		<-release
		return false
	})
	defer close(release)
	c := newClient(t, Options{ResponseHeaderTimeout: 100 * time.Millisecond})
	if _, err := c.RoundTrip(context.Background(), &Request{Target: srvURL(t, srv, "/")}); !errors.Is(err, ErrResponseHeaderTimeout) {
		t.Fatalf("no answer: %v, want ErrResponseHeaderTimeout", err)
	}
	if _, got := do(t, c, &Request{Target: srvURL(t, srv, "/slow-body")}); got != "ok" {
		t.Fatalf("slow body %q", got)
	}
}

// newEarlyServer answers 400 "early" with Connection: close as soon as a
// request head is in, without reading the body, and returns its address.
func newEarlyServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 5\r\n\r\nearly")
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
