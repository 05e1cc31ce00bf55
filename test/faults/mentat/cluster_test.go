package mentat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// client is the tests' HTTP client for short calls; streams use their own
// contexts.
var client = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 10 * time.Second},
}

// daemon is a running `mentatd daemon`.
type daemon struct {
	*testproc.Proc
	addr string // host:port of its HTTP interface
}

// daemonEnv is a daemon on 127.0.0.1 that never looks beyond lo and never
// broadcasts: announcements are off unless a test sets them.
func daemonEnv(port int, extra ...string) []string {
	return cleanEnv(append([]string{
		"MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT=" + strconv.Itoa(port),
		"MENTAT_ANNOUNCE_IFACES=lo", "MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S=1",
		"MENTAT_AGENT_TIMEOUT_S=6", "MENTAT_PEER_POLL_S=1",
	}, extra...)...)
}

// startDaemon runs a daemon on port and waits until it listens.
func startDaemon(t testing.TB, port int, extra ...string) *daemon {
	t.Helper()
	p := start(t, "mentatd daemon :"+strconv.Itoa(port), daemonEnv(port, extra...), testproc.Bin(t, "mentatd"), "daemon")
	p.WaitOutput(t, 30*time.Second, `event=http_listening`)
	return &daemon{Proc: p, addr: "127.0.0.1:" + strconv.Itoa(port)}
}

// engineOpts describes one agent with its enginesim.
type engineOpts struct {
	group, model string
	port         int
	itl          time.Duration
	// extra engine flags
	args []string
}

// startAgent runs `mentatd agent -- enginesim ...` against daemonAddr,
// announcing the engine in URL form on 127.0.0.1.
func startAgent(t testing.TB, daemonAddr string, o engineOpts) *testproc.Proc {
	t.Helper()
	if o.itl == 0 {
		o.itl = 10 * time.Millisecond
	}
	env := cleanEnv("MENTAT_DAEMON="+daemonAddr, "MENTAT_GROUP="+o.group, "MENTAT_CONTAINER="+o.group,
		"MENTAT_OPENAI_API=http://127.0.0.1:"+strconv.Itoa(o.port)+"/v1", "MENTAT_MODEL_PROVIDER=vllm")
	argv := append([]string{testproc.Bin(t, "mentatd"), "agent", "--", testproc.Bin(t, "enginesim"), "--model", o.model, "--host", "127.0.0.1",
		"--port", strconv.Itoa(o.port), "--ttft", "20ms", "--itl", o.itl.String(), "--jitter", "0"}, o.args...)
	return start(t, "agent "+o.group, env, argv...)
}

// daemonStatus is the part of a daemon's /status the tests read.
type daemonStatus struct {
	BootID string `json:"boot_id"`
	Groups map[string]struct {
		Actors map[string]struct {
			State string `json:"state"`
			PID   int    `json:"pid"`
		} `json:"actors"`
	} `json:"groups"`
}

// enginePID waits until the daemon reports the group's actor running and
// returns the engine's pid.
func enginePID(t testing.TB, daemonAddr, group string) int {
	t.Helper()
	pid := 0
	testproc.Eventually(t, 30*time.Second, "engine of "+group+" running", func() error {
		var st daemonStatus
		if err := testproc.GetJSON(client, "http://"+daemonAddr+"/status", &st); err != nil {
			return err
		}
		for _, a := range st.Groups[group].Actors {
			if a.State == "running" && a.PID > 0 {
				pid = a.PID
				return nil
			}
		}
		return fmt.Errorf("status %+v", st.Groups[group])
	})
	return pid
}

// router is a running mentatd-serve.
type router struct {
	*testproc.Proc
	base string // http://127.0.0.1:port
}

// routerEnv has fast intervals; extra entries override (later wins).
func routerEnv(port int, daemons string, extra ...string) []string {
	return cleanEnv(append([]string{
		"SERVE_PORT=" + strconv.Itoa(port), "MENTAT_DAEMONS=" + daemons, "MENTAT_ANNOUNCE_PORT=0",
		"DISCOVER_PEERS=0", "POLL_INTERVAL_S=1", "PROBE_INTERVAL_S=0.5", "PROBE_TIMEOUT_S=1",
	}, extra...)...)
}

