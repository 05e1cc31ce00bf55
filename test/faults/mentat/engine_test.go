package mentat

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// twoGroups starts a daemon with engines alpha (model alpha-7b) and beta
// (beta-1b) and a router on it, and waits until both models route.
func twoGroups(t *testing.T, routerExtra ...string) (*daemon, *router) {
	t.Helper()
	d := startDaemon(t, testproc.FreePort(t))
	startAgent(t, d.addr, engineOpts{group: "alpha", model: "alpha-7b", port: testproc.FreePort(t)})
	startAgent(t, d.addr, engineOpts{group: "beta", model: "beta-1b", port: testproc.FreePort(t)})
	r := startRouter(t, d.addr, routerExtra...)
	r.waitModels(t, "alpha-7b", "beta-1b")
	return d, r
}

type drained struct {
	done bool
	err  error
	at   time.Time
}

func drainAsync(s *stream) <-chan drained {
	ch := make(chan drained, 1)
	go func() {
		done, err := s.drain()
		ch <- drained{done, err, time.Now()}
	}()
	return ch
}

// waitUnhealthy waits until group reads unhealthy with a why_not that
// contains want, and returns the reason.
func waitUnhealthy(t *testing.T, r *router, group, want string) string {
	t.Helper()
	var why string
	testproc.Eventually(t, 30*time.Second, group+" unhealthy ("+want+")", func() error {
		st, err := r.status()
		if err != nil {
			return err
		}
		g, ok := st.Groups[group]
		if !ok {
			return fmt.Errorf("group %s missing from /status.json: %+v", group, st.Groups)
		}
		if g.Healthy || g.WhyNot == nil || !strings.Contains(*g.WhyNot, want) {
			return fmt.Errorf("group %s: %+v why_not=%v", group, g, deref(g.WhyNot))
		}
		why = *g.WhyNot
		return nil
	})
	return why
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestEngineKilledMidStream: an engine killed with SIGKILL while streaming.
// The client's stream must end promptly and visibly truncated (no [DONE],
// a read error rather than a clean end), the group must turn unhealthy
// with its reason, and the other group must keep serving throughout.
func TestEngineKilledMidStream(t *testing.T) {
	t.Parallel()
	d, r := twoGroups(t)
	pid := enginePID(t, d.addr, "alpha")

	// 3000 tokens at 10 ms: 30 s of generation, far past the test.
	victim, err := openStream(r.base, "alpha-7b", 3000)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.close()
	// A beta stream that spans the kill and must finish normally.
	bystander, err := openStream(r.base, "beta-1b", 200)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.close()
	for range 3 {
		if _, err := victim.frame(); err != nil {
			t.Fatalf("alpha stream before the kill: %v", err)
		}
	}

	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-drainAsync(victim):
		t.Logf("alpha stream ended %s after the kill: done=%v err=%v", res.at.Sub(killed).Round(time.Millisecond), res.done, res.err)
		if res.done || res.err == nil {
			t.Fatalf("the stream of a killed engine ended as if complete (done=%v err=%v); a truncated answer must be visible", res.done, res.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the client's stream still hangs 15 s after its engine was killed")
	}

	select {
	case res := <-drainAsync(bystander):
		if !res.done || res.err != nil {
			t.Fatalf("beta stream spanning alpha's death: done=%v err=%v", res.done, res.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("beta stream did not finish")
	}

	why := waitUnhealthy(t, r, "alpha", "")
	t.Logf("alpha why_not: %s", why)
	if !strings.Contains(why, "no running actors") && !strings.Contains(why, "probe failed") {
		t.Fatalf("why_not %q names neither the dead actor nor the failed probe", why)
	}
	testproc.Eventually(t, 30*time.Second, "alpha-7b gone from /v1/models", func() error {
		ids, err := r.models()
		if err != nil {
			return err
		}
		if slices.Contains(ids, "alpha-7b") || !slices.Contains(ids, "beta-1b") {
			return fmt.Errorf("/v1/models lists %v", ids)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The model is remembered from the last good probe, so the answer is a
	// 503 with the reason, not a 404.
	rep, err := post(ctx, r.base, "alpha-7b", 3)
	if err != nil || rep.code != http.StatusServiceUnavailable || !strings.Contains(rep.body, "alpha") {
		t.Fatalf("request to the dead model: %v %d %s; want 503 naming the group and why", err, rep.code, rep.body)
	}
	mustServe(t, r.base, "beta-1b")
}

// TestEngineFrozen: an engine stopped with SIGSTOP accepts connections (the
// kernel does) but never answers. Requests already in flight must end at
// SERVING_TIMEOUT_S, the probe must fail, new requests must get 503 with
// the reason, and after SIGCONT the group comes back.
func TestEngineFrozen(t *testing.T) {
	t.Parallel()
	const servingTimeout = 4 * time.Second
	d, r := twoGroups(t, "SERVING_TIMEOUT_S=4")
	pid := enginePID(t, d.addr, "alpha")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	started := time.Now()
	var streams []<-chan drained
	for range 3 {
		s, err := openStream(r.base, "alpha-7b", 3000)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		streams = append(streams, drainAsync(s))
	}
	plain := make(chan reply, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rep, err := post(ctx, r.base, "alpha-7b", 3000)
		if err != nil {
			rep = reply{code: -1, body: err.Error()}
		}
		plain <- rep
	}()
	// Freeze once the plain request is running in the engine too.
	engine := "http://127.0.0.1:" + enginePort(t, r, "alpha")
	testproc.Eventually(t, 20*time.Second, "4 requests running in alpha's engine", func() error {
		n, err := scrapeGauge(engine+"/metrics", "vllm:num_requests_running")
		if err != nil || n < 4 {
			return fmt.Errorf("running %v %v", n, err)
		}
		return nil
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()

	for i, ch := range streams {
		select {
		case res := <-ch:
			elapsed := res.at.Sub(started)
			t.Logf("stream %d ended %s after it started: done=%v err=%v", i, elapsed.Round(time.Millisecond), res.done, res.err)
			if res.done || res.err == nil {
				t.Fatalf("stream %d of a frozen engine ended as if complete", i)
			}
			if res.at.Before(frozen.Add(servingTimeout / 2)) {
				t.Fatalf("stream %d was cut %s after the freeze, long before SERVING_TIMEOUT_S (%s)", i, res.at.Sub(frozen), servingTimeout)
			}
		case <-time.After(servingTimeout + 20*time.Second):
			t.Fatalf("stream %d still hangs %s after it started; SERVING_TIMEOUT_S is %s", i, time.Since(started), servingTimeout)
		}
	}
	select {
	case rep := <-plain:
		t.Logf("in-flight non-streaming request: %d %s", rep.code, rep.body)
		if rep.code != http.StatusGatewayTimeout || !strings.Contains(rep.body, "SERVING_TIMEOUT_S") {
			t.Fatalf("in-flight request to a frozen engine: %d %s; want 504 naming SERVING_TIMEOUT_S", rep.code, rep.body)
		}
	case <-time.After(servingTimeout + 20*time.Second):
		t.Fatal("in-flight non-streaming request still hangs")
	}

	why := waitUnhealthy(t, r, "alpha", "probe failed")
	t.Logf("alpha why_not while frozen: %s", why)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	rep, err := post(ctx, r.base, "alpha-7b", 3)
	if err != nil || rep.code != http.StatusServiceUnavailable || !strings.Contains(rep.body, "probe failed") {
		t.Fatalf("new request to a frozen engine: %v %d %s; want 503 with the probe failure", err, rep.code, rep.body)
	}
	t.Logf("new request refused in %s: %s", time.Since(t0).Round(time.Millisecond), rep.body)
	mustServe(t, r.base, "beta-1b")

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.waitModels(t, "alpha-7b")
	mustServe(t, r.base, "alpha-7b")
}

// enginePort is the port of the group's OpenAI endpoint in /status.json.
func enginePort(t *testing.T, r *router, group string) string {
	t.Helper()
	st, err := r.status()
	if err != nil {
		t.Fatal(err)
	}
	g := st.Groups[group]
	if g.OpenAI == nil {
		t.Fatalf("group %s has no endpoint in use: %+v", group, g)
	}
	u := strings.TrimSuffix(*g.OpenAI, "/v1")
	return u[strings.LastIndex(u, ":")+1:]
}
