package mentat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// modelsWatch polls /v1/models without pause and records every answer that
// lacks one of the wanted models.
type modelsWatch struct {
	mu     sync.Mutex
	polls  int
	misses []string
	stop   context.CancelFunc
	done   chan struct{}
}

func watchModels(r *router, want ...string) *modelsWatch {
	// Bounded: at most 2 minutes or 20,000 polls, whichever is first.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	w := &modelsWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; i < 20000 && ctx.Err() == nil; i++ {
			ids, err := r.models()
			miss := ""
			switch {
			case err != nil:
				miss = err.Error()
			default:
				for _, m := range want {
					if !slices.Contains(ids, m) {
						miss = fmt.Sprintf("lists %v", ids)
						break
					}
				}
			}
			w.mu.Lock()
			w.polls++
			if miss != "" {
				w.misses = append(w.misses, time.Now().Format("15:04:05.000")+" "+miss)
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *modelsWatch) finish() (polls int, misses []string) {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.misses
}

// TestDaemonRestart: the node daemon restarts on the same port while the
// engines keep running. The router's /status poll and /events WebSocket
// must reconnect to the new process, and /v1/models, polled continuously
// through the restart, must never lose a model: the new daemon starts with
// an empty registry until its agents register again, and that gap must not
// reach routing.
func TestDaemonRestart(t *testing.T) {
	t.Parallel()
	port := testproc.FreePort(t)
	d := startDaemon(t, port)
	startAgent(t, d.addr, engineOpts{group: "alpha", model: "alpha-7b", port: testproc.FreePort(t)})
	startAgent(t, d.addr, engineOpts{group: "beta", model: "beta-1b", port: testproc.FreePort(t)})
	// A long poll interval: after the restart only the /events WebSocket,
	// reconnected, tells the router within the test's deadlines that
	// something changed (the next poll is a minute after the router
	// started).
	r := startRouter(t, d.addr, "POLL_INTERVAL_S=60")
	r.waitModels(t, "alpha-7b", "beta-1b")
	var before daemonStatus
	if err := testproc.GetJSON(client, "http://"+d.addr+"/status", &before); err != nil {
		t.Fatal(err)
	}

	w := watchModels(r, "alpha-7b", "beta-1b")
	time.Sleep(300 * time.Millisecond) // a few good polls before the restart
	d.Stop(10 * time.Second)
	d2 := startDaemon(t, port)

	// The agents notice the new boot at their next heartbeat and register
	// again; the router must then see both groups on the new daemon.
	testproc.Eventually(t, 30*time.Second, "agents registered with the new daemon", func() error {
		var st daemonStatus
		if err := testproc.GetJSON(client, "http://"+d2.addr+"/status", &st); err != nil {
			return err
		}
		if st.BootID == before.BootID {
			return fmt.Errorf("still the old boot %s", st.BootID)
		}
		if len(st.Groups["alpha"].Actors) == 0 || len(st.Groups["beta"].Actors) == 0 {
			return fmt.Errorf("groups %v", st.Groups)
		}
		return nil
	})
	// The reconnected WebSocket rings the doorbell for every change: a
	// group that registers now shows up well before the next poll.
	registered := time.Now()
	startAgent(t, d2.addr, engineOpts{group: "gamma", model: "gamma-3b", port: testproc.FreePort(t)})
	testproc.Eventually(t, 20*time.Second, "gamma-3b routable through the reconnected /events", func() error {
		ids, err := r.models()
		if err != nil || !slices.Contains(ids, "gamma-3b") {
			return fmt.Errorf("/v1/models lists %v %v", ids, err)
		}
		return nil
	})
	t.Logf("gamma routable %s after its agent started", time.Since(registered).Round(time.Millisecond))

	polls, misses := w.finish()
	t.Logf("/v1/models polled %d times through the restart", polls)
	if polls < 20 {
		t.Fatalf("only %d polls of /v1/models: the restart was not watched", polls)
	}
	if len(misses) > 0 {
		t.Fatalf("%d of %d /v1/models answers lost a model during the daemon restart, first: %s",
			len(misses), polls, strings.Join(misses[:min(len(misses), 5)], "; "))
	}
	st, err := r.status()
	if err != nil {
		t.Fatal(err)
	}
	if dd := st.Daemons[d.addr]; !dd.Connected {
		t.Fatalf("daemon %s not connected after the restart: %+v", d.addr, dd)
	}
	mustServe(t, r.base, "alpha-7b")
	mustServe(t, r.base, "beta-1b")
}
