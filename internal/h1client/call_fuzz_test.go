package h1client

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzCallResponse: whatever bytes a server answers with (and then
// closes), Send and Read neither panic nor hang, and an answer they
// accept reads as net/http reads it: a Content-Length answer with the
// same status and body, always; a chunked or until-close one, when
// net/http reads it too.
func FuzzCallResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 204 \r\nTrAnsfer-EnCoding:\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nX: \x00\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"\n\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", bufSize) + "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	// One server for every input: a listener per input would use up
	// the loopback's ports.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	wires := make(chan []byte, 1)
	served := make(chan struct{}, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			// The request read whole first: a close with unread bytes
			// would reset the connection before the client reads.
			if _, err := readRawRequest(bufio.NewReader(nc)); err == nil {
				_, _ = nc.Write(<-wires)
			}
			nc.Close()
			served <- struct{}{}
		}
	}()
	f.Cleanup(func() { ln.Close(); <-stopped })
	addr := ln.Addr().String()
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err == nil {
			// Closed with a reset: no TIME_WAIT left behind per input.
			_ = nc.(*net.TCPConn).SetLinger(0)
		}
		return nc, err
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		c := New(Options{Dial: dial})
		defer c.CloseIdle()
		wires <- wire
		x := &Call{}
		x.SetDeadline(time.Now().Add(10 * time.Second))
		err := c.Send(x, addr, postHead(addr, "/", 2), []byte("hi"))
		var body []byte
		if err == nil {
			body, err = io.ReadAll(x)
		}
		x.Close()
		select {
		case <-served:
		case <-time.After(20 * time.Second):
			t.Fatalf("answer %q: the server never finished (Send: %v)", wire, err)
		}
		select {
		case <-wires: // the request never came whole
		default:
		}
		if isTimeout(err) {
			t.Fatalf("answer %q: hung until the deadline though the server closed", wire)
		}
		if err != nil {
			return
		}

		br := bufio.NewReader(bytes.NewReader(wire))
		var resp *http.Response
		var herr error
		for range 5 {
			resp, herr = http.ReadResponse(br, nil)
			if herr != nil || resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == 101 {
				break
			}
		}
		var hbody []byte
		if herr == nil {
			hbody, herr = io.ReadAll(resp.Body)
		}
		switch {
		case x.ContentLength >= 0 && herr != nil && (x.Status == 204 || x.Status == 304) &&
			strings.Contains(herr.Error(), "transfer encoding"):
			// RFC 9112 §6.3: no body, whatever the fields say; net/http
			// checks Transfer-Encoding first.
			return
		case x.ContentLength >= 0:
			if herr != nil {
				t.Fatalf("answer %q accepted (status %d, body %q), net/http refuses it: %v", wire, x.Status, body, herr)
			}
			if int64(len(body)) != x.ContentLength {
				t.Fatalf("answer %q: body %q, not its length %d", wire, body, x.ContentLength)
			}
		case herr != nil || !resp.ProtoAtLeast(1, 1):
			// Not comparable: net/http refuses what RFC 9112 reads (a
			// transfer coding ending in chunked after another), or
			// ignores Transfer-Encoding in an HTTP/1.0 answer.
			return
		}
		if resp.StatusCode != x.Status || !bytes.Equal(hbody, body) {
			t.Fatalf("answer %q read as %d %q, net/http reads %d %q", wire, x.Status, body, resp.StatusCode, hbody)
		}
	})
}
