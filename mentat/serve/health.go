package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Health for balancers and orchestrators:
//
//   - GET /livez is 200 while the process serves HTTP at all;
//   - GET /readyz is 200 once the first round of discovery and admission
//     is over (firstRound), 503 before it and from the moment a stop
//     begins (the drain, see Server.Run).
//
// Both answer from one atomic load and a prepared body: a probe never
// waits for discovery, the prober or a request.

// readiness is a prepared /readyz answer.
type readiness struct {
	ready  bool
	reason string
	body   []byte
}

func newReadiness(ready bool, reason string) *readiness {
	v := struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason,omitempty"`
	}{ready, reason}
	b, _ := json.Marshal(v)
	return &readiness{ready: ready, reason: reason, body: append(b, '\n')}
}

var (
	readyNow      = newReadiness(true, "")
	readyDraining = newReadiness(false, "draining")
	liveBody      = []byte("{\"live\":true}\n")
)

// handleLivez answers 200 with {"live":true}: the process accepts and
// serves HTTP. It checks nothing else, so an orchestrator restarts the
// router only when it cannot answer at all.
func handleLivez(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, http.StatusOK, liveBody)
}

// handleReadyz answers 200 {"ready":true} once the first round is over,
// else 503 {"ready":false,"reason":…}: "draining" from the start of a
// stop, or what the first round still waits for.
func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	rd := s.readiness.Load()
	if s.draining.Load() {
		rd = readyDraining
	}
	code := http.StatusOK
	if !rd.ready {
		code = http.StatusServiceUnavailable
	}
	writeHealth(w, code, rd.body)
}

func writeHealth(w http.ResponseWriter, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Ready is closed once the first round of discovery and admission is
// over, when /readyz turns 200 (a stop later does not reopen it).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// checkReady runs after each rebuild until the router is ready: it
// publishes what the first round still waits for, or, once it is over,
// readiness for good (a cluster that loses its engines later does not
// make the router unready: another router would see the same cluster).
func (s *Server) checkReady(now time.Time, views []discovery.View, snap *routes.Snapshot) {
	if s.readiness.Load().ready {
		return
	}
	awaitAnnounce := s.cfg.AnnounceAddr != "" && now.Sub(s.start) < s.cfg.PollInterval
	done, reason := firstRound(views, snap, awaitAnnounce)
	if !done {
		if s.readiness.Load().reason != reason {
			s.readiness.Store(newReadiness(false, reason))
		}
		return
	}
	s.readiness.Store(readyNow)
	close(s.ready)
	s.log.Info("serve_ready", "after", now.Sub(s.start).Round(time.Millisecond), "daemons", len(views),
		"groups", len(snap.Groups), "models", len(snap.Available()))
}

// firstRound reports whether the first round of discovery and admission
// is over and, when it is not, what it waits for: a first read (good or
// failed) of every daemon watched, seeds and the peers and announced
// addresses found by then alike, and a first probe result (an answer or
// a failure) of every group with a candidate address. With awaitAnnounce
// (announcements on, and the router young) and no daemon known, it waits
// for an announcement to bring one.
func firstRound(views []discovery.View, snap *routes.Snapshot, awaitAnnounce bool) (bool, string) {
	var daemons []string
	for _, v := range views {
		if v.Snapshot == nil && v.Err == "" {
			daemons = append(daemons, v.Addr)
		}
	}
	if len(daemons) > 0 {
		return false, "waiting for the first read of daemon " + names(daemons)
	}
	if awaitAnnounce && len(views) == 0 {
		return false, "no daemon known yet; waiting up to POLL_INTERVAL_S for an announcement"
	}
	var groups []string
	for _, name := range snap.GroupNames() {
		if g := snap.Groups[name]; len(g.OpenAICandidates) > 0 && g.ProbedAt.IsZero() {
			groups = append(groups, name)
		}
	}
	if len(groups) > 0 {
		return false, "waiting for the first probe of group " + names(groups)
	}
	return true, ""
}

// names lists the first few of list, and how many more there are.
func names(list []string) string {
	const shown = 4
	if len(list) <= shown {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:shown], ", "), len(list)-shown)
}
