package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
)

const replicaModel = "shared-7b"

// replicaSet is one daemon with n agents, groups rep-a, rep-b, …, each
// running an enginesim that serves replicaModel.
type replicaSet struct {
	d       *daemon
	engines []*engine
}

func startReplicas(t *testing.T, n int, args ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{d: startDaemon(t, "daemon")}
	for i := range n {
		e := &engine{group: "rep-" + string(rune('a'+i)), model: replicaModel, args: args}
		startAgent(t, rs.d.addr, e)
		rs.engines = append(rs.engines, e)
	}
	return rs
}

// router starts a router over the set with env and waits until every
// replica routes.
func (rs *replicaSet) router(t *testing.T, name string, port int, env ...string) *router {
	t.Helper()
	r := startRouter(t, name, port, append([]string{"MENTAT_DAEMONS=" + rs.d.addr, "ROUTING_SCRAPE_S=0.2"}, env...)...)
	r.waitReplicas(t, len(rs.engines))
	return r
}

// replicaStatus is /status.json's models.<id> with its replicas.
type replicaStatus struct {
	Group    string `json:"group"`
	URL      string `json:"url"`
	Replicas []struct {
		Group string `json:"group"`
		URL   string `json:"url"`
		State string `json:"state"`
	} `json:"replicas"`
}

func (r *router) replicas(t *testing.T) replicaStatus {
	t.Helper()
	var doc struct {
		Models map[string]replicaStatus `json:"models"`
	}
	if err := testproc.GetJSON(client, r.url+"/status.json", &doc); err != nil {
		t.Fatalf("router /status.json: %v", err)
	}
	return doc.Models[replicaModel]
}

// waitReplicas waits until the model has n replicas, all ready (engine
// numbers read).
func (r *router) waitReplicas(t *testing.T, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d ready replicas of %s", n, replicaModel), func() bool {
		st := r.replicas(t)
		if len(st.Replicas) != n {
			return false
		}
		for _, rep := range st.Replicas {
			if rep.State != "ready" {
				return false
			}
		}
		return true
	})
}

// engineMetric sums every series of a metric on e's /metrics.
func engineMetric(t *testing.T, e *engine, name string) float64 {
	t.Helper()
	fams, err := stats.FetchMetrics(context.Background(), client, "http://127.0.0.1:"+itoa(e.port)+"/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", e.group, err)
	}
	return fams.Total(name)
}

// served is how many requests each engine has finished.
func (rs *replicaSet) served(t *testing.T) []float64 {
	t.Helper()
	out := make([]float64, len(rs.engines))
	for i, e := range rs.engines {
		out[i] = engineMetric(t, e, "vllm:request_success_total")
	}
	return out
}

func total(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// ask sends one chat completion through the router and fails the test
// unless it succeeds.
func ask(t *testing.T, url string, header http.Header, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("chat through the router: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat through the router: %d %s", resp.StatusCode, b)
	}
}

func chatBody(system, question string, maxTokens int) string {
	b, _ := json.Marshal(map[string]any{"model": replicaModel, "max_tokens": maxTokens, "messages": []map[string]string{
		{"role": "system", "content": system}, {"role": "user", "content": question}}})
	return string(b)
}

// askOn sends one request and returns the index of the engine that
// served it (requests must go one at a time).
func (rs *replicaSet) askOn(t *testing.T, url string, header http.Header, body string) int {
	t.Helper()
	before := rs.served(t)
	ask(t, url, header, body)
	var after []float64
	eventually(t, "the engine to count the request", func() bool {
		after = rs.served(t)
		return total(after) == total(before)+1
	})
	for i := range after {
		if after[i] > before[i] {
			return i
		}
	}
	panic("unreachable")
}

