package mcp

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// maxToolsPerGroup bounds what one upstream can put into the merged list.
const maxToolsPerGroup = 1000

// errEmptyList is a tools/list answer with no tools; like a failure it is
// not cached, since an engine still loading may list nothing yet.
var errEmptyList = errors.New("tools/list answered with no tools")

// groupTools is the refresh loop's state for one group.
type groupTools struct {
	url     string
	tools   []*sdk.Tool // last good answer; nil while failing
	expires time.Time   // when tools must be asked for again
	err     error       // last failure; nil after a good answer
	retryAt time.Time
	backoff time.Duration

	attempted bool // an answer or failure came back from url
	inflight  bool
	refresh   bool // the upstream announced a change
}

type fetchResult struct {
	group, url string
	tools      []*sdk.Tool
	err        error
}

// refresher is the state Run owns; only Run's goroutine touches it.
type refresher struct {
	groups   map[string]*groupTools
	lastSnap *routes.Snapshot
	dirty    bool
	results  chan fetchResult
	fetches  sync.WaitGroup
	applied  map[string]string // merged name → JSON of the tool as added
}

// Run keeps the merged tool set in step with the route snapshots and the
// upstreams' answers until ctx ends: it asks a group for its tools when the
// group appears or its MCP URL changes, when its cached answer is older than
// ToolsTTL, when the upstream announces a change, and after RetryInterval
// (doubling) while it fails or lists nothing. Every change to the merged set
// reaches connected clients as notifications/tools/list_changed. Run returns
// nil when ctx ends, after its in-flight requests have stopped.
func (e *Endpoint) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("mcp: Run is already running")
	}
	defer e.running.Store(false)
	r := &refresher{
		groups:  map[string]*groupTools{},
		results: make(chan fetchResult),
		applied: map[string]string{},
	}
	defer r.fetches.Wait()
	tick := time.NewTicker(e.cfg.SnapshotPoll)
	defer tick.Stop()
	for {
		e.step(ctx, r)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-e.wake:
		case res := <-r.results:
			e.record(r, res)
		}
	}
}

// step reconciles with the current snapshot, starts due fetches and, when
// anything changed, publishes the new merged set. A panic is logged with
// its stack and the loop goes on.
func (e *Endpoint) step(ctx context.Context, r *refresher) {
	defer func() {
		if p := recover(); p != nil {
			e.logger.Error("mcp_refresh_panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	now := time.Now()
	if snap := e.src.Load(); snap != r.lastSnap {
		e.reconcile(r, snap)
	}
	if stale := e.takeStale(); stale != nil {
		for _, st := range r.groups {
			if stale[st.url] {
				st.refresh = true
			}
		}
	}
	for name, st := range r.groups {
		if st.inflight {
			continue
		}
		due := !st.attempted || st.refresh ||
			(st.err == nil && !now.Before(st.expires)) ||
			(st.err != nil && !now.Before(st.retryAt))
		if !due {
			continue
		}
		st.inflight, st.refresh = true, false
		r.fetches.Add(1)
		go e.fetch(ctx, r, name, st.url)
	}
	if r.dirty {
		r.dirty = false
		e.publish(r)
	}
}

// reconcile follows the group set and MCP URLs of snap.
func (e *Endpoint) reconcile(r *refresher, snap *routes.Snapshot) {
	r.lastSnap = snap
	keep := map[string]bool{}
	for name, g := range snap.Groups {
		url := mcpURL(g)
		if url == "" {
			continue
		}
		keep[url] = true
		if st := r.groups[name]; st == nil || st.url != url {
			// An answer still in flight for the old URL is ignored when it
			// lands (record checks the URL).
			r.groups[name] = &groupTools{url: url}
			r.dirty = true
		}
	}
	for name, st := range r.groups {
		if mcpURL(snap.Groups[name]) != st.url {
			delete(r.groups, name)
			r.dirty = true
		}
	}
	e.pool.retain(keep)
}

// fetch asks one group for its tools and hands the answer to the loop.
func (e *Endpoint) fetch(ctx context.Context, r *refresher, group, url string) {
	defer r.fetches.Done()
	res := fetchResult{group: group, url: url}
	res.tools, res.err = e.listTools(ctx, url)
	select {
	case r.results <- res:
	case <-ctx.Done():
	}
}

func (e *Endpoint) listTools(ctx context.Context, url string) ([]*sdk.Tool, error) {
	u, err := e.pool.get(url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	defer cancel()
	var tools []*sdk.Tool
	err = u.do(ctx, sessionLost, func(cs *sdk.ClientSession) error {
		tools = tools[:0]
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			if t == nil || t.Name == "" {
				continue
			}
			if len(tools) == maxToolsPerGroup {
				e.logger.Warn("mcp_group_tools_truncated", "url", url, "kept", maxToolsPerGroup)
				break
			}
			tools = append(tools, t)
		}
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = fmt.Errorf("no tools/list answer within %s (MCP_TIMEOUT_S)", e.cfg.CallTimeout)
	}
	if err == nil && len(tools) == 0 {
		err = errEmptyList
	}
	return tools, err
}

// record applies one answer to the loop's state.
func (e *Endpoint) record(r *refresher, res fetchResult) {
	st := r.groups[res.group]
	if st == nil || st.url != res.url {
		return // the group left or moved while we asked
	}
	st.inflight = false
	st.attempted = true
	r.dirty = true
	now := time.Now()
	if res.err == nil {
		if st.err != nil && st.backoff > 0 {
			e.logger.Info("mcp_group_tools_recovered", "group", res.group, "url", res.url, "tools", len(res.tools))
		}
		st.tools, st.err, st.backoff = res.tools, nil, 0
		st.expires = now.Add(e.cfg.ToolsTTL)
		return
	}
	if st.err == nil || st.err.Error() != res.err.Error() {
		e.logger.Warn("mcp_group_tools_failed", "group", res.group, "url", res.url, "err", res.err)
	}
	st.tools, st.err = nil, res.err
	st.backoff = min(max(st.backoff*2, e.cfg.RetryInterval), e.cfg.ToolsTTL)
	st.retryAt = now.Add(st.backoff)
}
