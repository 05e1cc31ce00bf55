package mortred

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// kill SIGKILLs a running model server with a request in flight and
// returns the time of the kill and the gateway's answer to that request.
func killMidRequest(t *testing.T, d deployment, id string, pid int) (time.Time, stack.Reply) {
	t.Helper()
	type result struct {
		r   stack.Reply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := d.infer(id, stack.Envelope("doomed", `{"delay_ms":20000}`, stack.DarkPNG))
		ch <- result{r, err}
	}()
	testproc.Eventually(t, 30*time.Second, id+" busy with the doomed request", func() error {
		n, err := d.modelMetric(id, "mortred_workers_busy")
		if err != nil || n < 1 {
			return fmt.Errorf("busy %v %v", n, err)
		}
		return nil
	})
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("the gateway did not answer the in-flight request: %v", res.err)
		}
		return killed, res.r
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight request still hangs 30 s after its model server was killed")
	}
	panic("unreachable")
}

// TestModelServerKilledMidRequest: a model server dies (SIGKILL) while it
// runs a request. The gateway answers that request 502 or 503 with an
// envelope, a request while it is down gets 503 with Retry-After, the
// supervisor restarts it after a backoff that doubles on the next crash,
// and the next request succeeds.
func TestModelServerKilledMidRequest(t *testing.T) {
	t.Parallel()
	d := deploy(t, []stack.Model{{ID: "CRASHY", Keys: map[string]any{"worker_nums": 1}}}, nil)
	first := d.Server(t, "CRASHY")

	backoff := 500 * time.Millisecond
	prev := first
	for round := 1; round <= 2; round++ {
		killed, r := killMidRequest(t, d, "CRASHY", prev.PID)
		t.Logf("round %d: in-flight request answered %s", round, r)
		if r.Code != http.StatusBadGateway && r.Code != http.StatusServiceUnavailable {
			t.Fatalf("in-flight request to a killed model server: %s; want 502 or 503", r)
		}
		var env stack.Response
		if err := r.JSON(&env); err != nil || env.Status == 0 {
			t.Fatalf("the 5xx is not an error envelope: %v %v", r, err)
		}
		// While the supervisor waits out the backoff nothing listens: a new
		// connection is refused (503 with Retry-After). A request that lands
		// on a pooled connection the gateway has not yet seen die gets the
		// reset as a 502 instead.
		down, err := d.infer("CRASHY", stack.Envelope("down", "", stack.DarkPNG))
		if err != nil {
			t.Fatal(err)
		}
		since := time.Since(killed)
		t.Logf("round %d: request %s after the kill: %s", round, since.Round(time.Millisecond), down)
		switch {
		case since >= backoff/2:
			// Too late to be sure it met the backoff; a restarted server may answer.
		case down.Code == http.StatusServiceUnavailable && down.Header.Get("Retry-After") == "":
			t.Fatalf("503 without Retry-After: %s", down)
		case down.Code != http.StatusServiceUnavailable && down.Code != http.StatusBadGateway:
			t.Fatalf("request %s after the kill: %s; want 503 (or 502 on a stale pooled connection)", since, down)
		}

		// The supervisor learns of the kill only when it reaps the child
		// (its output pipes close, then wait returns): until then its status
		// still shows the killed pid running and ready, even after the
		// gateway has answered 502. Under load that lag outlasts the two
		// requests above, so wait for a new pid, not just for "ready".
		st := d.WaitFor(t, "CRASHY", 60*time.Second, "restarted: a new pid, running and ready", func(st stack.Status) bool {
			return st.State == "running" && st.Ready && st.PID > 0 && st.PID != prev.PID
		})
		waited := time.UnixMilli(st.StartedAtMS).Sub(killed)
		t.Logf("round %d: restarted as pid %d %s after the kill (backoff %s), restart_count %d, last exit %q",
			round, st.PID, waited.Round(time.Millisecond), backoff, st.RestartCount, st.LastExitStatus)
		if st.RestartCount != prev.RestartCount+1 {
			t.Fatalf("not restarted once: before %+v, after %+v", prev, st)
		}
		if !strings.Contains(st.LastExitStatus, "signal") && !strings.Contains(st.LastExitStatus, "killed") {
			t.Fatalf("last_exit_status %q does not say it was killed", st.LastExitStatus)
		}
		// Clock granularity: started_at is in milliseconds.
		if waited < backoff-10*time.Millisecond {
			t.Fatalf("restarted %s after the crash, before the %s backoff", waited, backoff)
		}
		d.mustInfer(t, "CRASHY")
		prev = st
		backoff *= 2
	}
}
