package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
)

// maxModelsBytes bounds one /models answer.
const maxModelsBytes = 8 << 20

// probeResult is the outcome of one probe round of a group.
type probeResult struct {
	at time.Time // zero: never probed
	ok bool
	// url is the candidate that answered (ok), errs every candidate tried
	// with its error, in the order tried (!ok).
	url  string
	errs []string
	// entries are the engine's /models entries verbatim, models their ids
	// sorted (ok only).
	entries []json.RawMessage
	models  []string
}

// probeGroup is the admission state of one group. One goroutine probes it;
// the builder reads it under mu.
type probeGroup struct {
	name   string
	cancel context.CancelFunc
	kick   chan struct{}

	mu    sync.Mutex
	cands []string
	// cancelRound stops the round in flight. A round over a list that has
	// since changed is thrown away anyway, and one stuck on a candidate the
	// node no longer announces (a dead link: PROBE_TIMEOUT_S, twice with the
	// fresh-connection retry) would otherwise hold the group unroutable
	// until it gives up.
	cancelRound context.CancelFunc
	// inUse is the candidate live traffic uses ("" when none answers;
	// after a list change it may be one no longer listed, until the next
	// round ends); since is when it took over, the clock promotion runs on.
	inUse       string
	since       time.Time
	lastPromote time.Time
	result      probeResult
	lastGood    probeResult
}

// prober probes every group's candidates: it keeps the first that answers,
// stays on it until it stops answering, then falls through; every promote
// interval it re-tries the candidates ranked above the one in use.
type prober struct {
	interval, timeout, promote time.Duration
	getter                     *discovery.Getter
	log                        *slog.Logger
	// upstream are the keys sent with each group's probes.
	upstream *upstream.Keys
	onChange func()

	ctx    context.Context
	wg     sync.WaitGroup
	mu     sync.Mutex
	groups map[string]*probeGroup

	// retries counts probes re-sent on a fresh connection.
	retries atomic.Uint64
	// probesOK and probesFailed count single candidate probes by outcome.
	probesOK, probesFailed atomic.Uint64
}

func newProber(ctx context.Context, interval, timeout, promote time.Duration, log *slog.Logger, onChange func()) *prober {
	return &prober{interval: interval, timeout: timeout, promote: promote, getter: discovery.NewGetter(0), log: log,
		onChange: onChange, ctx: ctx, groups: map[string]*probeGroup{}}
}

