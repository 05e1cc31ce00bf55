package discovery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dirtyServer answers the first request on each connection, and on a
// reused connection writes half an answer and drops the connection: a
// keep-alive close racing a request. Go's transport retries a request
// that got no byte back on its own; this one it does not.
func dirtyServer(t *testing.T) (addr string, hits func() int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	n := 0
	srv := &http.Server{IdleTimeout: 2 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		reused := seen[r.RemoteAddr]
		seen[r.RemoteAddr] = true
		mu.Unlock()
		if reused {
			c, buf, err := http.NewResponseController(w).Hijack()
			if err == nil {
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"data\"")
				buf.Flush()
				c.Close()
			}
			return
		}
		w.Write([]byte(`{"data":[]}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestGetterRetriesReusedConnection(t *testing.T) {
	addr, hits := dirtyServer(t)
	g := NewGetter(0)
	defer g.Close()
	ctx := context.Background()
	if r, err := g.Get(ctx, "http://"+addr+"/v1/models", 5*time.Second, 1<<20); err != nil || r.Retried {
		t.Fatalf("first get: %v %+v", err, r)
	}
	r, err := g.Get(ctx, "http://"+addr+"/v1/models", 5*time.Second, 1<<20)
	if err != nil || !r.Retried || string(r.Body) != `{"data":[]}` {
		t.Fatalf("second get on the reused connection: err=%v retried=%v body=%q", err, r.Retried, r.Body)
	}
	if hits() != 3 {
		t.Fatalf("server saw %d requests, want 3", hits())
	}
}

func TestGetterNoRetryOnRefusedOrFresh(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g := NewGetter(0)
	defer g.Close()
	r, err := g.Get(context.Background(), "http://"+addr+"/x", 5*time.Second, 1<<20)
	if err == nil || r.Retried || !errors.Is(err, syscall.ECONNREFUSED) || err.Error() != "connection refused" {
		t.Fatalf("refused: %v retried=%v", err, r.Retried)
	}

	// A fresh connection that hangs times out once, with a short text.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r, err = g.Get(context.Background(), "http://"+hang.Addr().String()+"/x", 200*time.Millisecond, 1<<20)
	if err == nil || r.Retried || err.Error() != "no answer within 200ms" {
		t.Fatalf("hang: %v retried=%v", err, r.Retried)
	}
}

func TestGetterStatusAndLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 2048))
			return
		}
		http.Error(w, "nope", http.StatusServiceUnavailable)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	g := NewGetter(0)
	defer g.Close()
	_, err = g.Get(context.Background(), "http://"+ln.Addr().String()+"/x", 5*time.Second, 1024)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 503 || err.Error() != "HTTP 503" {
		t.Fatalf("status: %v", err)
	}
	_, err = g.Get(context.Background(), "http://"+ln.Addr().String()+"/big", 5*time.Second, 1024)
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("limit: %v", err)
	}
}

// A reused connection that times out is not retried: only an endpoint that
// drops an idle connection fails fast, and a retry after a timeout would
// cost a second PROBE_TIMEOUT_S.
func TestGetterNoRetryAfterTimeoutOnReusedConnection(t *testing.T) {
	var mu sync.Mutex
	n := 0
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if !first {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Write([]byte(`{"data":[]}`))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	defer close(release)
	g := NewGetter(0)
	defer g.Close()
	url := "http://" + ln.Addr().String() + "/v1/models"
	if _, err := g.Get(context.Background(), url, 5*time.Second, 1<<20); err != nil {
		t.Fatal(err)
	}
	r, err := g.Get(context.Background(), url, 200*time.Millisecond, 1<<20)
	if err == nil || r.Retried || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout on a reused connection: err=%v retried=%v", err, r.Retried)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}
