package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// The refusals a first user meets say what to do next: each why_not gate
// gets its next step, and a 404 names the groups whose models are not
// known yet (an engine still loading) and an unreachable daemon.
func TestRefusalNextSteps(t *testing.T) {
	rt, err := routes.NewRoute("m1", "up", "http://127.0.0.1:8000/v1", "vllm")
	if err != nil {
		t.Fatal(err)
	}
	daemons := map[string]*routes.Daemon{"127.0.0.1:6380": {Connected: true}}
	snap := routes.New(time.Now(), map[string]*routes.Route{"m1": rt}, map[string]*routes.Group{
		"up":      {Name: "up", Healthy: true, Models: []string{"m1"}},
		"loading": {Name: "loading", WhyNot: "endpoint probe failed: http://127.0.0.1:8001/v1: connection refused"},
		"fresh":   {Name: "fresh", WhyNot: "not probed yet"},
		"stopped": {Name: "stopped", WhyNot: "no running actors", Models: []string{"m2"}},
		"stale":   {Name: "stale", WhyNot: "endpoint probe stale", Models: []string{"m3"}},
		"walled":  {Name: "walled", WhyNot: "announced 8000/v1 on 10.9.9.9, and no address of that node passes ALLOWED_SOURCES", Models: []string{"m4"}},
		"noapi":   {Name: "noapi", WhyNot: "no announced OpenAI endpoint", Models: []string{"m5"}},
	}, daemons)
	for _, c := range []struct{ model, want string }{
		{"loading", `model "loading" is served by group "loading", which is not routable now: endpoint probe failed: http://127.0.0.1:8001/v1: connection refused (an engine still loading answers like this until it serves /models; retry then; see /status.json)`},
		{"fresh", `model "fresh" is served by group "fresh", which is not routable now: not probed yet (an engine still loading answers like this until it serves /models; retry then; see /status.json)`},
		{"m2", `model "m2" is served by group "stopped", which is not routable now: no running actors (the daemon reports no running actor for the group; start or restart its model container; see /status.json)`},
		{"m3", `model "m3" is served by group "stale", which is not routable now: endpoint probe stale (the engine has stopped answering probes within PROBE_TIMEOUT_S; see /status.json)`},
		{"m4", `model "m4" is served by group "walled", which is not routable now: announced 8000/v1 on 10.9.9.9, and no address of that node passes ALLOWED_SOURCES (add a prefix matching one of the node's addresses to the router's ALLOWED_SOURCES; see /status.json)`},
		{"m5", `model "m5" is served by group "noapi", which is not routable now: no announced OpenAI endpoint (set MENTAT_OPENAI_API for the agent on the rank that serves the API; see /status.json)`},
		{"other", `model "other" is not served by this cluster; available models: m1; not routable yet, with models unknown until their engine answers /models: group "fresh" (not probed yet), group "loading" (endpoint probe failed: http://127.0.0.1:8001/v1: connection refused); an engine still loading looks like this: retry once GET /v1/models lists the model`},
	} {
		e := Refusal(snap, c.model)
		want := http.StatusServiceUnavailable
		if c.model == "other" {
			want = http.StatusNotFound
		}
		if e.Status != want || e.Message != c.want || e.Param != "model" {
			t.Errorf("%s: %d %q\nwant %d %q", c.model, e.Status, e.Message, want, c.want)
		}
	}

	// Nothing known because no daemon answers: the 404 says so.
	empty := routes.New(time.Now(), nil, nil, map[string]*routes.Daemon{"127.0.0.1:6380": {Error: "GET /status: connection refused"}})
	want := `model "x" is not served by this cluster; available models: none; no mentatd daemon is reachable (127.0.0.1:6380: GET /status: connection refused)`
	if e := Refusal(empty, "x"); e.Status != http.StatusNotFound || e.Message != want {
		t.Errorf("no daemon: %d %q\nwant %q", e.Status, e.Message, want)
	}
}
