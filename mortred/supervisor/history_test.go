package supervisor

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// exposition is a model server's /metrics after posts POSTs (one in ten
// a 429) whose latencies fall in the 10 ms bucket (half) and the 100 ms
// bucket (half), gets GETs (in the 1 ms bucket), and batches of 4.
func exposition(posts, gets, rejected, depth int) string {
	ok, tooMany := posts-posts/10, posts/10
	return fmt.Sprintf(`# TYPE mortred_http_requests_total counter
mortred_http_requests_total{model="TM",method="POST",status="200"} %d
mortred_http_requests_total{model="TM",method="POST",status="429"} %d
mortred_http_requests_total{model="TM",method="GET",status="200"} %d
# TYPE mortred_http_request_duration_ms histogram
mortred_http_request_duration_ms_bucket{le="1"} %d
mortred_http_request_duration_ms_bucket{le="10"} %d
mortred_http_request_duration_ms_bucket{le="100"} %d
mortred_http_request_duration_ms_bucket{le="+Inf"} %d
mortred_http_request_duration_ms_sum 0
mortred_http_request_duration_ms_count %d
# TYPE mortred_queue_depth gauge
mortred_queue_depth %d
# TYPE mortred_queue_rejected_total counter
mortred_queue_rejected_total{queue="sync"} %d
# TYPE mortred_batch_size histogram
mortred_batch_size_bucket{le="+Inf"} %d
mortred_batch_size_sum %d
mortred_batch_size_count %d
`, ok, tooMany, gets, gets, gets+posts/2, gets+posts, gets+posts, gets+posts, depth, rejected, posts/4, posts, posts/4)
}

func TestHistoryOfAModelServer(t *testing.T) {
	h := &history{win: series.NewWindow[historyKey](10), totals: series.NewCounters[historyKey](), interval: 2 * time.Second}
	t0 := time.UnixMilli(1_800_000_000_000)
	round := func(i int, text string) map[historyKey]float64 {
		values := map[historyKey]float64{}
		h.totals.Begin(t0.Add(time.Duration(i) * 2 * time.Second))
		if text != "" {
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			h.server(values, "TM", fams)
		}
		h.totals.End()
		return values
	}
	round(0, exposition(0, 5, 0, 0))
	v := round(1, exposition(40, 6, 3, 2))
	want := map[string]float64{fieldReq2xx: 18, fieldReq4xx: 2, fieldReq5xx: 0, fieldP50: 9.775, fieldP99: 98.155,
		fieldQueue: 2, fieldRejected: 1.5, fieldBatch: 4}
	for f, w := range want {
		if got := v[historyKey{"TM", f}]; math.Abs(got-w) > 1e-9 {
			t.Errorf("%s = %v, want %v", f, got, w)
		}
	}
	// Only probes and scrapes: no POST, so no latency to speak of.
	v = round(2, exposition(40, 9, 3, 0))
	for _, f := range []string{fieldP50, fieldP99, fieldBatch} {
		if got, ok := v[historyKey{"TM", f}]; ok && !math.IsNaN(got) {
			t.Errorf("%s = %v with no POST in the interval", f, got)
		}
	}
	if v[historyKey{"TM", fieldReq2xx}] != 0 || v[historyKey{"TM", fieldQueue}] != 0 {
		t.Errorf("idle interval: %v", v)
	}
	// The scrape failed, then the server restarted: no base, so gaps.
	round(3, "")
	v = round(4, exposition(8, 1, 0, 0))
	for _, f := range []string{fieldReq2xx, fieldP50, fieldRejected, fieldBatch} {
		if got, ok := v[historyKey{"TM", f}]; ok && !math.IsNaN(got) {
			t.Errorf("after a gap %s = %v, want a gap", f, got)
		}
	}
}