// Distinct prompts spread over the replicas; the model is listed once;
// /status.json and /stats.json show every replica.
func TestReplicasDistinctPromptsSpread(t *testing.T) {
	rs := startReplicas(t, 3)
	r := rs.router(t, "router", 0)
	if ids := r.models(t); len(ids) != 1 || ids[0] != replicaModel {
		t.Fatalf("/v1/models = %v, want %s once", ids, replicaModel)
	}
	st := r.replicas(t)
	if st.Group != "rep-a" || st.Replicas[0].Group != "rep-a" || st.Replicas[2].Group != "rep-c" ||
		st.Replicas[1].URL != "http://127.0.0.1:"+itoa(rs.engines[1].port)+"/v1" {
		t.Errorf("replicas in /status.json: %+v", st)
	}
	for i := range 30 {
		ask(t, r.url, nil, chatBody(fmt.Sprintf("tenant %d: a system prompt of its own", i), "hello", 2))
	}
	served := rs.served(t)
	for i, n := range served {
		if n < 3 {
			t.Errorf("%s served %v of 30 distinct prompts (%v); want them spread", rs.engines[i].group, n, served)
		}
	}
	var doc struct {
		Models []struct {
			Model, Group string
			Routing      *struct {
				State     string             `json:"state"`
				Decisions map[string]float64 `json:"decisions"`
			} `json:"routing"`
		} `json:"models"`
	}
	if err := testproc.GetJSON(client, r.url+"/stats.json", &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Models) != 3 {
		t.Fatalf("/stats.json rows %+v, want one per replica", doc.Models)
	}
	sum := 0.0
	for i, row := range doc.Models {
		if row.Model != replicaModel || row.Group != rs.engines[i].group || row.Routing == nil || row.Routing.State != "ready" {
			t.Errorf("row %d: %+v", i, row)
			continue
		}
		// New prompts go to their home replica, or by load past it.
		sum += row.Routing.Decisions["home"] + row.Routing.Decisions["load"]
	}
	if sum != 30 {
		t.Errorf("decisions by home or load = %v, want 30 (no prompt shares a prefix)", sum)
	}
}

// decided is the router's routing decisions for the model over every
// replica and reason (/stats.json).
func (r *router) decided(t *testing.T) float64 {
	t.Helper()
	sum := 0.0
	for _, n := range r.decisionsBy(t) {
		sum += n
	}
	return sum
}

// Prompts that share only a short header (the same short system prompt,
// then text of their own) spread over the replicas like distinct ones:
// one block in common is no affinity worth a queue.
func TestReplicasCommonHeaderSpreads(t *testing.T) {
	rs := startReplicas(t, 3, "--itl", "50ms")
	r := rs.router(t, "router", 0)
	system := "You are a helpful assistant. Answer the question below carefully, in plain words, and say so when you are unsure of the answer."
	system += " " + system // about 260 bytes: one block of the index, and a bit
	before := rs.served(t)
	var wg sync.WaitGroup
	for i := range 9 {
		// Each request is routed (and counted in flight) before the
		// next is sent, and each generates for several seconds, so every
		// choice sees the ones before it.
		wg.Go(func() {
			ask(t, r.url, nil, chatBody(system, fmt.Sprintf("question %d: %s", i, strings.Repeat(fmt.Sprint("details of case ", i, ". "), 80)), 100))
		})
		eventually(t, fmt.Sprintf("request %d routed", i), func() bool { return r.decided(t) == float64(i+1) })
	}
	wg.Wait()
	var after []float64
	eventually(t, "the engines to count the requests", func() bool {
		after = rs.served(t)
		return total(after) == total(before)+9
	})
	for i := range after {
		if n := after[i] - before[i]; n < 2 {
			t.Errorf("%s served %v of 9 concurrent prompts sharing only a header (%v before, %v after); want them spread", rs.engines[i].group, n, before, after)
		}
	}
}

