package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// metric returns a series' value (counter, gauge, or histogram count).
func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	mfs, err := f.srv.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// inBackground sends a request and delivers its reply on the channel; a
// transport or contract problem arrives as a reply with code 0 and the
// error in body, which checkEnvelope reports.
func (f *fixture) inBackground(body string) <-chan reply {
	ch := make(chan reply, 1)
	go func() {
		rep, err := f.try(req{token: token, body: body})
		if err != nil {
			rep = reply{body: []byte(err.Error())}
		}
		ch <- rep
	}()
	return ch
}

func TestBatchIsolatesFailingItem(t *testing.T) {
	f := start(t, opts{gated: true, keys: map[string]string{"max_batch_size": "8", "max_batch_delay_ms": "0"}})
	f.open(1)
	// One request: a good image, one that fails in Prepare, one that fails
	// in the model run, another good one. The two that reach the model run
	// together with the failing one.
	rep := f.infer(images(darkPNG, notImage, failPNG, lightPNG))
	checkEnvelope(t, rep, envelope.StatusOK, 4)
	want := []envelope.Status{0, envelope.StatusEmptyImage, envelope.StatusEmptyImage, 0}
	for i, it := range rep.env.Results {
		if it.Status != want[i] || (it.Status == 0) == (string(it.Data) == "null") {
			t.Fatalf("item %d: %+v", i, it)
		}
		if it.Status != 0 && it.Message == "" {
			t.Fatalf("item %d failed without a message", i)
		}
	}
	if got := f.metric("mortred_batch_size"); got != 1 {
		t.Fatalf("%v model runs, want one batch", got)
	}
	// Every item failed with one status: that status is the request's.
	rep = f.infer(images(notImage))
	checkEnvelope(t, rep, envelope.StatusEmptyImage, 1)
}

func TestBatchAcrossRequestsAndSessionFailure(t *testing.T) {
	f := start(t, opts{gated: true, keys: map[string]string{"max_batch_size": "3", "max_batch_delay_ms": "10000"}})
	// The worker keeps its batch window open (up to 10 s) until three items
	// are there; all three requests run as one batch, and the session error
	// of one fails every participant.
	a := f.inBackground(images(darkPNG))
	b := f.inBackground(images(lightPNG))
	c := f.inBackground(withParams(`{"session_error":true}`, darkPNG))
	f.open(1)
	for _, ch := range []<-chan reply{a, b, c} {
		rep := <-ch
		checkEnvelope(t, rep, envelope.StatusServerError, 1)
	}
	if got := f.metric("mortred_batch_size"); got != 1 {
		t.Fatalf("%v batches, want 1", got)
	}
}

func TestBatchingOffRunsOneByOne(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"max_batch_size": "1"}})
	checkEnvelope(t, f.infer(images(darkPNG, lightPNG, darkPNG)), envelope.StatusOK, 3)
	if got := f.metric("mortred_batch_size"); got != 3 {
		t.Fatalf("%v runs, want 3", got)
	}
}

// TestQueuedItemsTimeOutWithoutWorker: an item still queued at the deadline
// is answered with a timeout and never reaches the model.
func TestQueuedItemsTimeOutWithoutWorker(t *testing.T) {
	f := start(t, opts{gated: true, keys: map[string]string{"model_run_timeout": "300"}})
	busy := f.inBackground(images(darkPNG)) // takes the only worker
	eventually(t, "the worker to be busy", func() bool { return f.metric("mortred_workers_busy") == 1 })
	rep := f.infer(images(lightPNG, lightPNG))
	checkEnvelope(t, rep, envelope.StatusRunTimeout, 2)
	if f.srv.q.depth() != 0 {
		t.Fatalf("timed-out items left in the queue: %d", f.srv.q.depth())
	}
	checkEnvelope(t, <-busy, envelope.StatusRunTimeout, 1)
	f.open(1)
	eventually(t, "the worker to be free", func() bool { return f.metric("mortred_workers_busy") == 0 })
	if got := f.metric("mortred_batch_size"); got != 1 {
		t.Fatalf("%v model runs, want 1 (the queued items must not run)", got)
	}
}

