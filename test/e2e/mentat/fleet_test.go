package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/nginxconf"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// Several routers over one cluster, behind a real Nginx running the sample
// the manual shows (conf/nginx/mentat-routers.conf), its addresses
// replaced by the test's ports.

const nginxBinary = "/usr/sbin/nginx"

// fleet is a replica set with routers on fixed ports (a restarted router
// comes back on its own) sharing one session key, and Nginx in front.
type fleet struct {
	rs      *replicaSet
	routers []*router
	ports   []int
	env     []string
	url     string // Nginx
	nginx   *testproc.Proc
	errLog  string
}

// fleetDrain is the routers' SERVE_DRAIN_S: longer than the sample's
// keepalive_timeout (2 s), as the manual asks.
const fleetDrain = "5"

func startFleet(t *testing.T, routers int, env ...string) *fleet {
	t.Helper()
	if _, err := os.Stat(nginxBinary); err != nil {
		t.Fatalf("nginx is not installed (%v): run make setup", err)
	}
	// Two replicas of one model, each with its management MCP.
	f := &fleet{rs: &replicaSet{d: startDaemon(t, "daemon")}}
	for i := range 2 {
		e := &engine{group: "rep-" + string(rune('a'+i)), model: replicaModel, mcpPort: testproc.FreePort(t)}
		startAgent(t, f.rs.d.addr, e)
		f.rs.engines = append(f.rs.engines, e)
	}
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "session.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.env = append([]string{"MENTAT_SESSION_KEY_FILE=" + keyFile, "SERVE_DRAIN_S=" + fleetDrain, "SERVE_SHUTDOWN_S=20"}, env...)
	for i := range routers {
		f.ports = append(f.ports, testproc.FreePort(t))
		f.routers = append(f.routers, f.rs.router(t, fmt.Sprintf("router-%d", i), f.ports[i], f.env...))
	}
	sample, err := nginxconf.Read(nginxconf.RoutersSample)
	if err != nil {
		t.Fatal(err)
	}
	listen := testproc.FreePort(t)
	body, err := nginxconf.Upstreams(sample, listen, f.ports)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxconf.Main(tmp, body)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.errLog = filepath.Join(tmp, "error.log")
	f.nginx = start(t, "nginx", baseEnv(), nginxBinary, "-e", f.errLog, "-c", conf)
	f.url = "http://127.0.0.1:" + itoa(listen)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(f.errLog); err == nil {
				t.Logf("nginx error.log:\n%s", b)
			}
		}
	})
	eventually(t, "nginx serving /v1/models", func() bool {
		resp, err := client.Get(f.url + "/v1/models")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return f
}

// ready reports whether router i answers /readyz with 200.
func (f *fleet) ready(i int) bool {
	resp, err := client.Get(f.routers[i].url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// restart stops router i with SIGTERM (it drains and exits 0) and starts
// it again on its port, then waits until it is ready.
func (f *fleet) restart(t *testing.T, i int) {
	t.Helper()
	r := f.routers[i]
	// The test's own keep-alive connections to the router (its status
	// polls) would hold its shutdown for SERVE_DRAIN_S.
	client.CloseIdleConnections()
	if err := r.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, ok := r.ExitCode(40 * time.Second); !ok || code != 0 {
		t.Fatalf("router-%d after SIGTERM: exit code %d (exited: %v)\n%s", i, code, ok, r.Output())
	}
	out := r.Output()
	if !strings.Contains(out, "requests_cut=0 requests_forced=0") {
		t.Errorf("router-%d cut requests at its stop", i)
	}
	// The listener closed with nothing in its accept queue: no
	// connection Nginx had sent a request on was reset.
	if strings.Contains(out, "event=serve_listener_reset") {
		t.Errorf("router-%d reset queued connections at its stop", i)
	}
	f.routers[i] = f.rs.router(t, fmt.Sprintf("router-%d-again", i), f.ports[i], f.env...)
	eventually(t, fmt.Sprintf("router-%d ready again", i), func() bool { return f.ready(i) })
}

// outcome of one request of a load run.
type fleetResult struct {
	stream     bool
	start, end time.Time
	// err is nil for a request served whole: 200 and, for a stream,
	// every token's frame, a finish frame and one [DONE]; else what was
	// wrong.
	err error
}

// fleetTokens is how many tokens each request of the load asks for; the
// engines' ITL is 5 ms, so a stream lasts about 0.2 s.
const fleetTokens = 40

// fleetLoad offers rate requests/s to url for d or until ctx ends,
// alternating streamed and whole answers, and returns every request's
// outcome once all have ended (ctx stops the offering, not the requests).
func fleetLoad(ctx context.Context, url string, rate int, d time.Duration) []fleetResult {
	n := int(float64(rate) * d.Seconds())
	// Each request's goroutine writes its own element of all; sent is how
	// many were offered.
	all, sent := make([]fleetResult, n), n
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range n {
		if wait := time.Until(begin.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			sent = i
			break
		}
		wg.Go(func() {
			stream := i%2 == 0
			start := time.Now()
			err := fleetRequest(context.Background(), url, i, stream)
			all[i] = fleetResult{stream: stream, start: start, end: time.Now(), err: err}
		})
	}
	wg.Wait()
	return all[:sent]
}

// fleetRequest sends request i and judges its answer.
func fleetRequest(ctx context.Context, url string, i int, stream bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"ignore_eos":true,"max_tokens":%d,"messages":[{"role":"user","content":"request %d of the fleet test"}]}`,
		replicaModel, stream, fleetTokens, i)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	if !stream {
		var doc struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			return fmt.Errorf("200 with a body that does not parse: %w", err)
		}
		if len(doc.Choices) != 1 || doc.Choices[0].FinishReason != "length" || doc.Usage.CompletionTokens != fleetTokens {
			return fmt.Errorf("200 with an incomplete answer: %+v", doc)
		}
		return nil
	}
	frames, err := sseFrames(resp.Body)
	if err != nil {
		return fmt.Errorf("stream cut after %d frames: %w", len(frames), err)
	}
	done, finish, tokens := 0, false, 0
	for _, fr := range frames {
		if fr.data == "[DONE]" {
			done++
			continue
		}
		var c struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(fr.data), &c); err != nil {
			return fmt.Errorf("stream frame does not parse: %q", fr.data)
		}
		if c.Error != nil {
			return fmt.Errorf("stream ended with an error event: %s", c.Error)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				tokens++
			}
			if ch.FinishReason != nil && *ch.FinishReason == "length" {
				finish = true
			}
		}
	}
	if done != 1 || !finish || tokens != fleetTokens {
		return fmt.Errorf("stream of %d frames: %d [DONE], finish %v, %d tokens of %d", len(frames), done, finish, tokens, fleetTokens)
	}
	return nil
}

// duringLoad offers rate requests/s to url for at most d, runs fault
// after settle, stops offering once fault has returned (and d has not
// passed), and returns every request's outcome.
func duringLoad(url string, rate int, d, settle time.Duration, fault func()) []fleetResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var res []fleetResult
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		res = fleetLoad(ctx, url, rate, d)
	}()
	time.Sleep(settle)
	fault()
	cancel() // the load stops offering; what was sent finishes
	<-loaded
	return res
}

// failures lists the requests that failed, with what was wrong.
func failures(res []fleetResult) []string {
	var out []string
	for i, r := range res {
		if r.err != nil {
			out = append(out, fmt.Sprintf("request %d (stream %v, %s–%s): %v", i, r.stream, r.start.Format("15:04:05.000"), r.end.Format("15:04:05.000"), r.err))
		}
	}
	return out
}

// A rolling restart of every router, one after another, under 30
// requests/s of mixed streamed and whole answers through Nginx fails no
// request and cuts no stream: each router drains (its answers carry
// Connection: close, so Nginx's pooled connections move off it), stops
// listening (Nginx moves new requests to the others), finishes what it
// carries and exits 0.
func TestFleetRollingRestartFailsNothing(t *testing.T) {
	f := startFleet(t, 3)
	var took time.Duration
	res := duringLoad(f.url, 30, 40*time.Second, 2*time.Second, func() {
		restarted := time.Now()
		for i := range f.routers {
			f.restart(t, i)
		}
		took = time.Since(restarted)
	})
	t.Logf("rolling restart of %d routers took %v", len(f.routers), took.Round(time.Millisecond))
	if bad := failures(res); len(bad) > 0 {
		t.Fatalf("%d of %d requests failed during the rolling restart:\n%s", len(bad), len(res), strings.Join(bad, "\n"))
	}
	if len(res) < 30*10 {
		t.Fatalf("only %d requests were offered", len(res))
	}
}

// SIGKILL of one router fails only what it carried: what it had in
// flight, and what Nginx sent on its pooled connections to it in the
// moment before they reset (a POST that was sent is never sent again).
// Each failure is one the client sees as such (Nginx's 502 with the
// routers' error shape, or a cut connection), never a 200 with a short
// answer; later requests go to the other routers.
func TestFleetKilledRouterFailsOnlyItsOwn(t *testing.T) {
	f := startFleet(t, 3)
	var killed time.Time
	res := duringLoad(f.url, 30, 12*time.Second, 4*time.Second, func() {
		killed = time.Now()
		if err := f.routers[1].SignalGroup(syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		time.Sleep(4 * time.Second) // the load goes on over two routers
	})
	// window bounds "the moment": the kernel resets the dead router's
	// connections at once, and Nginx stops choosing it at the first
	// failure (max_fails=1).
	const window = 250 * time.Millisecond
	carried, failed := 0, 0
	for i, r := range res {
		if r.start.Before(killed.Add(window)) && r.end.After(killed) {
			carried++
		}
		if r.err == nil {
			continue
		}
		failed++
		if r.start.After(killed.Add(window)) {
			t.Errorf("request %d, sent %v after the kill, failed: %v", i, r.start.Sub(killed), r.err)
		}
		msg := r.err.Error()
		if strings.Contains(msg, "200 with") || strings.Contains(msg, "error event") ||
			(strings.HasPrefix(msg, "HTTP ") && !strings.Contains(msg, `"code":"router_unavailable"`)) {
			t.Errorf("request %d failed unclearly: %v", i, r.err)
		}
		var ne interface{ Timeout() bool }
		if errors.As(r.err, &ne) && ne.Timeout() {
			t.Errorf("request %d hung until its deadline: %v", i, r.err)
		}
	}
	after := 0
	for _, r := range res {
		if r.start.After(killed.Add(window)) {
			after++
		}
	}
	if after < 30*3 {
		t.Errorf("only %d requests were sent after the kill", after)
	}
	if failed == 0 || failed > carried {
		t.Errorf("%d requests failed of %d that could have been on the router at the kill; want some, and no more:\n%s", failed, carried, strings.Join(failures(res), "\n"))
	}
	t.Logf("SIGKILL: %d failed of %d in flight or sent within %v, %d requests in all:\n%s", failed, carried, window, len(res), strings.Join(failures(res), "\n"))
}

// rotate sends each request to the next of urls in turn, whatever URL
// the client asked for: every request of an MCP session lands on another
// router than the one before.
type rotate struct {
	mu   sync.Mutex
	next int
	urls []string
	hits []int
}

func (r *rotate) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	i := r.next % len(r.urls)
	r.next++
	r.hits[i]++
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Host = strings.TrimPrefix(r.urls[i], "http://")
	req.Host = req.URL.Host
	return http.DefaultTransport.RoundTrip(req)
}

// An MCP session opened on one router is continued by the others: with
// every request on another router, the official client initializes,
// lists, calls every tool and closes; through Nginx round-robin too.
func TestFleetMCPSessionOnEveryRouter(t *testing.T) {
	f := startFleet(t, 3)
	var urls []string
	for _, r := range f.routers {
		urls = append(urls, r.url)
	}
	want := []string{"rep-a__engine_status", "rep-b__engine_status", "serve_status"}
	session := func(t *testing.T, hc *http.Client, endpoint string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-fleet", Version: "v0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		var names []string
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			names = append(names, tool.Name)
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				t.Fatalf("tools/list = %v, missing %s", names, w)
			}
		}
		for range 2 {
			for _, name := range want {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
				if err != nil || res.IsError || len(res.Content) == 0 {
					t.Fatalf("call %s: %v %+v", name, err, res)
				}
			}
		}
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Run("each request on the next router", func(t *testing.T) {
		rt := &rotate{urls: urls, hits: make([]int, len(urls))}
		session(t, &http.Client{Transport: rt, Timeout: 60 * time.Second}, urls[0]+"/mcp")
		for i, n := range rt.hits {
			if n < 2 {
				t.Errorf("router-%d got %d requests of the session (%v); want every router used more than once", i, n, rt.hits)
			}
		}
	})
	t.Run("through nginx", func(t *testing.T) {
		session(t, &http.Client{Timeout: 60 * time.Second}, f.url+"/mcp")
	})
	t.Run("tools/list is the same bytes on every router", func(t *testing.T) {
		id := mcpInitialize(t, urls[0])
		var first string
		for i, u := range urls {
			code, _, body := mcpPost(t, u, id, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
			data := sseData(body)
			if code != http.StatusOK || !strings.Contains(data, "serve_status") {
				t.Fatalf("tools/list on router-%d: %d %s", i, code, body)
			}
			if i == 0 {
				first = data
			} else if data != first {
				t.Fatalf("tools/list on router-%d differs from router-0's:\n%s\n%s", i, data, first)
			}
		}
	})
	t.Run("a forged or mangled session id is 404", func(t *testing.T) {
		id := mcpInitialize(t, urls[1])
		b := []byte(id)
		b[len(b)/2] ^= 0x01
		for _, bad := range []string{"forged-session", string(b), id + "A", strings.Repeat("A", 200)} {
			code, _, body := mcpPost(t, f.url, bad, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			if code != http.StatusNotFound || strings.Contains(body, "serve_status") {
				t.Errorf("session id %.40q: %d %s; want 404", bad, code, body)
			}
		}
	})
}

// mcpPost sends one JSON-RPC message to url's /mcp under session id
// (none when empty) as a 2025-06-18 client.
func mcpPost(t *testing.T, url, id, msg string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/mcp", strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s/mcp: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// mcpInitialize opens a session on url and returns its id.
func mcpInitialize(t *testing.T, url string) string {
	t.Helper()
	code, h, body := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e-raw","version":"v0"}}}`)
	id := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || id == "" {
		t.Fatalf("initialize on %s: %d %s", url, code, body)
	}
	if code, _, body := mcpPost(t, url, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized on %s: %d %s", url, code, body)
	}
	return id
}

// sseData is the data of an event-stream answer's message (or the body
// itself when it is JSON).
func sseData(body string) string {
	var data []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	if len(data) == 0 {
		return body
	}
	return strings.Join(data, "\n")
}
