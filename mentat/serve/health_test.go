package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// health GETs (or HEADs) path and returns the status, the body and the
// answer's header.
func health(t *testing.T, method, url string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Close {
		resp.Header.Set("Connection", "close") // net/http takes it out of the header
	}
	return resp.StatusCode, string(b), resp.Header
}

// The first round is over once every watched daemon has been read (or
// failed) and every group with a candidate has a probe result; until then
// it says what it waits for.
func TestFirstRound(t *testing.T) {
	read := discovery.View{Addr: "10.0.0.1:6380", Snapshot: &wire.Snapshot{}}
	failed := discovery.View{Addr: "10.0.0.2:6380", Err: "connection refused"}
	unread := discovery.View{Addr: "10.0.0.3:6380"}
	snap := func(groups ...*routes.Group) *routes.Snapshot {
		m := map[string]*routes.Group{}
		for _, g := range groups {
			m[g.Name] = g
		}
		return routes.New(time.Now(), nil, m, nil)
	}
	probed := &routes.Group{Name: "a", OpenAICandidates: []string{"http://h:1/v1"}, ProbedAt: time.Now()}
	unprobed := &routes.Group{Name: "b", OpenAICandidates: []string{"http://h:2/v1"}}
	noCandidate := &routes.Group{Name: "c"} // nothing to probe: not waited for
	for _, c := range []struct {
		name     string
		views    []discovery.View
		snap     *routes.Snapshot
		announce bool
		want     string // "" when done
	}{
		{"nothing to watch", nil, snap(), false, ""},
		{"waiting for an announcement", nil, snap(), true, "no daemon known yet; waiting up to POLL_INTERVAL_S for an announcement"},
		{"a daemon not read", []discovery.View{read, unread, failed}, snap(), false, "waiting for the first read of daemon 10.0.0.3:6380"},
		{"a group not probed", []discovery.View{read, failed}, snap(probed, unprobed, noCandidate), false, "waiting for the first probe of group b"},
		{"all read and probed", []discovery.View{read, failed}, snap(probed, noCandidate), true, ""},
		{"many groups", []discovery.View{read}, snap(unprobed, &routes.Group{Name: "d", OpenAICandidates: []string{"x"}},
			&routes.Group{Name: "e", OpenAICandidates: []string{"x"}}, &routes.Group{Name: "f", OpenAICandidates: []string{"x"}},
			&routes.Group{Name: "g", OpenAICandidates: []string{"x"}}), false, "waiting for the first probe of group b, d, e, f and 1 more"},
	} {
		done, reason := firstRound(c.views, c.snap, c.announce)
		if done != (c.want == "") || reason != c.want {
			t.Errorf("%s: done %v, %q; want %q", c.name, done, reason, c.want)
		}
	}
}

// /readyz is 503 until the first round of discovery and probes is over
// (here: a group whose engine has not answered its first probe yet), then
// 200 for good; /livez is 200 throughout. Both are JSON, not cached, and
// answer HEAD.
func TestReadyzAfterFirstRound(t *testing.T) {
	eng := startEngine(t, "127.0.0.1:0", "m1")
	eng.mode.Store(engineHang)
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"slow": group("127.0.0.1", openai(eng.port(), ""), "running"),
	}))
	r := startServer(t, testConfig(d.addr()))

	var body string
	var code int
	var h http.Header
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, h = health(t, "GET", r.base+"/readyz")
		if strings.Contains(body, "probe") || time.Now().After(deadline) {
			break
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz before the first probe: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || body != `{"ready":false,"reason":"waiting for the first probe of group slow"}`+"\n" ||
		h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("/readyz while the probe hangs: %d %q %v", code, body, h)
	}
	if code, body, _ := health(t, "GET", r.base+"/livez"); code != 200 || body != `{"live":true}`+"\n" {
		t.Fatalf("/livez: %d %q", code, body)
	}
	if code, body, _ := health(t, "HEAD", r.base+"/readyz"); code != http.StatusServiceUnavailable || body != "" {
		t.Fatalf("HEAD /readyz: %d %q", code, body)
	}

	eng.mode.Store(engineOK)
	close(eng.release) // the hanging probe returns an empty answer: a failed first probe
	eventually(t, "/readyz 200", func() bool { code, _, _ := health(t, "GET", r.base+"/readyz"); return code == 200 })
	if code, body, _ := health(t, "GET", r.base+"/readyz"); body != `{"ready":true}`+"\n" {
		t.Fatalf("/readyz when ready: %d %q", code, body)
	}
	if r.logs.CountEvent("serve_ready") != 1 {
		t.Errorf("serve_ready logged %d times", r.logs.CountEvent("serve_ready"))
	}
	// Readiness is the router's, not the cluster's: the daemon failing
	// later does not take it back.
	d.failing.Store(true)
	r.waitDaemonError(t, d.addr())
	if code, _, _ := health(t, "HEAD", r.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz after the daemon failed: %d", code)
	}
}

// A seed that cannot be read counts as read: the router is ready with
// what it has, and says so while it waits.
func TestReadyzSeedDown(t *testing.T) {
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", nil, nil))
	d.failing.Store(true)
	r := startServer(t, testConfig(d.addr()))
	eventually(t, "/readyz 200", func() bool { code, _, _ := health(t, "GET", r.base+"/readyz"); return code == 200 })
}

func (r *running) waitDaemonError(t *testing.T, addr string) {
	t.Helper()
	eventually(t, "daemon "+addr+" to fail", func() bool {
		dm, ok := r.status(t).Daemons[addr]
		return ok && dm.Error != nil
	})
}

// eventually polls cond until it holds, for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testproc.Until(t, 20*time.Second, what, cond)
}
