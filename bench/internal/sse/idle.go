package sse

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// IdleOpts is a set of streams to open and hold.
type IdleOpts struct {
	// URL is a loopback chat completions URL; Body a streaming request
	// whose engine sends a first frame and then nothing for a long time.
	URL  string
	Body []byte
	// Header is added to every request (an Authorization header for a
	// router with keys on).
	Header map[string]string
	// N is how many streams to open (default 10,000).
	N int
	// Parallel is how many are being opened at once (default 128).
	Parallel int
	// OpenTimeout bounds opening them all (default 120 s); Hold bounds
	// how long they are held open if the parent never says stop (default
	// 120 s).
	OpenTimeout, Hold time.Duration
}

func (o IdleOpts) withDefaults() IdleOpts {
	if o.N <= 0 {
		o.N = 10000
	}
	if o.Parallel <= 0 {
		o.Parallel = 128
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 120 * time.Second
	}
	if o.Hold <= 0 {
		o.Hold = 120 * time.Second
	}
	return o
}

// IdleResult is how opening went.
type IdleResult struct {
	Opened, Errors int
	FirstError     string
	OpenTime       time.Duration
}

// openIdle opens o.N streams over raw TCP (no client buffers or
// goroutines kept per stream), each read up to its first frame, and
// returns them open.
func openIdle(ctx context.Context, o IdleOpts) ([]net.Conn, IdleResult) {
	o = o.withDefaults()
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, IdleResult{Errors: 1, FirstError: err.Error()}
	}
	var extra strings.Builder
	for k, v := range o.Header {
		fmt.Fprintf(&extra, "%s: %s\r\n", k, v)
	}
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n%sContent-Length: %d\r\n\r\n%s",
		u.RequestURI(), u.Host, extra.String(), len(o.Body), o.Body)
	ctx, cancel := context.WithTimeout(ctx, o.OpenTimeout)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	var res IdleResult
	var wg sync.WaitGroup
	for range o.Parallel {
		wg.Go(func() {
			for next.Add(1) <= int64(o.N) && ctx.Err() == nil {
				c, err := openOne(ctx, u.Host, req)
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
				} else {
					conns = append(conns, c)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Opened = len(conns)
	res.OpenTime = time.Since(start)
	return conns, res
}

func openOne(ctx context.Context, host string, req []byte) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200")) && len(buf) >= 12 {
			c.Close()
			return nil, fmt.Errorf("answer: %.200q", buf)
		}
		if i := bytes.Index(buf, []byte("data: ")); i >= 0 && bytes.Contains(buf[i:], []byte("\n\n")) {
			_ = c.SetDeadline(time.Time{})
			return c, nil
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("before the first frame: %w (read %.200q)", err, buf)
		}
		if len(buf) > 64<<10 {
			c.Close()
			return nil, fmt.Errorf("no frame in the first 64 KiB: %.200q", buf)
		}
	}
}
