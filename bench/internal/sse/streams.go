// Package sse is the benchmark's streaming client. It runs in a child
// process (the benchmark binary re-executed with ChildArg) so it can be
// pinned to its own CPU like wrk: RunStreams measures time to first frame
// and the delay between frames of many streams; OpenIdle holds thousands of
// streams open after their first frame, for the memory they cost the
// server in between.
package sse

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// StreamOpts is one streaming load. Zero values take the defaults in the
// comments.
type StreamOpts struct {
	// URL is a loopback chat completions URL; Body a request with
	// "stream": true.
	URL  string
	Body []byte
	// Header is added to every request (an Authorization header for a
	// router with keys on).
	Header map[string]string
	// Concurrency is how many streams run at once (default 16).
	Concurrency int
	// Count bounds the streams started (default 1,000); Duration bounds
	// the time new streams are started in (default 5 s).
	Count    int
	Duration time.Duration
	// Timeout bounds one stream (default 60 s).
	Timeout time.Duration
}

func (o StreamOpts) withDefaults() StreamOpts {
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Count <= 0 {
		o.Count = 1000
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	return o
}

// StreamResult summarises the streams. Frames are the `data:` events
// before `data: [DONE]`.
type StreamResult struct {
	Streams, Errors int
	FirstError      string
	// TTFF is from sending the request to the first frame.
	TTFF50, TTFF90, TTFF99 time.Duration
	// Gap is the delay between consecutive frames from the second token
	// on (the role frame and the first token leave the engine together).
	Gap50, Gap99, GapMean time.Duration
	// Coalesced counts gaps under 1 ms: frames the path delivered
	// together although the engine sent them apart.
	Coalesced, Gaps int
	// Frames is the frame count of the first stream; FramesDiffer counts
	// streams with another count.
	Frames, FramesDiffer int
}

type oneStream struct {
	ttff   time.Duration
	gaps   []time.Duration
	frames int
}

// runStreams is the child's side: the load itself.
func runStreams(ctx context.Context, o StreamOpts) StreamResult {
	o = o.withDefaults()
	tr := &http.Transport{MaxIdleConnsPerHost: o.Concurrency, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout}

	deadline := time.Now().Add(o.Duration)
	var next atomic.Int64
	var mu sync.Mutex
	var all []oneStream
	var errs int
	var firstErr error
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(o.Count) && time.Now().Before(deadline) && ctx.Err() == nil {
				s, err := stream(ctx, client, o.URL, o.Body, o.Header)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					all = append(all, s)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	r := StreamResult{Streams: len(all), Errors: errs}
	if firstErr != nil {
		r.FirstError = firstErr.Error()
	}
	var ttff, gaps []time.Duration
	var sum time.Duration
	for i, s := range all {
		ttff = append(ttff, s.ttff)
		gaps = append(gaps, s.gaps...)
		for _, g := range s.gaps {
			sum += g
			if g < time.Millisecond {
				r.Coalesced++
			}
		}
		if i == 0 {
			r.Frames = s.frames
		} else if s.frames != r.Frames {
			r.FramesDiffer++
		}
	}
	r.Gaps = len(gaps)
	if len(gaps) > 0 {
		r.GapMean = sum / time.Duration(len(gaps))
	}
	r.TTFF50, r.TTFF90, r.TTFF99 = harness.Pct(ttff, 0.5), harness.Pct(ttff, 0.9), harness.Pct(ttff, 0.99)
	r.Gap50, r.Gap99 = harness.Pct(gaps, 0.5), harness.Pct(gaps, 0.99)
	return r
}

// stream sends one request and timestamps every frame as its line arrives.
func stream(ctx context.Context, c *http.Client, url string, body []byte, header map[string]string) (oneStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return oneStream{}, err
	}
	setHeader(req, header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return oneStream{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return oneStream{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	var s oneStream
	var last time.Time
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return s, fmt.Errorf("stream ended after %d frames without data: [DONE]", s.frames)
			}
			return s, err
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		now := time.Now()
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			_, _ = io.Copy(io.Discard, br)
			return s, nil
		}
		s.frames++
		switch s.frames {
		case 1:
			s.ttff = now.Sub(start)
		case 2: // the first token, sent with the role frame
		default:
			s.gaps = append(s.gaps, now.Sub(last))
		}
		last = now
	}
}

// setHeader adds the load's extra header fields to req.
func setHeader(req *http.Request, header map[string]string) {
	for k, v := range header {
		req.Header.Set(k, v)
	}
}
