package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// usageTimeout bounds one read of the gateway's /stats.json: the UI polls
// it on its own timer, and a gateway that hangs must not hold the
// supervisor's answer (or its connections) for long.
const usageTimeout = 1500 * time.Millisecond

// maxStatsBytes bounds the gateway's answer; a few hundred keys with 15
// minutes of series each are well under it.
const maxStatsBytes = 8 << 20

// UsageDocument is the /api/v1/usage body: the per-key usage the gateway
// answers on its GET /stats.json, as of FetchedAtMS. Keys is empty when
// the gateway runs without a keys file.
type UsageDocument struct {
	FetchedAtMS int64               `json:"fetched_at_ms"`
	Keys        []keys.Usage        `json:"keys"`
	Series      keys.SeriesSnapshot `json:"series"`
}

// errNoMetricsToken: the gateway's /stats.json takes the metrics token, and
// the supervisor was not given one.
var errNoMetricsToken = errors.New("the supervisor has no MORTRED_METRICS_TOKEN, which the gateway's /stats.json needs: set it (mortredctl init-trust writes one) and restart the supervisor")

// gatewayUsage reads the gateway's /stats.json. The answer is decoded into
// the typed document, so nothing but the fields of keys.Usage and
// keys.SeriesSnapshot (ids, never secrets) is passed on.
func (m *Manager) gatewayUsage(ctx context.Context) (UsageDocument, error) {
	if m.metricsTok == "" {
		return UsageDocument{}, errNoMetricsToken
	}
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.gatewayURL+"/stats.json", nil)
	if err != nil {
		return UsageDocument{}, err
	}
	req.Header.Set("Authorization", "Bearer "+m.metricsTok)
	rep, err := m.usageClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return UsageDocument{}, fmt.Errorf("the gateway did not answer GET /stats.json within %v; is it running? See /api/v1/status", usageTimeout)
		}
		return UsageDocument{}, fmt.Errorf("the gateway did not answer GET /stats.json (%v); is it running? See /api/v1/status", err)
	}
	defer rep.Body.Close()
	body, err := io.ReadAll(io.LimitReader(rep.Body, maxStatsBytes+1))
	switch {
	case err != nil:
		return UsageDocument{}, fmt.Errorf("reading the gateway's GET /stats.json: %v", err)
	case len(body) > maxStatsBytes:
		return UsageDocument{}, fmt.Errorf("the gateway's GET /stats.json is larger than %d MiB", maxStatsBytes>>20)
	case rep.StatusCode == http.StatusUnauthorized || rep.StatusCode == http.StatusForbidden:
		return UsageDocument{}, fmt.Errorf("the gateway refused the supervisor's MORTRED_METRICS_TOKEN on GET /stats.json (%d); the supervisor and the gateway must share it", rep.StatusCode)
	case rep.StatusCode != http.StatusOK:
		return UsageDocument{}, fmt.Errorf("the gateway answered GET /stats.json with %d; a gateway older than per-key usage has no such route", rep.StatusCode)
	}
	var doc UsageDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		return UsageDocument{}, fmt.Errorf("the gateway's GET /stats.json is not the expected document: %v", err)
	}
	doc.FetchedAtMS = time.Now().UnixMilli()
	if doc.Keys == nil {
		doc.Keys = []keys.Usage{}
	}
	if doc.Series.Times == nil {
		doc.Series.Times = []int64{}
	}
	if doc.Series.Keys == nil {
		doc.Series.Keys = map[string]keys.KeySeries{}
	}
	// The charts index every series by the times; a misaligned one would
	// draw at the wrong moments.
	for id, s := range doc.Series.Keys {
		n := len(doc.Series.Times)
		if len(s.Requests) != n || len(s.Units) != n || len(s.Rejections) != n {
			return UsageDocument{}, fmt.Errorf("the gateway's GET /stats.json has series of key %q not aligned with its %d times", id, n)
		}
	}
	return doc, nil
}

func (m *Manager) usage(w http.ResponseWriter, r *http.Request) {
	doc, err := m.gatewayUsage(r.Context())
	switch {
	case errors.Is(err, errNoMetricsToken):
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusBadGateway, apiError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, doc)
	}
}
