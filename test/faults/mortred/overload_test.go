package mortred

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// burst sends n requests through the gateway, conc at a time, each asking
// for delayMS of run time, and counts the answers by status. It checks
// every 429 for a Retry-After of 1 to 60 s.
func burst(t *testing.T, d deployment, id string, n, conc, delayMS int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var bad []string
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	body := stack.Envelope("", `{"delay_ms":`+strconv.Itoa(delayMS)+`}`, stack.DarkPNG)
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := d.infer(id, body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, err.Error())
				return
			}
			codes[r.Code]++
			switch r.Code {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
				if err != nil || ra < 1 || ra > 60 {
					bad = append(bad, "429 with Retry-After "+strconv.Quote(r.Header.Get("Retry-After")))
				}
			default:
				bad = append(bad, r.String())
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d unexpected answers under overload, first: %s", len(bad), bad[0])
	}
	return codes
}

// TestOverloadQueueFull: far more concurrent requests than one worker and
// a queue of four can take. The excess is refused at once with 429 and a
// Retry-After (the gateway passes both through), what was admitted
// completes, and repeating the overload leaves the model server's and the
// gateway's memory where the first round put it.
func TestOverloadQueueFull(t *testing.T) {
	t.Parallel()
	const depth = 4
	d := deploy(t, []stack.Model{{ID: "BUSY", Keys: map[string]any{"worker_nums": 1, "max_queue_depth": depth, "max_batch_size": 1}}}, nil)
	model := d.Server(t, "BUSY").PID
	gateway := d.Server(t, "gateway").PID

	first := burst(t, d, "BUSY", 120, 60, 200)
	t.Logf("first overload: %v", first)
	if first[http.StatusTooManyRequests] == 0 || first[http.StatusOK] == 0 {
		t.Fatalf("overload past max_queue_depth %d: %v; want both 200s and 429s", depth, first)
	}
	// Warm up past a full GC cycle first: the model server keeps a 32 MB
	// Go heap floor, so its garbage may reach about that much before the
	// first collection, and RSS plateaus there. Growth is measured from
	// the plateau, where a leak would show.
	for range 8 {
		burst(t, d, "BUSY", 300, 60, 50)
	}
	rejected0, err := d.modelMetric("BUSY", "mortred_queue_rejected_total")
	if err != nil {
		t.Fatal(err)
	}
	m0, err := testproc.RSSKiB(model)
	if err != nil {
		t.Fatal(err)
	}
	g0, err := testproc.RSSKiB(gateway)
	if err != nil {
		t.Fatal(err)
	}

	// Eight more rounds, bounded in count: rejections must cost nothing
	// that stays.
	start := time.Now()
	total := map[int]int{}
	for range 8 {
		for code, n := range burst(t, d, "BUSY", 300, 60, 50) {
			total[code] += n
		}
	}
	t.Logf("eight more rounds in %s: %v", time.Since(start).Round(time.Millisecond), total)
	rejected, err := d.modelMetric("BUSY", "mortred_queue_rejected_total")
	if err != nil {
		t.Fatal(err)
	}
	if int(rejected-rejected0) != total[http.StatusTooManyRequests] {
		t.Fatalf("model server counted %v rejections, the clients saw %d 429s", rejected-rejected0, total[http.StatusTooManyRequests])
	}
	m1, err := testproc.RSSKiB(model)
	if err != nil {
		t.Fatal(err)
	}
	g1, err := testproc.RSSKiB(gateway)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RSS model server %d → %d KiB, gateway %d → %d KiB", m0, m1, g0, g1)
	const slackKB = 24 << 10
	if m1 > m0+slackKB {
		t.Errorf("model server RSS grew from %d to %d KiB over %d rejected requests", m0, m1, total[http.StatusTooManyRequests])
	}
	if g1 > g0+slackKB {
		t.Errorf("gateway RSS grew from %d to %d KiB over %d rejected requests", g0, g1, total[http.StatusTooManyRequests])
	}
	depthNow, err := d.modelMetric("BUSY", "mortred_queue_depth")
	if err != nil || depthNow != 0 {
		t.Fatalf("queue depth after the overload: %v %v", depthNow, err)
	}
	d.mustInfer(t, "BUSY")
}
