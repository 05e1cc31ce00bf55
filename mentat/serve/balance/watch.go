package balance

import (
	"context"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// ReadLoad reads the engine behind rt; it must return within the scrape
// timeout and set At and OK (see EngineLoad).
type ReadLoad func(ctx context.Context, rt *routes.Route) EngineLoad

// Watch reads every replica's engine load each ScrapeInterval until ctx
// ends, all engines at once; a round waits for its slowest engine, so a
// wedged one ages into "stale" instead of piling up reads. After each
// round it calls round (nil: none), so that room a scrape shows is handed
// on at once (flow control).
func (b *Balancer) Watch(ctx context.Context, src routes.Source, read ReadLoad, round func()) {
	t := time.NewTicker(b.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		b.watchRound(ctx, src.Load(), read)
		if round != nil {
			round()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *Balancer) watchRound(ctx context.Context, snap *routes.Snapshot, read ReadLoad) {
	// One read per group: a group is one engine, whatever it serves.
	byGroup := map[string]*routes.Route{}
	for _, reps := range snap.Replicas {
		for _, rt := range reps {
			if _, ok := byGroup[rt.Group]; !ok {
				byGroup[rt.Group] = rt
			}
		}
	}
	var wg sync.WaitGroup
	for g, rt := range byGroup {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, b.cfg.ScrapeTimeout)
			defer cancel()
			l := read(rctx, rt)
			st := b.replica(g)
			l.Own, l.Ended = float64(st.inflight.Load()), st.ended.Load()
			b.Observe(g, l)
		})
	}
	wg.Wait()
	// Forget groups that left, unless requests to them are still running
	// (their tickets hold the state and must see their own count).
	b.replicas.Range(func(k, v any) bool {
		if _, ok := byGroup[k.(string)]; !ok && v.(*replicaState).inflight.Load() == 0 {
			b.replicas.Delete(k)
		}
		return true
	})
}
