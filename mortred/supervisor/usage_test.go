package supervisor

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

// usageStack is a supervisor's API in front of a stand-in gateway on
// loopback: the gateway's GET /stats.json checks the metrics token, as the
// real one does, then answers what the test set.
type usageStack struct {
	api, gw *httptest.Server
	answer  func(w http.ResponseWriter, r *http.Request)
}

const (
	usageAPITok     = "api-secret-0123"
	usageMetricsTok = "metrics-secret-0123"
)

func newUsageStack(t *testing.T, metricsTok string) *usageStack {
	t.Helper()
	s := &usageStack{}
	s.gw = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stats.json" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+usageMetricsTok {
			http.Error(w, `{"error":"missing or invalid Bearer token for metrics"}`, http.StatusUnauthorized)
			return
		}
		s.answer(w, r)
	}))
	t.Cleanup(s.gw.Close)
	_, port, _ := net.SplitHostPort(s.gw.Listener.Addr().String())
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mortred.toml"), "[supervisor]\napi_port = 18787\nlog_dir = \"logs\"\n[gateway]\nport = 18080\n")
	writeFile(t, filepath.Join(dir, "server", "a.toml"), "[A]\nport = 19001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/a.toml\"\n")
	writeFile(t, filepath.Join(dir, "models", "a.toml"), "type = \"testmodel\"\n")
	cp, err := config.LoadControlPlane(filepath.Join(dir, "mortred.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	env := map[string]string{"MORTRED_API_TOKEN": usageAPITok, "MORTRED_LISTEN_HOST": "127.0.0.1", "MORTRED_LISTEN_PORT": port}
	if metricsTok != "" {
		env["MORTRED_METRICS_TOKEN"] = metricsTok
	}
	m, err := NewManager(cp, cat, envconf.Map(env), Options{ServerBin: exe, GatewayBin: exe}, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s.api = httptest.NewServer(m.Handler(nil))
	t.Cleanup(func() { s.api.Close(); m.usageClient.CloseIdleConnections() })
	return s
}

func (s *usageStack) get(t *testing.T, tok string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.api.URL+"/api/v1/usage", nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	rep, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Body.Close()
	body, err := io.ReadAll(rep.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := rep.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	return rep.StatusCode, body
}

func serve(body []byte) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func TestUsageRelaysTheGatewaysStats(t *testing.T) {
	recorded, err := os.ReadFile("testdata/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	s := newUsageStack(t, usageMetricsTok)
	// A field the document does not know is not passed on, whatever it
	// holds: only the typed fields (ids, never secrets) leave.
	leaky := bytes.Replace(recorded, []byte(`"id":"team-a",`), []byte(`"id":"team-a","secret":"sk-mortred-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",`), 1)
	if bytes.Equal(leaky, recorded) {
		t.Fatal("the recorded answer has no key team-a")
	}
	s.answer = serve(leaky)

	if code, body := s.get(t, ""); code != 401 || !bytes.Contains(body, []byte("MORTRED_API_TOKEN")) {
		t.Fatalf("without the management token: %d %s", code, body)
	}
	if code, _ := s.get(t, usageMetricsTok); code != 401 {
		t.Fatalf("with the metrics token instead of the management token: %d", code)
	}
	before := time.Now().UnixMilli()
	code, body := s.get(t, usageAPITok)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if bytes.Contains(body, []byte("sk-mortred-")) || bytes.Contains(body, []byte(usageMetricsTok)) {
		t.Fatalf("a secret in the answer: %s", body)
	}
	var doc UsageDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.FetchedAtMS < before || len(doc.Keys) != 2 {
		t.Fatalf("fetched at %d (asked at %d), %d keys", doc.FetchedAtMS, before, len(doc.Keys))
	}
	a := doc.Keys[0]
	if a.ID != "team-a" || a.State != "active" || a.Priority != "critical" || a.RPM != 600 || a.Units != 1200 || a.Unit != "images" ||
		a.MaxConcurrent != 4 || a.RemainingRequests != 588 || a.InFlight != 1 || a.Requests["429"] != 3 || a.Images != 61 || a.Rejections["rpm"] != 3 {
		t.Errorf("team-a: %+v", a)
	}
	if b := doc.Keys[1]; b.ID != "batch-jobs" || b.State != "disabled" || b.RemainingRequests != -1 || len(b.Models) != 0 {
		t.Errorf("batch-jobs: %+v", b)
	}
	ser := doc.Series.Keys["team-a"]
	if len(doc.Series.Times) != 4 || doc.Series.Times[3] != 1764619230000 || len(ser.Requests) != 4 ||
		!math.IsNaN(ser.Requests[0]) || ser.Requests[2] != 3.1 || ser.Rejections[2] != 0.3 {
		t.Errorf("series: %v %+v", doc.Series.Times, ser)
	}
	// A gap stays a gap (null), never a zero.
	if !bytes.Contains(body, []byte(`"requests":[null,2.5,3.1,0.4]`)) {
		t.Errorf("team-a's requests series is not relayed as the gateway gave it: %s", body)
	}
}

func TestUsageWithoutKeys(t *testing.T) {
	s := newUsageStack(t, usageMetricsTok)
	s.answer = serve([]byte(`{"keys":[],"series":{"times":[],"keys":{}}}`))
	code, body := s.get(t, usageAPITok)
	if code != 200 || !bytes.Contains(body, []byte(`"keys":[],"series":{"times":[],"keys":{}}`)) {
		t.Fatalf("%d %s", code, body)
	}
	// A gateway that leaves the arrays out still gives empty ones, not null.
	s.answer = serve([]byte(`{}`))
	if code, body := s.get(t, usageAPITok); code != 200 || !bytes.Contains(body, []byte(`"keys":[],"series":{"times":[],"keys":{}}`)) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestUsageWhenTheGatewayCannotTell(t *testing.T) {
	s := newUsageStack(t, usageMetricsTok)
	hang := make(chan struct{})
	defer close(hang)
	cases := []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		want   string
	}{
		{"an old gateway", http.NotFound, "answered GET /stats.json with 404"},
		{"a failing gateway", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, "with 500"},
		{"not JSON", serve([]byte(`<html>`)), "not the expected document"},
		{"series not aligned with the times", serve([]byte(`{"keys":[],"series":{"times":[1,2],"keys":{"a":{"requests":[1],"units":[1,2],"rejections":[1,2]}}}}`)), `series of key \"a\" not aligned`},
		{"a gateway that hangs", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}, "did not answer GET /stats.json within 1.5s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.answer = c.answer
			code, body := s.get(t, usageAPITok)
			if code != 502 || !bytes.Contains(body, []byte(`"ok":false`)) || !bytes.Contains(body, []byte(c.want)) {
				t.Fatalf("%d %s; want 502 saying %q", code, body, c.want)
			}
		})
	}
}

func TestUsageWithTheWrongMetricsToken(t *testing.T) {
	s := newUsageStack(t, "not-the-gateways")
	s.answer = serve([]byte(`{"keys":[],"series":{"times":[],"keys":{}}}`))
	code, body := s.get(t, usageAPITok)
	if code != 502 || !bytes.Contains(body, []byte("refused the supervisor's MORTRED_METRICS_TOKEN")) || bytes.Contains(body, []byte("not-the-gateways")) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestUsageWithoutMetricsToken(t *testing.T) {
	s := newUsageStack(t, "")
	s.answer = func(w http.ResponseWriter, r *http.Request) { t.Error("the gateway was asked without a token") }
	if code, body := s.get(t, usageAPITok); code != 503 || !bytes.Contains(body, []byte("no MORTRED_METRICS_TOKEN")) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestUsageWhenTheGatewayIsDown(t *testing.T) {
	s := newUsageStack(t, usageMetricsTok)
	s.gw.Close()
	code, body := s.get(t, usageAPITok)
	if code != 502 || !bytes.Contains(body, []byte("the gateway did not answer GET /stats.json (")) || !bytes.Contains(body, []byte("is it running?")) {
		t.Fatalf("%d %s", code, body)
	}
}