// startRouter runs mentatd-serve with routerEnv and waits for /healthz.
func startRouter(t testing.TB, daemons string, extra ...string) *router {
	t.Helper()
	port := testproc.FreePort(t)
	p := start(t, "mentatd-serve", routerEnv(port, daemons, extra...), testproc.Bin(t, "mentatd-serve"))
	r := &router{Proc: p, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	testproc.Eventually(t, 30*time.Second, "router /healthz", func() error {
		if p.Exited() {
			t.Fatalf("router exited:\n%s", p.Output())
		}
		resp, err := client.Get(r.base + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return r
}

// groupStatus is one group of /status.json.
type groupStatus struct {
	Healthy          bool     `json:"healthy"`
	WhyNot           *string  `json:"why_not"`
	OpenAI           *string  `json:"openai"`
	OpenAICandidates []string `json:"openai_candidates"`
	Models           []string `json:"models"`
	ActorsRunning    int      `json:"actors_running"`
}

type statusDoc struct {
	UptimeS int64 `json:"uptime_s"`
	Daemons map[string]struct {
		Connected bool    `json:"connected"`
		Error     *string `json:"error"`
	} `json:"daemons"`
	Groups map[string]groupStatus `json:"groups"`
}

func (r *router) status() (statusDoc, error) {
	var s statusDoc
	err := testproc.GetJSON(client, r.base+"/status.json", &s)
	return s, err
}

// models is /v1/models' ids, sorted.
func (r *router) models() ([]string, error) {
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := testproc.GetJSON(client, r.base+"/v1/models", &l); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(l.Data))
	for _, m := range l.Data {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids, nil
}

// waitModels waits until /v1/models lists at least these ids.
func (r *router) waitModels(t testing.TB, ids ...string) {
	t.Helper()
	testproc.Eventually(t, 45*time.Second, "router lists "+strings.Join(ids, ","), func() error {
		have, err := r.models()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if !slices.Contains(have, id) {
				return fmt.Errorf("/v1/models lists %v", have)
			}
		}
		return nil
	})
}

// chatBody is a chat completion generating exactly tokens tokens.
func chatBody(model string, stream bool, tokens int) []byte {
	return []byte(fmt.Sprintf(`{"model":%q,"stream":%t,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`,
		model, stream, tokens))
}

// reply is a finished non-streaming exchange.
type reply struct {
	code int
	body string
}

// post sends a non-streaming chat completion through base and reads the
// whole answer.
func post(ctx context.Context, base, model string, tokens int) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(chatBody(model, false, tokens)))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: string(b)}, err
}

// mustServe checks that one short completion of model succeeds.
func mustServe(t testing.TB, base, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := post(ctx, base, model, 3)
	if err != nil || r.code != http.StatusOK || !strings.Contains(r.body, `"chat.completion"`) {
		t.Fatalf("completion of %s: %v %d %s", model, err, r.code, r.body)
	}
}

// stream is an open streaming completion.
type stream struct {
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// openStream starts a streaming completion of tokens tokens and waits for
// its first data frame.
func openStream(base, model string, tokens int) (*stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(chatBody(model, true, tokens)))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := streamClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("stream answered %d %s", resp.StatusCode, b)
	}
	s := &stream{resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
	if _, err := s.frame(); err != nil {
		s.close()
		return nil, fmt.Errorf("first frame: %w", err)
	}
	return s, nil
}

// streamClient never pools: each stream is its own connection, so closing
// one is a client hanging up.
var streamClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// frame reads one SSE data line.
func (s *stream) frame() (string, error) {
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			return d, nil
		}
	}
}

// drain reads frames until the stream ends; it returns the error that ended
// it (nil for a clean end) and whether [DONE] arrived.
func (s *stream) drain() (done bool, err error) {
	for {
		d, err := s.frame()
		if errors.Is(err, io.EOF) && done {
			return true, nil
		}
		if err != nil {
			return done, err
		}
		if d == "[DONE]" {
			done = true
		}
	}
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}