// Prompts sharing a long prefix stay on one replica while its queue is
// within the threshold (FLOW_MAX_INFLIGHT 4: the router counts an engine
// full with 4 of its requests, and those past 4 as queued), then spill
// to the other.
func TestReplicasSharedPrefixStaysThenSpills(t *testing.T) {
	rs := startReplicas(t, 2, "--itl", "50ms")
	r := rs.router(t, "router", 0, "ROUTING_THRESHOLD=3", "FLOW_MAX_INFLIGHT=4")
	system := strings.Repeat("You are the support assistant of tenant 42; answer briefly. ", 40)
	home := -1
	for i := range 8 {
		got := rs.askOn(t, r.url, nil, chatBody(system, fmt.Sprintf("question %d?", i), 2))
		if home < 0 {
			home = got
		}
		if got != home {
			t.Fatalf("request %d of a shared prefix went to %s, the first to %s", i, rs.engines[got].group, rs.engines[home].group)
		}
	}
	// Now 10 at once, each generating for about 2 s: the warm replica
	// takes them while it has room, and then until 3 wait past its 4;
	// then they spill.
	before := rs.served(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			ask(t, r.url, nil, chatBody(system, fmt.Sprintf("long question %d?", i), 40))
		})
		time.Sleep(20 * time.Millisecond) // in order, so each sees the others' load
	}
	wg.Wait()
	var after []float64
	eventually(t, "the engines to count the burst", func() bool {
		after = rs.served(t)
		return total(after) == total(before)+10
	})
	warm, cold := after[home]-before[home], after[1-home]-before[1-home]
	if warm < 4 || cold < 2 {
		t.Errorf("burst of 10 with a shared prefix: %v on the warm replica, %v spilled; want it to stay until the threshold, then spill", warm, cold)
	}
}

