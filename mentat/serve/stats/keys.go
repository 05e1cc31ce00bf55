package stats

import (
	"encoding/json"
	"net/http"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// Keys is the key store's usage (keys.Store), for the router with keys on.
type Keys interface {
	// Usage is every key's usage and limits now, in file order.
	Usage() []keys.Usage
	// Series is the per-key usage series taken after sinceMS.
	Series(sinceMS int64) keys.SeriesSnapshot
}

// SetKeys makes /stats.json carry every key's usage (its "keys" array);
// call it before serving. Without it (keys off) the document has no
// "keys" field.
func (s *Stats) SetKeys(k Keys) { s.keys = k }

// KeysSeriesHandler serves GET /stats/keys/series.json[?since=MS]: the key
// store's series (keys.SeriesSnapshot: times, and per key id requests/s,
// units/s and rejections/s), sampled every 10 s over the last 15 minutes.
func KeysSeriesHandler(k Keys) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		since, ok := seriesRequest(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(k.Series(since))
	})
}
