package app

import (
	"context"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
)

// engineLoad reads a replica's load from its engine's /metrics through
// the stats scraper (shared with /stats.json), at most half an interval
// old. The numbers are the whole
// engine's, every model it serves: they share its batch and its KV cache.
// An engine that publishes no request counts has no load to compare and
// counts as stale.
func engineLoad(st *stats.Stats, every time.Duration) balance.ReadLoad {
	return func(ctx context.Context, rt *routes.Route) balance.EngineLoad {
		// A page's scrape from this round may serve; an older one would
		// make the load older than the interval says.
		fams, err := st.Scrape(ctx, rt, every/2)
		l := balance.EngineLoad{At: time.Now()}
		if err != nil {
			return l
		}
		// No metric is labelled with an empty model name, so this
		// matches every series: the engine's totals.
		n := fams.Extract("")
		if n.Running == nil && n.Waiting == nil {
			return l
		}
		l.OK = true
		if n.Running != nil {
			l.Running = *n.Running
		}
		if n.Waiting != nil {
			l.Waiting = *n.Waiting
		}
		if n.KV != nil {
			l.KV, l.HasKV = *n.KV, true
		}
		return l
	}
}

// routing adapts the balancer to what /stats.json shows per replica.
type routing struct{ b *balance.Balancer }

func (r routing) Replica(rt *routes.Route) stats.RoutingRow {
	i := r.b.Info(rt)
	return stats.RoutingRow{State: i.State, Load: i.Load, Decisions: i.Decisions}
}