// A replica loaded behind the router's back (clients talking to the
// engine directly) gets no new work until it drains.
func TestReplicasPreloadedGetsNoWork(t *testing.T) {
	rs := startReplicas(t, 2, "--itl", "20ms")
	r := rs.router(t, "router", 0)
	busy := rs.engines[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 12 {
		wg.Go(func() {
			body := `{"model":"` + replicaModel + `","max_tokens":150,"ignore_eos":true,"messages":[{"role":"user","content":"long"}]}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:"+itoa(busy.port)+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	eventually(t, "the router to see the pre-loaded engine busy", func() bool {
		return engineMetric(t, busy, "vllm:num_requests_running") >= 12 && routingLoad(t, r, busy.group) >= 12
	})
	for i := range 10 {
		if got := rs.askOn(t, r.url, nil, chatBody(fmt.Sprintf("fresh prompt %d", i), "hi", 2)); got == 0 {
			t.Fatalf("request %d went to the pre-loaded replica", i)
		}
	}
	wg.Wait() // drained
	eventually(t, "the router to see the engine drained", func() bool { return routingLoad(t, r, busy.group) == 0 })
	seen := false
	for i := range 20 {
		seen = seen || rs.askOn(t, r.url, nil, chatBody(fmt.Sprintf("after the drain %d", i), "hi", 2)) == 0
	}
	if !seen {
		t.Error("the drained replica got none of 20 new requests")
	}
}

// routingLoad is the load /stats.json reports for group's replica.
func routingLoad(t *testing.T, r *router, group string) float64 {
	t.Helper()
	var doc struct {
		Models []struct {
			Group   string `json:"group"`
			Routing *struct {
				State string  `json:"state"`
				Load  float64 `json:"load"`
			} `json:"routing"`
		} `json:"models"`
	}
	if err := testproc.GetJSON(client, r.url+"/stats.json", &doc); err != nil {
		t.Fatal(err)
	}
	for _, row := range doc.Models {
		if row.Group == group && row.Routing != nil && row.Routing.State == "ready" {
			return row.Routing.Load
		}
	}
	return -1
}

// Killing a replica's engine fails no request that had not been sent:
// the connections it refuses go to the other replica at once, until its
// group leaves admission. The engine dies alone, its actor (a shell)
// lives on, so the daemon still reports the group running and only the
// router's own refusals and probes find out.
func TestReplicaKilledCostsNoUnsentRequest(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "engine.pid")
	rs := &replicaSet{d: startDaemon(t, "daemon")}
	for i, g := range []string{"rep-a", "rep-b"} {
		e := &engine{group: g, model: replicaModel}
		if i == 0 {
			e.wrap = func(argv []string) []string {
				return append([]string{"/bin/sh", "-c", `"$@" & echo $! > "$0"; wait; exec sleep 600`, pidFile}, argv...)
			}
		}
		startAgent(t, rs.d.addr, e)
		rs.engines = append(rs.engines, e)
	}
	// round-robin: every other request goes to rep-a until the router
	// learns it refuses. Slow probes keep the dead rep-a in the snapshot
	// for a while, so requests do meet its refusals.
	r := rs.router(t, "router", 0, "ROUTING_POLICY=round-robin", "PROBE_INTERVAL_S=3")
	for i := range 6 {
		ask(t, r.url, nil, chatBody("before", fmt.Sprint(i), 2))
	}
	b, err := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == 0 {
		t.Fatalf("engine pid file: %q, %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the engine to die", func() bool { return !testproc.Alive(pid) })
	// Between requests: none of these is on the engine when it dies, so
	// every one must succeed, on rep-b.
	before := engineMetric(t, rs.engines[1], "vllm:request_success_total")
	for i := range 20 {
		ask(t, r.url, nil, chatBody("after", fmt.Sprint(i), 2))
	}
	st := r.replicas(t)
	refusals := routerMetric(t, r, "mentat_serve_routing_refusals_total")
	if len(st.Replicas) == 2 {
		// Still listed (no probe since the kill): it refused, once, and
		// sorts last.
		if st.Replicas[0].State != "refused" || refusals != 1 {
			t.Errorf("dead rep-a still listed: state %q, %v refusals; want refused after exactly 1", st.Replicas[0].State, refusals)
		}
	} else if refusals < 1 {
		t.Errorf("rep-a left before any request met its refusal; the test did not test it")
	}
	eventually(t, "rep-b to count them", func() bool {
		return engineMetric(t, rs.engines[1], "vllm:request_success_total") == before+20
	})
	eventually(t, "rep-a to leave the replicas", func() bool { return len(r.replicas(t).Replicas) == 1 })
}

// routerMetric sums every series of a metric on the router's /metrics.
func routerMetric(t *testing.T, r *router, name string) float64 {
	t.Helper()
	port, _ := strconv.Atoi(r.url[strings.LastIndexByte(r.url, ':')+1:])
	return engineMetric(t, &engine{group: "router", port: port}, name)
}

// ROUTING_POLICY=first sends everything to the first group by name.
func TestReplicasFirstPolicy(t *testing.T) {
	rs := startReplicas(t, 2)
	r := rs.router(t, "router", 0, "ROUTING_POLICY=first")
	for i := range 12 {
		ask(t, r.url, nil, chatBody(fmt.Sprintf("prompt %d", i), "q", 2))
	}
	eventually(t, "the engines to count the requests", func() bool { return total(rs.served(t)) == 12 })
	if s := rs.served(t); s[0] != 12 || s[1] != 0 {
		t.Errorf("served %v, want all 12 on rep-a", s)
	}
}

// The session policy sends a session to the same replica, and a router
// restart changes none of them.
func TestReplicasSessionStableAcrossRouterRestart(t *testing.T) {
	rs := startReplicas(t, 3)
	port := testproc.FreePort(t)
	places := func(r *router) []int {
		var out []int
		for i := range 9 {
			h := http.Header{}
			body := chatBody("s", "q", 2)
			if i%3 == 0 {
				// Without the header, the body's user is the key.
				body = `{"model":"` + replicaModel + `","max_tokens":2,"user":"user-` + itoa(i) + `","messages":[{"role":"user","content":"q"}]}`
			} else {
				h.Set("X-Session-ID", "session-"+itoa(i))
			}
			first := rs.askOn(t, r.url, h, body)
			if again := rs.askOn(t, r.url, h, body); again != first {
				t.Fatalf("session %d went to %s, then %s", i, rs.engines[first].group, rs.engines[again].group)
			}
			out = append(out, first)
		}
		return out
	}
	r1 := rs.router(t, "router-1", port, "ROUTING_POLICY=session")
	p1 := places(r1)
	stop(t, r1.Proc)
	r2 := rs.router(t, "router-2", port, "ROUTING_POLICY=session")
	p2 := places(r2)
	if fmt.Sprint(p1) != fmt.Sprint(p2) {
		t.Errorf("sessions placed %v before the restart, %v after", p1, p2)
	}
	used := map[int]bool{}
	for _, p := range p1 {
		used[p] = true
	}
	if len(used) < 2 {
		t.Errorf("9 sessions all on one replica (%v)", p1)
	}
}

// decisionsBy is the router's routing decisions for the model by reason,
// summed over its replicas (/stats.json).
func (r *router) decisionsBy(t *testing.T) map[string]float64 {
	t.Helper()
	var doc struct {
		Models []struct {
			Routing *struct {
				Decisions map[string]float64 `json:"decisions"`
			} `json:"routing"`
		} `json:"models"`
	}
	if err := testproc.GetJSON(client, r.url+"/stats.json", &doc); err != nil {
		t.Fatalf("router /stats.json: %v", err)
	}
	out := map[string]float64{}
	for _, row := range doc.Models {
		if row.Routing != nil {
			for reason, n := range row.Routing.Decisions {
				out[reason] += n
			}
		}
	}
	return out
}

// With ROUTING_INDEX_FILE a router saves its prefix index when it stops
// and the router started after it reads it: a tenant's prompt is then
// known from the new router's first request (affinity), where a router
// without the file takes it for a new one (home). The file holds block
// hashes, never prompt text, and only its owner may read it.
func TestReplicasIndexSurvivesRouterRestart(t *testing.T) {
	rs := startReplicas(t, 2)
	port := testproc.FreePort(t)
	path := filepath.Join(t.TempDir(), "index.json")
	system := strings.Repeat("The handbook of tenant 12, quoted by every request it sends. ", 50)

	r1 := rs.router(t, "router-1", port, "ROUTING_INDEX_FILE="+path)
	if !strings.Contains(r1.Output(), "event=routing_index_absent") {
		t.Errorf("first start: no routing_index_absent line:\n%s", r1.Output())
	}
	home := rs.askOn(t, r1.url, nil, chatBody(system, "first question", 2))
	stop(t, r1.Proc)
	if !regexp.MustCompile(`event=routing_index_saved .*models=1 blocks=[1-9]`).MatchString(r1.Output()) {
		t.Fatalf("no routing_index_saved line with blocks at the stop:\n%s", r1.Output())
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("index file mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("handbook")) {
		t.Error("the index file holds prompt text")
	}

	r2 := rs.router(t, "router-2", port, "ROUTING_INDEX_FILE="+path)
	if !regexp.MustCompile(`event=routing_index_loaded .*models=1 blocks=[1-9]`).MatchString(r2.Output()) {
		t.Errorf("no routing_index_loaded line at the start:\n%s", r2.Output())
	}
	if got := rs.askOn(t, r2.url, nil, chatBody(system, "second question", 2)); got != home {
		t.Errorf("after the restart the prompt went to %s, before to %s", rs.engines[got].group, rs.engines[home].group)
	}
	if d := r2.decisionsBy(t); d["affinity"] != 1 {
		t.Errorf("restarted router with the saved index: decisions %v, want the prompt known (affinity)", d)
	}
	stop(t, r2.Proc)

	r3 := rs.router(t, "router-3", port)
	rs.askOn(t, r3.url, nil, chatBody(system, "third question", 2))
	if d := r3.decisionsBy(t); d["home"] != 1 {
		t.Errorf("router without the index file: decisions %v, want the prompt taken for a new one (home)", d)
	}
}
