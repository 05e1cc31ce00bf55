package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// RecentlyServed is how recently a model must have routed for a request
// to wait for it (MODEL_WAIT_S) rather than be refused at once: an engine
// restarting comes back within it; a model retired longer ago is gone.
const RecentlyServed = 10 * time.Minute

// modelPoll is how often a waiting request looks at the route snapshot.
const modelPoll = 100 * time.Millisecond

// routeOrWait is route, except that with ModelWait a model that routed in
// the last RecentlyServed and does not now (its engine restarting, its
// only replica failing a probe) is waited for, up to ModelWait, while the
// client stays; past it the refusal is route's own.
func (p *Proxy) routeOrWait(ctx context.Context, x *exchange, model string, k *keys.Key) error {
	err := p.route(x, model, k)
	if err != nil && p.cfg.Ready != nil {
		if err = p.awaitFirstRound(ctx, x, model, k, err); errors.Is(err, errClientGone) {
			return err
		}
	}
	if p.cfg.ModelWait <= 0 {
		return err
	}
	now := time.Now()
	if err == nil {
		p.markServed(model, now)
		return nil
	}
	v, ok := p.served.Load(model)
	if !ok || now.Sub(time.Unix(v.(*atomic.Int64).Load(), 0)) > RecentlyServed {
		return err
	}
	wait := time.NewTimer(p.cfg.ModelWait)
	defer wait.Stop()
	tick := time.NewTicker(modelPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return errClientGone
		case <-wait.C:
			return err
		case <-tick.C:
		}
		if err = p.route(x, model, k); err == nil {
			p.markServed(model, time.Now())
			return nil
		}
	}
}

// FirstRoundWait bounds how long a request waits for the router's first
// round of discovery and admission (Config.Ready). The round ends by
// itself within a daemon read's and a few probes' timeouts; this only
// keeps a request from waiting for ever should it not.
const FirstRoundWait = 30 * time.Second

// awaitFirstRound waits, while the first round is not over, for it to
// end, and routes again then; refused is the answer without the wait.
func (p *Proxy) awaitFirstRound(ctx context.Context, x *exchange, model string, k *keys.Key, refused error) error {
	select {
	case <-p.cfg.Ready:
		return refused
	default:
	}
	t := time.NewTimer(FirstRoundWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errClientGone
	case <-t.C:
		return refused
	case <-p.cfg.Ready:
	}
	return p.route(x, model, k)
}

// markServed records that model routed at now; the map is written at most
// once a second per model.
func (p *Proxy) markServed(model string, now time.Time) {
	s := now.Unix()
	if v, ok := p.served.Load(model); ok {
		if a := v.(*atomic.Int64); a.Load() != s {
			a.Store(s)
		}
		return
	}
	a := &atomic.Int64{}
	a.Store(s)
	p.served.LoadOrStore(model, a)
}
