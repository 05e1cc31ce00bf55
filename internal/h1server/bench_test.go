package h1server

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// benchHandler answers a POST with a fixed small body, without
// allocating: what the benchmark measures is the server.
type benchHandler struct{}

var benchAnswer = []byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"text":"ok"}]}`)

func (benchHandler) Take(h *Head) bool { return string(h.Method) == http.MethodPost }

func (benchHandler) Serve(x *Exchange) {
	if _, err := io.Copy(io.Discard, x); err != nil { // io.Discard's pooled buffer
		x.Abort()
		return
	}
	_ = x.WriteHead(Response{Status: http.StatusOK, ContentLength: int64(len(benchAnswer)),
		Header: []byte("Content-Type: application/json\r\n")})
	_, _ = x.Write(benchAnswer)
}

// BenchmarkFastExchange: one small POST answered with a small
// Content-Length body, over loopback, on a kept-alive connection; the
// client allocates nothing. net/http with the same exchange is the
// reference.
func BenchmarkFastExchange(b *testing.B) {
	body := `{"model":"m","prompt":"hello","max_tokens":8}`
	req := []byte("POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	b.Run("h1server", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		s := &Server{Handler: benchHandler{}, Fallback: &http.Server{}}
		go func() { _ = s.Serve(ln) }()
		defer s.Close()
		benchExchange(b, ln.Addr().String(), req)
	})
	b.Run("net-http", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(benchAnswer)))
			_, _ = w.Write(benchAnswer)
		})}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		benchExchange(b, ln.Addr().String(), req)
	})
}

func benchExchange(b *testing.B, addr string, req []byte) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Minute))
	// The first answer gives the answer's length (the Date field's is
	// fixed).
	if _, err := nc.Write(req); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4096)
	n := 0
	for {
		m, err := nc.Read(buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
		if i := bytes.Index(buf[:n], []byte("\r\n\r\n")); i >= 0 && n >= i+4+len(benchAnswer) {
			break
		}
	}
	if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(buf[:n], benchAnswer) {
		b.Fatalf("answer %q", buf[:n])
	}
	answer := buf[:n]
	b.ReportAllocs()
	b.SetBytes(int64(len(req) + len(answer)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(nc, answer); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.HasSuffix(answer, benchAnswer) {
		b.Fatalf("last answer %q", answer)
	}
}