// sync makes the probed groups exactly those in cands (group name →
// candidate URLs, best first). A group whose list changed keeps the
// candidate in use and its last result until a round over the new list,
// started at once, has found the next candidate (or found none).
func (p *prober) sync(cands map[string][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, g := range p.groups {
		if _, ok := cands[name]; !ok {
			g.cancel()
			delete(p.groups, name)
		}
	}
	for name, list := range cands {
		g := p.groups[name]
		if g == nil {
			if p.ctx.Err() != nil {
				continue
			}
			ctx, cancel := context.WithCancel(p.ctx)
			g = &probeGroup{name: name, cancel: cancel, kick: make(chan struct{}, 1), cands: slices.Clone(list)}
			p.groups[name] = g
			p.wg.Go(func() { p.run(ctx, g) })
			continue
		}
		g.mu.Lock()
		changed := !slices.Equal(g.cands, list)
		if changed {
			g.cands = slices.Clone(list)
			// A candidate in use that left the list (the node dropped an
			// address) stays in use, with its last result, until the round
			// kicked below has walked the new list: it is the last
			// candidate proven to answer, and clearing it here would take
			// the model out of the route table ("not probed yet") for as
			// long as that round takes, though a working candidate is
			// left. The round starts at the top of the new list, since
			// the one in use is not on it.
			if g.cancelRound != nil {
				g.cancelRound()
			}
		}
		g.mu.Unlock()
		if changed {
			select {
			case g.kick <- struct{}{}:
			default:
			}
		}
	}
}

// state returns the group's candidate in use, its latest result and the
// last successful one.
func (p *prober) state(name string) (inUse string, cur, good probeResult, known bool) {
	p.mu.Lock()
	g := p.groups[name]
	p.mu.Unlock()
	if g == nil {
		return "", probeResult{}, probeResult{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inUse, g.result, g.lastGood, true
}

func (p *prober) wait() {
	p.wg.Wait()
	p.getter.Close()
}

func (p *prober) run(ctx context.Context, g *probeGroup) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithCancel(ctx)
		g.mu.Lock()
		g.cancelRound = cancel
		g.mu.Unlock()
		p.round(rctx, g)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// round probes one group once.
func (p *prober) round(ctx context.Context, g *probeGroup) {
	defer recoverLog(p.log, "probe_panic", "group", g.name)
	g.mu.Lock()
	cands, inUse, since, lastPromote := slices.Clone(g.cands), g.inUse, g.since, g.lastPromote
	g.mu.Unlock()
	if len(cands) == 0 {
		return
	}
	var res probeResult
	idx := slices.Index(cands, inUse)
	order := cands
	if idx >= 0 {
		// Sticky: the one in use first, then fall through below it, then
		// wrap to those above.
		order = append(append([]string{inUse}, cands[idx+1:]...), cands[:idx]...)
	}
	for _, u := range order {
		r, err := p.probe(ctx, g.name, u)
		if ctx.Err() != nil {
			return // our own cancellation says nothing about the engine
		}
		if err == nil {
			res = r
			break
		}
		res.errs = append(res.errs, u+": "+err.Error())
	}
	now := time.Now()
	res.at = now
	newInUse := res.url
	// Promotion: serving from a lower-ranked candidate, re-try the ones
	// above it every promote interval.
	if res.ok && idx > 0 && newInUse == inUse && now.Sub(later(since, lastPromote)) >= p.promote {
		lastPromote = now
		for _, u := range cands[:idx] {
			r, err := p.probe(ctx, g.name, u)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				res, newInUse = r, u
				res.at = time.Now()
				break
			}
		}
	}

	g.mu.Lock()
	if !slices.Equal(g.cands, cands) {
		g.mu.Unlock()
		return // the list changed under us; sync kicked a fresh round
	}
	prevOK, prevUse, first := g.result.ok, g.inUse, g.result.at.IsZero()
	g.result, g.lastPromote = res, lastPromote
	if res.ok {
		g.lastGood = res
	}
	if newInUse != prevUse {
		g.inUse, g.since = newInUse, now
	}
	g.mu.Unlock()

	switch {
	case res.ok && newInUse != prevUse && prevUse != "":
		p.log.Info("probe_switched", "group", g.name, "from", prevUse, "to", newInUse)
	case res.ok && !prevOK:
		p.log.Info("probe_ok", "group", g.name, "url", newInUse, "models", strings.Join(res.models, ","))
	case !res.ok && (prevOK || first):
		p.log.Warn("probe_failed", "group", g.name, "tried", strings.Join(res.errs, "; "))
	}
	p.onChange()
}

// probe asks one candidate of group for its model list, with the group's
// upstream key when it has one.
func (p *prober) probe(ctx context.Context, group, base string) (probeResult, error) {
	var h http.Header
	if auth := p.upstream.Authorization(group); auth != nil {
		h = http.Header{"Authorization": auth}
	}
	r, err := p.getter.GetWith(ctx, strings.TrimRight(base, "/")+"/models", h, p.timeout, maxModelsBytes)
	if r.Retried {
		p.retries.Add(1)
	}
	res, err := parseModels(base, r.Body, err)
	if ctx.Err() == nil {
		if err == nil {
			p.probesOK.Add(1)
		} else {
			p.probesFailed.Add(1)
		}
	}
	return res, err
}

// parseModels reads an engine's /models answer.
func parseModels(base string, body []byte, err error) (probeResult, error) {
	if err != nil {
		return probeResult{}, err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return probeResult{}, fmt.Errorf("answer is not an OpenAI model list: %v", err)
	}
	if list.Data == nil {
		return probeResult{}, errors.New(`answer has no "data" list of models`)
	}
	res := probeResult{ok: true, url: base}
	seen := map[string]bool{}
	for _, e := range list.Data {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(e, &m) != nil || m.ID == "" || seen[m.ID] {
			continue // an entry without a usable id cannot route
		}
		seen[m.ID] = true
		res.entries = append(res.entries, e)
		res.models = append(res.models, m.ID)
	}
	sort.Strings(res.models)
	return res, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