func TestQueueFull429(t *testing.T) {
	f := start(t, opts{gated: true, keys: map[string]string{"max_queue_depth": "2", "model_run_timeout": "60000"}})
	busy := f.inBackground(images(darkPNG))
	eventually(t, "the worker to be busy", func() bool { return f.metric("mortred_workers_busy") == 1 })
	queued := f.inBackground(images(darkPNG, lightPNG))
	eventually(t, "two queued items", func() bool { return f.srv.q.depth() == 2 })
	rep := f.infer(images(darkPNG))
	checkEnvelope(t, rep, envelope.StatusRateLimited, 0)
	ra, err := strconv.Atoi(rep.hdr.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", rep.hdr.Get("Retry-After"))
	}
	if f.metric("mortred_queue_rejected_total", "queue", "model") != 1 {
		t.Fatal("rejection not counted")
	}
	if f.srv.q.depth() != 2 {
		t.Fatal("the refused request was half-queued")
	}
	// Bytes that are no image file fail at once, full queue or not: the
	// answer is the image's fault (400, status 3), not a 429 to retry.
	checkEnvelope(t, f.infer(images(notImage)), envelope.StatusEmptyImage, 1)
	f.open(3)
	checkEnvelope(t, <-busy, envelope.StatusOK, 1)
	checkEnvelope(t, <-queued, envelope.StatusOK, 2)
}

func TestRetryAfterEstimate(t *testing.T) {
	for _, c := range []struct {
		depth   int
		per     time.Duration
		workers int
		want    int
	}{
		{0, time.Second, 1, 1},
		{10, 100 * time.Millisecond, 1, 1},
		{10, time.Second, 2, 5},
		{11, time.Second, 2, 6},
		{1000, time.Second, 1, 60},
		{5, time.Second, 0, 5},
	} {
		if got := retryAfterSeconds(c.depth, c.per, c.workers); got != c.want {
			t.Errorf("%+v → %d", c, got)
		}
	}
}

func TestConcurrentLoad(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"worker_nums": "2", "max_batch_size": "4", "max_batch_delay_ms": "2", "max_queue_depth": "0"}})
	const clients, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				imgs := []string{darkPNG, lightPNG}[:1+(c+i)%2]
				if i%5 == 0 {
					imgs = append(imgs, notImage)
				}
				body := fmt.Sprintf(`{"req_id":"c%d-%d","images":["%s"]}`, c, i, strings.Join(imgs, `","`))
				r, _ := http.NewRequest(http.MethodPost, f.ts.URL+inferURI, strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					errs <- err
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf(`"task_id":"c%d-%d"`, c, i)
				if resp.StatusCode != 200 || !strings.Contains(string(b), want) || strings.Count(string(b), `"status":`) != len(imgs)+1 {
					errs <- fmt.Errorf("c%d-%d → %d %s", c, i, resp.StatusCode, b)
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := f.metric("mortred_http_requests_total", "status", "200"); got != clients*each {
		t.Fatalf("counted %v answers", got)
	}
}

func TestMetricsNames(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"async_enabled": "true"}})
	checkEnvelope(t, f.infer(images(darkPNG)), envelope.StatusOK, 1)
	rep := f.do(req{method: http.MethodGet, path: "/metrics", token: token})
	if rep.code != 200 {
		t.Fatalf("/metrics → %d", rep.code)
	}
	for _, name := range []string{
		"mortred_up 1", "mortred_ready 1", `mortred_http_requests_total{method="POST",model="TESTMODEL",status="200"} 1`,
		"mortred_http_request_duration_ms_bucket", "mortred_inference_duration_ms_bucket", "mortred_queue_wait_duration_ms_bucket",
		"mortred_queue_depth 0", "mortred_queue_rejected_total", "mortred_workers_busy 0", `mortred_batch_size_bucket{le="32"} 1`,
		"mortred_batch_window_wait_ms", "mortred_async_jobs_total", "mortred_async_queue_depth 0",
		"go_goroutines ", "process_open_fds ",
	} {
		if !strings.Contains(string(rep.body), name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

// TestImageBytesOutliveTheAnswer: a worker may still be preparing an image
// after the request's deadline has answered it. The image's buffer must not
// go back to the pool, where the next requests would write over it, until
// that Prepare is done.
func TestImageBytesOutliveTheAnswer(t *testing.T) {
	f := start(t, opts{gated: true, keys: map[string]string{"model_run_timeout": "200", "worker_nums": "2"}})
	f.open(100)
	held := f.inBackground(images(holdPNG))
	<-prepareHeld
	checkEnvelope(t, <-held, envelope.StatusRunTimeout, 1)
	// The other worker serves requests whose image is as long as the held
	// one: each takes a pooled buffer, fills it and hands it back.
	other := b64(testmodel.GrayPNG(4, 4, 10))
	if len(other) != len(holdPNG) {
		t.Fatal("the overwriting image must be as long as the held one")
	}
	for range 20 {
		checkEnvelope(t, f.infer(images(other)), envelope.StatusOK, 1)
	}
	prepareGate <- struct{}{}
	eventually(t, "the held item to leave the worker", func() bool { return f.metric("mortred_workers_busy") == 0 })
	if n := prepareClobbered.Load(); n != 0 {
		t.Fatalf("the held image's bytes were overwritten while its Prepare ran (%d)", n)
	}
}
