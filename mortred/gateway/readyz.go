package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// readyProbeTimeout bounds one model server's /ready during GET /readyz.
const readyProbeTimeout = time.Second

// readyAnswer is the body of GET /readyz, the same shape at 200 and 503.
type readyAnswer struct {
	// Ready: not draining, and at least one of Models ready (with
	// ?model=, that model ready).
	Ready    bool         `json:"ready"`
	Host     string       `json:"host,omitempty"`
	Draining bool         `json:"draining"`
	Models   []readyModel `json:"models"`
}

type readyModel struct {
	ID    string `json:"id"`
	Ready bool   `json:"ready"`
	// Version and Instance are the active instance's in the routes file;
	// absent when the file does not list the model.
	Version  *string `json:"version,omitempty"`
	Instance *int    `json:"instance,omitempty"`
	Reason   string  `json:"reason,omitempty"`
}

// readyz answers whether this host takes work: GET /readyz for the host
// (the catalog, each model with its state), GET /readyz?model=ID for one
// model. It is public, as /healthz is, because balancers and orchestrators
// probe without credentials; it says which models run here, not how to
// call them.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed("GET").ServeHTTP(w, r)
		return
	}
	var ups []*Upstream
	if id := r.URL.Query().Get("model"); id != "" || r.URL.Query().Has("model") {
		u := g.byID[id]
		if u == nil {
			writeEnvelope(w, http.StatusNotFound, statusNotFound, "no model with catalog id "+quote(id)+" on this host", "")
			return
		}
		ups = []*Upstream{u}
	} else {
		ups = make([]*Upstream, len(g.cfg.Upstreams))
		for i := range g.cfg.Upstreams {
			ups[i] = &g.cfg.Upstreams[i]
		}
	}
	ans := readyAnswer{Host: g.cfg.HostID, Draining: g.draining.Load(), Models: make([]readyModel, len(ups))}
	var wg sync.WaitGroup
	for i := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans.Models[i] = g.probeModel(r.Context(), ups[i])
		}()
	}
	wg.Wait()
	for _, m := range ans.Models {
		ans.Ready = ans.Ready || m.Ready
	}
	if ans.Draining {
		ans.Ready = false
	}
	code := http.StatusOK
	if !ans.Ready {
		code = http.StatusServiceUnavailable
	}
	b, _ := json.Marshal(ans)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// probeModel asks the public /ready of the model's active instance (its
// catalog address, or the routes file's).
func (g *Gateway) probeModel(ctx context.Context, u *Upstream) readyModel {
	ctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	m := readyModel{ID: u.ID}
	rt := g.up[u].route.Load()
	if rt.fromFile {
		v, n := rt.active.version, rt.active.number
		m.Version, m.Instance = &v, &n
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rt.active.addr+"/ready", nil)
	if err != nil {
		m.Reason = err.Error()
		return m
	}
	resp, err := g.transport.RoundTrip(req)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		m.Reason = "not running (connection refused)"
	case err != nil:
		m.Reason = "no answer: " + trimErr(err)
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		m.Ready = resp.StatusCode == http.StatusOK
		if !m.Ready {
			m.Reason = fmt.Sprintf("not ready (its /ready answered %d)", resp.StatusCode)
		}
	}
	return m
}
