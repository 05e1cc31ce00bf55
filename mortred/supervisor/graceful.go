package supervisor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// activeJobsMetric is the model server's gauge of async jobs admitted and not
// yet finished (pending + running).
const activeJobsMetric = "mortred_async_queue_depth"

// waitJobs polls a model server until it has no active async jobs, at most
// GracefulWait; past that the restart goes ahead and says so in the log.
func (m *Manager) waitJobs(ctx context.Context, x *Managed) error {
	url := "http://" + x.current().addr() + "/metrics"
	deadline := time.Now().Add(m.opts.GracefulWait)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		n, err := m.activeJobs(ctx, client, url)
		if err != nil {
			// A server that cannot report is restarted as asked; the log
			// keeps the reason.
			x.Child().Log().Append("[supervisor] graceful_restart: cannot read active jobs (" + err.Error() + "); restarting")
			return nil
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			x.Child().Log().Append(fmt.Sprintf("[supervisor] graceful_restart: %d async jobs still active after %s; restarting", n, m.opts.GracefulWait))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (m *Manager) activeJobs(ctx context.Context, client *http.Client, url string) (int, error) {
	mfs, err := scrapeMetrics(ctx, client, url, m.modelTk)
	if err != nil {
		return 0, err
	}
	mf, ok := mfs[activeJobsMetric]
	if !ok {
		return 0, fmt.Errorf("the model server does not export %s", activeJobsMetric)
	}
	return int(gaugeSum(mf)), nil
}

// gaugeSum adds up a gauge family's series (0 for a missing family).
func gaugeSum(mf *dto.MetricFamily) float64 {
	total := 0.0
	for _, mt := range mf.GetMetric() {
		total += mt.GetGauge().GetValue()
	}
	return total
}

// maxMetricsBytes bounds one child's /metrics answer: an exposition is a few
// KiB, so this only stops a misbehaving child from filling memory.
const maxMetricsBytes = 4 << 20

// scrapeMetrics reads a child's Prometheus text exposition with its token.
func scrapeMetrics(ctx context.Context, client *http.Client, url, token string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
}
