package enginesim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testEngine is an engine serving on real loopback listeners.
type testEngine struct {
	*Engine
	url    string // http://127.0.0.1:port
	mcpURL string // http://127.0.0.1:port/mcp, when withMCP
	client *http.Client
}

// startEngine serves an engine with fast test timings, adjusted by mutate,
// and stops it (checking that Serve returns) when the test ends.
func startEngine(t testing.TB, withMCP bool, mutate func(*Config)) *testEngine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Host = "127.0.0.1"
	cfg.TTFT = 5 * time.Millisecond
	cfg.ITL = 2 * time.Millisecond
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.ServedModelNames = []string{"sim"}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	te := &testEngine{Engine: e, url: "http://" + api.Addr().String()}
	var mcpLn net.Listener
	if withMCP {
		if mcpLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		te.mcpURL = "http://" + mcpLn.Addr().String() + "/mcp"
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	te.client = &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, api, mcpLn) }()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return 30s after its context ended")
		}
	})
	return te
}

// post sends a JSON body and returns the status and the whole body.
func (te *testEngine) post(t testing.TB, path string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return te.do(t, http.MethodPost, path, b)
}

func (te *testEngine) do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, te.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := te.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return res.StatusCode, out
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// frame is one SSE data line and when it arrived.
type frame struct {
	data string
	at   time.Time
}

// readFrames reads an event stream to its end.
func readFrames(t testing.TB, r io.Reader) []frame {
	t.Helper()
	var out []frame
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("stream line %q is not an SSE data line", line)
		}
		out = append(out, frame{data: strings.TrimPrefix(line, "data: "), at: time.Now()})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	return out
}

// scrape reads /metrics into metric families.
func (te *testEngine) scrape(t testing.TB) map[string]*dtoFamily {
	t.Helper()
	res, err := te.client.Get(te.url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value is the value of the one sample of a gauge or counter family, or of
// the sample whose label matches (name=value pairs).
func value(t testing.TB, fams map[string]*dtoFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("/metrics has no %s", name)
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("/metrics %s has no sample with labels %v", name, labels)
	return 0
}

// eventually polls cond until it holds or the generous deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type dtoFamily = dto.MetricFamily
