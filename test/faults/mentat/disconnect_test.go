package mentat

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// routerUsage is the router's own count of goroutines (from /metrics) and
// what /proc says about its fds and memory.
type routerUsage struct {
	goroutines int
	procUsage
}

func (u routerUsage) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, RSS %d KiB", u.goroutines, u.fds, u.rssKB)
}

func measure(r *router) (routerUsage, error) {
	// Our own pooled connections would count as router goroutines and fds.
	client.CloseIdleConnections()
	g, err := scrapeGauge(r.base+"/metrics", "go_goroutines")
	if err != nil {
		return routerUsage{}, err
	}
	p, err := readProc(r.PID())
	return routerUsage{goroutines: int(g), procUsage: p}, err
}

// settled waits until nothing is in flight at the router or the engine
// and the router's goroutine and fd counts hold still for a few samples
// (pooled upstream connections expire after 2 s), then returns the usage.
func settled(t *testing.T, r *router, engine string) routerUsage {
	t.Helper()
	var last routerUsage
	steady := 0
	testproc.Eventually(t, 60*time.Second, "router settled", func() error {
		time.Sleep(400 * time.Millisecond)
		inflight, err := scrapeGauge(r.base+"/metrics", "mentat_serve_inflight_requests")
		if err != nil {
			inflight = 0 // no series until a model was proxied
		}
		running, err := scrapeGauge(engine+"/metrics", "vllm:num_requests_running")
		if err != nil {
			return err
		}
		u, err := measure(r)
		if err != nil {
			return err
		}
		if inflight != 0 || running != 0 {
			steady = 0
			return fmt.Errorf("%v proxied and %v running in the engine", inflight, running)
		}
		if u.goroutines == last.goroutines && u.fds == last.fds {
			steady++
		} else {
			steady = 0
		}
		last = u
		if steady < 4 {
			return fmt.Errorf("still moving: %s", u)
		}
		return nil
	})
	return last
}

// abandon opens n streams through the router, at most conc at once, and
// hangs up on each mid-stream: most after a few frames, every fourth while
// the request is still waiting for its first byte.
func abandon(t *testing.T, r *router, model string, n, conc int) (hungUp int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if i%4 == 0 {
				// Gone before the first token (the engine's TTFT is 20 ms).
				rctx, rcancel := context.WithTimeout(ctx, time.Duration(2+i%10)*time.Millisecond)
				defer rcancel()
				req, _ := http.NewRequestWithContext(rctx, http.MethodPost, r.base+"/v1/chat/completions", bytes.NewReader(chatBody(model, true, 2000)))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := streamClient.Do(req); err == nil {
					resp.Body.Close()
				}
				atomic.AddInt64(&hungUp, 1)
				return
			}
			s, err := openStream(r.base, model, 2000)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			for range i % 3 {
				if _, err := s.frame(); err != nil {
					break
				}
			}
			s.close()
			atomic.AddInt64(&hungUp, 1)
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d streams failed to open, first: %v", n, firstErr.Load())
	}
	return hungUp
}

// TestClientDisconnects: thousands of clients hang up mid-stream. Every
// upstream request must be cancelled (the engine ends up running
// nothing), and the router must come back to the goroutines, open fds and
// memory it had before.
func TestClientDisconnects(t *testing.T) {
	t.Parallel()
	const n, conc = 2000, 48
	d := startDaemon(t, testproc.FreePort(t))
	startAgent(t, d.addr, engineOpts{group: "alpha", model: "alpha-7b", port: testproc.FreePort(t), itl: 5 * time.Millisecond})
	r := startRouter(t, d.addr)
	r.waitModels(t, "alpha-7b")
	engine := "http://127.0.0.1:" + enginePort(t, r, "alpha")

	// Warm up, so pools, buffers and the heap reach their working size
	// before the baseline is taken.
	abandon(t, r, "alpha-7b", 200, conc)
	before := settled(t, r, engine)
	t.Logf("before: %s", before)
	abortedBefore, err := scrapeGauge(engine+"/metrics", "vllm:request_success_total", `finished_reason="abort"`)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	hungUp := abandon(t, r, "alpha-7b", n, conc)
	t.Logf("%d clients hung up mid-stream in %s", hungUp, time.Since(start).Round(time.Millisecond))
	if hungUp < n*9/10 {
		t.Fatalf("only %d of %d streams were opened and abandoned within the time bound", hungUp, n)
	}

	after := settled(t, r, engine)
	t.Logf("after: %s", after)
	if after.goroutines > before.goroutines+10 {
		t.Errorf("router goroutines grew from %d to %d after %d disconnects", before.goroutines, after.goroutines, hungUp)
	}
	if after.fds > before.fds+10 {
		t.Errorf("router fds grew from %d to %d after %d disconnects", before.fds, after.fds, hungUp)
	}
	// A leak of one buffer or goroutine per request would be tens of MiB;
	// the heap's own variation is far less.
	if after.rssKB > before.rssKB+32<<10 {
		t.Errorf("router RSS grew from %d KiB to %d KiB after %d disconnects", before.rssKB, after.rssKB, hungUp)
	}
	// Every hang-up reached the engine as a cancellation (those that got
	// there at all: a client gone within 2 ms may never have been sent).
	aborted, err := scrapeGauge(engine+"/metrics", "vllm:request_success_total", `finished_reason="abort"`)
	if err != nil {
		t.Fatal(err)
	}
	aborted -= abortedBefore
	t.Logf("engine counted %v aborted requests", aborted)
	if aborted < float64(n*3/4) {
		t.Errorf("the engine saw only %v aborts for %d hang-ups: upstream requests outlive their clients", aborted, hungUp)
	}
	mustServe(t, r.base, "alpha-7b")
}
