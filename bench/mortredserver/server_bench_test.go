// Package mortredserver benchmarks the mortred model server with the
// built-in test model, over real loopback HTTP:
//
//	go test -run '^$' -bench . -benchtime 3s ./bench/mortredserver/
//
// BenchmarkOverhead reports the server's cost per request on top of the
// model's own run time (overhead-ms/req, from the client's wall time minus
// the model's measured run time). BenchmarkThroughput reports requests per
// second with batching off and on, for a model whose every run has a fixed
// cost (batch_overhead_ms) plus a per-item cost (params.delay_ms).
package mortredserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"encoding/base64"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
	"github.com/fe64bb06/frontdoor/mortred/server"
)

const uri = "/mortred_ai_server_v1/classification/testmodel"

func startServer(b *testing.B, serverKeys, modelKeys string) (*server.Server, string) {
	b.Helper()
	dir := b.TempDir()
	must(b, os.WriteFile(filepath.Join(dir, "model.toml"), []byte("type = \"testmodel\"\n"+modelKeys), 0o644))
	must(b, os.WriteFile(filepath.Join(dir, "server.toml"), []byte(`[BENCH]
port = 0
server_uri = "`+uri+`"
auth_token = "bench"
model_config_file_path = "model.toml"
max_queue_depth = 0
`+serverKeys), 0o644))
	cfg, err := config.LoadServer(filepath.Join(dir, "server.toml"), envconf.Map(nil))
	must(b, err)
	srv, err := server.New(cfg, logx.Discard())
	must(b, err)
	must(b, srv.Load(context.Background()))
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(func() { ts.Close(); srv.Close() })
	return srv, ts.URL
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

func post(url, body string) error {
	r, _ := http.NewRequest(http.MethodPost, url+uri, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer bench")
	resp, err := client.Do(r)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func body(delayMS int) string {
	img := base64.StdEncoding.EncodeToString(testmodel.GrayPNG(64, 64, 200))
	return fmt.Sprintf(`{"images":["%s"],"params":{"delay_ms":%d}}`, img, delayMS)
}

// modelMS is the mean model run time per batch from the server's metrics.
func modelMS(b *testing.B, srv *server.Server) float64 {
	mfs, err := srv.Registry().Gather()
	must(b, err)
	for _, mf := range mfs {
		if mf.GetName() == "mortred_inference_duration_ms" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() > 0 {
				return h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	return 0
}

// BenchmarkOverhead: one client, sequential requests of one 64×64 image.
// delay_ms=0 measures the bare path; delay_ms=5 shows the overhead does not
// grow with the model's time.
func BenchmarkOverhead(b *testing.B) {
	for _, delay := range []int{0, 5} {
		b.Run(fmt.Sprintf("delay_ms=%d", delay), func(b *testing.B) {
			srv, url := startServer(b, "worker_nums = 1\n", "")
			req := body(delay)
			must(b, post(url, req)) // connection and first-run warm-up
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				must(b, post(url, req))
			}
			wall := float64(time.Since(start).Nanoseconds()) / 1e6 / float64(b.N)
			b.StopTimer()
			model := modelMS(b, srv)
			b.ReportMetric(wall, "wall-ms/req")
			b.ReportMetric(model, "model-ms/req")
			b.ReportMetric(wall-model, "overhead-ms/req")
		})
	}
}

// BenchmarkThroughput: 32 concurrent clients, 2 workers, a model with a
// 10 ms fixed cost per run and 1 ms per item; batching off (max_batch_size
// 1) against on (8, 2 ms window).
func BenchmarkThroughput(b *testing.B) {
	for _, batch := range []int{1, 8} {
		b.Run(fmt.Sprintf("max_batch_size=%d", batch), func(b *testing.B) {
			_, url := startServer(b, fmt.Sprintf("worker_nums = 2\nmax_batch_size = %d\nmax_batch_delay_ms = 2\n", batch), "batch_overhead_ms = 10\n")
			req := body(1)
			must(b, post(url, req))
			const clients = 32
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := post(url, req); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
		})
	}
}
