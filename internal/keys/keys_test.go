package keys

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)} }

// writeFile writes a key file of entries (TOML bodies after [[key]]) and
// returns its path.
func writeFile(t testing.TB, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "keys.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func entry(id, secret, extra string) string {
	return fmt.Sprintf("[[key]]\nid = %q\nhash = %q\n%s\n", id, HashSecret(secret), extra)
}

func bearerHeader(s string) http.Header { return http.Header{"Authorization": {"Bearer " + s}} }

func TestParseRules(t *testing.T) {
	h := HashSecret("sk-mentat-x")
	cases := []struct {
		name, text string
		line       int
		want       string
	}{
		{"syntax", "[[key]]\nid = \"a\"\nhash = \n", 3, ""},
		{"bad id", "# c\n[[key]]\nid = \"a b\"\nhash = \"" + h + "\"\n", 2, "id"},
		{"short hash", "[[key]]\nid = \"a\"\nhash = \"abc\"\n", 1, "64 hex"},
		{"hex", "[[key]]\nid = \"a\"\nhash = \"" + strings.Repeat("z", 64) + "\"\n", 1, "hex"},
		{"dup id", entry("a", "sk-mentat-1", "") + entry("a", "sk-mentat-2", ""), 5, "twice"},
		{"dup hash", entry("a", "sk-mentat-1", "") + entry("b", "sk-mentat-1", ""), 5, "another entry"},
		{"glob", entry("a", "sk-mentat-1", `models = ["[a"]`), 1, "glob"},
		{"empty glob", entry("a", "sk-mentat-1", `models = [""]`), 1, "empty pattern"},
		{"negative", entry("a", "sk-mentat-1", "") + entry("b", "sk-mentat-2", "rpm = -1"), 5, "rpm is -1"},
		{"priority", entry("a", "sk-mentat-1", `priority = "urgent"`), 1, "priority"},
		{"weight", entry("a", "sk-mentat-1", `weight = -2.0`), 1, "weight"},
		{"unknown", entry("a", "sk-mentat-1", "burst = 3"), 4, "unknown field"},
		{"other unit", entry("a", "sk-mentat-1", "ipm = 3"), 4, "ipm is not a limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("k.toml", []byte(c.text), Router)
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a FileError", err)
			}
			if fe.Line != c.line || !strings.Contains(fe.Reason, c.want) || !strings.HasPrefix(err.Error(), fmt.Sprintf("k.toml:%d: ", c.line)) {
				t.Fatalf("got %q (line %d), want line %d and %q", err, fe.Line, c.line, c.want)
			}
		})
	}
	es, err := Parse("k.toml", []byte("# nothing yet\n"), Router)
	if err != nil || len(es) != 0 {
		t.Fatalf("empty file: %v %v", es, err)
	}
	es, err = Parse("k.toml", []byte(entry("g", "sk-mortred-1", "ipm = 5\nexpires = 2027-01-01T00:00:00Z")), Gateway)
	if err != nil || es[0].IPM != 5 || es[0].Expires == nil || es[0].Line != 1 {
		t.Fatalf("gateway entry: %+v %v", es, err)
	}
	if _, err := Parse("k.toml", []byte(entry("g", "sk-mortred-1", "tpm = 5")), Gateway); err == nil {
		t.Fatal("tpm accepted in a gateway file")
	}
}

func openStore(t testing.TB, text string, o Options) (*Store, string) {
	t.Helper()
	p := writeFile(t, t.TempDir(), text)
	if o.Product.Prefix == "" {
		o.Product = Router
	}
	s, err := Open(p, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func TestAuthenticate(t *testing.T) {
	c := newClock()
	good, off, old := "sk-mentat-good", "sk-mentat-off", "sk-mentat-old"
	s, _ := openStore(t, entry("a", good, `models = ["llama-*", "org/*"]`)+entry("b", off, "disabled = true")+
		entry("c", old, "expires = 2026-12-04T11:00:00Z"), Options{Now: c.Now, Operator: "op-token"})
	k, rej := s.Authenticate(bearerHeader(good), "10.0.0.1")
	if rej != nil || k.ID != "a" {
		t.Fatalf("good key: %v %+v", k, rej)
	}
	if !k.Allows("llama-3") || !k.Allows("org/a/b") || k.Allows("mistral") || k.Scope("mistral").Status != 403 {
		t.Fatal("scope")
	}
	if k, rej := s.Authenticate(http.Header{"Authorization": {"bearer   " + good}}, "10.0.0.1"); rej != nil || k.ID != "a" {
		t.Fatalf("scheme case and spaces: %+v", rej)
	}
	if k, rej := s.Authenticate(bearerHeader("op-token"), "10.0.0.1"); rej != nil || k.ID != OperatorID || !k.Allows("x") {
		t.Fatalf("operator: %+v", rej)
	}
	for name, c := range map[string]struct {
		h    http.Header
		want Reason
	}{
		"missing":  {http.Header{}, MissingKey},
		"unknown":  {bearerHeader("sk-mentat-nope"), InvalidKey},
		"prefix":   {bearerHeader("sk-other"), InvalidKey},
		"two":      {http.Header{"Authorization": {"Bearer " + good, "Bearer " + good}}, InvalidKey},
		"basic":    {http.Header{"Authorization": {"Basic " + good}}, InvalidKey},
		"two toks": {http.Header{"Authorization": {"Bearer " + good + " x"}}, InvalidKey},
		"disabled": {bearerHeader(off), DisabledKey},
		"expired":  {bearerHeader(old), ExpiredKey},
	} {
		_, rej := s.Authenticate(c.h, "10.0.0."+fmt.Sprint(len(name)))
		if rej == nil || rej.Reason != c.want || rej.Status != 401 {
			t.Errorf("%s: %+v, want 401 %s", name, rej, c.want)
			continue
		}
		h := http.Header{}
		rej.SetHeaders(h)
		if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer realm=") {
			t.Errorf("%s: no WWW-Authenticate", name)
		}
		if strings.Contains(rej.Message, good) {
			t.Errorf("%s: secret in message", name)
		}
	}
}

func TestBadKeysLimitedBeforeHash(t *testing.T) {
	c := newClock()
	s, _ := openStore(t, entry("a", "sk-mentat-good", ""), Options{Now: c.Now, BadKeyBurst: 5, BadKeyRate: 1})
	for i := range 5 {
		if _, rej := s.Authenticate(bearerHeader(fmt.Sprintf("sk-mentat-bad%d", i)), "10.9.9.9"); rej == nil || rej.Status != 401 {
			t.Fatalf("try %d: %+v", i, rej)
		}
	}
	hashed := s.hashes.Load()
	_, rej := s.Authenticate(bearerHeader("sk-mentat-good"), "10.9.9.9")
	if rej == nil || rej.Reason != BadKeyRate || rej.Status != 429 || rej.RetryAfter <= 0 {
		t.Fatalf("after the burst: %+v", rej)
	}
	if s.hashes.Load() != hashed {
		t.Fatal("the refused key was hashed")
	}
	h := http.Header{}
	rej.SetHeaders(h)
	if h.Get("Retry-After") != "1" || h.Get("Retry-After-Ms") == "" {
		t.Fatalf("headers %v", h)
	}
	if k, rej := s.Authenticate(bearerHeader("sk-mentat-good"), "10.1.1.1"); rej != nil || k.ID != "a" {
		t.Fatalf("another address: %+v", rej)
	}
	c.Add(1100 * time.Millisecond)
	if k, rej := s.Authenticate(bearerHeader("sk-mentat-good"), "10.9.9.9"); rej != nil || k.ID != "a" {
		t.Fatalf("after a refill: %+v", rej)
	}
}

func TestLimits(t *testing.T) {
	c := newClock()
	s, _ := openStore(t, entry("a", "sk-mentat-a", "rpm = 60\ntpm = 100\nmax_concurrent = 2"), Options{Now: c.Now})
	k := s.Keys()[0]
	g1, rej := k.Admit()
	if rej != nil {
		t.Fatal(rej)
	}
	h := http.Header{}
	g1.SetHeaders(h)
	if h.Get("X-Ratelimit-Limit-Requests") != "60" || h.Get("X-Ratelimit-Remaining-Requests") != "59" ||
		h.Get("X-Ratelimit-Reset-Requests") != "1s" || h.Get("X-Ratelimit-Limit-Tokens") != "100" || h.Get("X-Ratelimit-Remaining-Tokens") != "100" {
		t.Fatalf("headers %v", h)
	}
	g2, _ := k.Admit()
	if _, rej := k.Admit(); rej == nil || rej.Reason != Concurrency {
		t.Fatalf("third at once: %+v", rej)
	}
	g1.Charge(Charge{Prompt: 90, Completion: 30, Cached: 10})
	g1.Done(200)
	g1.Done(200) // once only
	g2.Done(499)
	_, rej = k.Admit()
	if rej == nil || rej.Reason != TPMLimit || rej.Status != 429 {
		t.Fatalf("over tpm: %+v", rej)
	}
	// 20 tokens below zero at 100/min: 12 s, and a millisecond.
	if rej.RetryAfter < 12*time.Second || rej.RetryAfter > 12*time.Second+10*time.Millisecond {
		t.Fatalf("retry after %v", rej.RetryAfter)
	}
	h = http.Header{}
	rej.SetHeaders(h)
	if h.Get("Retry-After") != "13" || h.Get("Retry-After-Ms") != "12001" || h.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Fatalf("429 headers %v", h)
	}
	c.Add(rej.RetryAfter)
	g, rej := k.Admit()
	if rej != nil {
		t.Fatalf("after the wait: %+v", rej)
	}
	g.Done(200)
	u := s.Usage()[0]
	if u.Requests["200"] != 2 || u.Requests["499"] != 1 || u.PromptTokens != 90 || u.CompletionTokens != 30 || u.CachedTokens != 10 ||
		u.Rejections["concurrency"] != 1 || u.Rejections["tpm"] != 1 || u.InFlight != 0 {
		t.Fatalf("usage %+v", u)
	}
}

func TestRPM(t *testing.T) {
	c := newClock()
	s, _ := openStore(t, entry("a", "sk-mentat-a", "rpm = 2"), Options{Now: c.Now})
	k := s.Keys()[0]
	for range 2 {
		g, rej := k.Admit()
		if rej != nil {
			t.Fatal(rej)
		}
		g.Done(200)
	}
	_, rej := k.Admit()
	if rej == nil || rej.Reason != RPMLimit || rej.RetryAfter != 30*time.Second {
		t.Fatalf("%+v", rej)
	}
}

func TestReloadKeepsStateAndOldKeysOnError(t *testing.T) {
	c := newClock()
	reg := prometheus.NewRegistry()
	var logs testproc.Buffer
	s, p := openStore(t, entry("a", "sk-mentat-a", "rpm = 10"), Options{Now: c.Now, Registerer: reg, Poll: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	g, _ := s.Keys()[0].Admit()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if err := os.WriteFile(p, []byte(entry("a", "sk-mentat-a", "rpm = 10")+entry("b", "sk-mentat-b", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(s.Keys()) == 2 })
	if u := s.Usage()[0]; u.InFlight != 1 || u.RemainingRequests != 9 {
		t.Fatalf("state lost over a reload: %+v", u)
	}
	g.Done(200)
	if err := os.WriteFile(p, []byte("[[key]]\nid = \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(collectorMetric(reg, "mentat_serve_keys_reload_failures_total")) == 1
	})
	if len(s.Keys()) != 2 {
		t.Fatal("a broken file replaced the keys")
	}
	if _, rej := s.Authenticate(bearerHeader("sk-mentat-b"), "1.1.1.1"); rej != nil {
		t.Fatal("old keys not kept")
	}
	if !strings.Contains(logs.String(), "keys_reload_failed") || strings.Contains(logs.String(), "sk-mentat-") {
		t.Fatalf("log: %s", logs.String())
	}
}

// collectorMetric is a one-metric collector gathered from reg, for testutil.
func collectorMetric(reg *prometheus.Registry, name string) prometheus.Collector {
	return gathered{reg, name}
}

type gathered struct {
	reg  *prometheus.Registry
	name string
}

func (g gathered) Describe(chan<- *prometheus.Desc) {}
func (g gathered) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == g.name && len(mf.Metric) > 0 {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "", nil, nil), prometheus.UntypedValue, mf.Metric[0].GetCounter().GetValue())
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPermissionWarningAndStartError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "keys.toml")
	os.WriteFile(p, []byte(entry("a", "sk-mentat-a", "")), 0o644)
	var logs bytes.Buffer
	if _, err := Open(p, Options{Product: Router, Log: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "keys_file_permissions") {
		t.Fatal("no permission warning")
	}
	os.WriteFile(p, []byte("x = [\n"), 0o600)
	_, err := Open(p, Options{Product: Router})
	if err == nil || !strings.HasPrefix(err.Error(), p+":") {
		t.Fatalf("start error %v", err)
	}
}

func TestConcurrentAdmitWithReloads(t *testing.T) {
	s, p := openStore(t, entry("a", "sk-mentat-a", "tpm = 1000000\nmax_concurrent = 1000"), Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				k, rej := s.Authenticate(bearerHeader("sk-mentat-a"), "1.2.3.4")
				if rej != nil {
					t.Error(rej.Message)
					return
				}
				g, rej := k.Admit()
				if rej != nil {
					t.Error(rej.Message)
					return
				}
				g.Charge(Charge{Prompt: 1, Completion: 1})
				g.Done(200)
			}
		})
	}
	for i := range 20 {
		os.WriteFile(p, []byte(entry("a", "sk-mentat-a", fmt.Sprintf("tpm = %d\nmax_concurrent = 1000", 1000000+i))), 0o600)
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
		_ = s.Usage()
	}
	wg.Wait()
	if u := s.Usage()[0]; u.Requests["200"] != 4000 || u.InFlight != 0 || u.PromptTokens != 4000 {
		t.Fatalf("%+v", u)
	}
}

func TestSeries(t *testing.T) {
	c := newClock()
	s, _ := openStore(t, entry("a", "sk-mentat-a", ""), Options{Now: c.Now})
	s.sample(c.Now())
	k := s.Keys()[0]
	for range 20 {
		g, _ := k.Admit()
		g.Charge(Charge{Prompt: 5})
		g.Done(200)
	}
	c.Add(10 * time.Second)
	s.sample(c.Now())
	snap := s.Series(0)
	ks := snap.Keys["a"]
	if len(snap.Times) != 1 || ks.Requests[0] != 2 || ks.Units[0] != 10 || ks.Rejections[0] != 0 {
		t.Fatalf("%+v", snap)
	}
	b, err := json.Marshal(snap)
	if err != nil || !strings.Contains(string(b), `"a":{"requests":[2]`) {
		t.Fatalf("%s %v", b, err)
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "keys.toml")
	os.WriteFile(f, []byte("# team keys\n"), 0o600)
	var out, errb bytes.Buffer
	if code := Command(Router, []string{"new", "--file", f, "--id", "team-a", "--models", "llama-*,org/*", "--rpm", "60", "--tpm", "1000", "--priority", "critical"}, &out, &errb); code != 0 {
		t.Fatalf("new: %d %s", code, errb.String())
	}
	secret := strings.TrimSpace(out.String())
	if !strings.HasPrefix(secret, "sk-mentat-") || len(secret) != len("sk-mentat-")+43 || strings.Contains(errb.String(), secret) {
		t.Fatalf("secret %q, stderr %q", secret, errb.String())
	}
	if code := Command(Router, []string{"new", "--file", f, "--id", "team-a"}, &out, &errb); code != 1 {
		t.Fatal("duplicate id accepted")
	}
	if code := Command(Router, []string{"new", "--file", f, "--id", "team-b", "--priority", "urgent"}, &out, &errb); code != 1 {
		t.Fatal("bad priority accepted")
	}
	if code := Command(Router, []string{"disable", "--file", f, "team-a"}, &out, &errb); code != 0 {
		t.Fatalf("disable: %s", errb.String())
	}
	data, _ := os.ReadFile(f)
	if !strings.HasPrefix(string(data), "# team keys\n") {
		t.Fatalf("comment lost: %s", data)
	}
	s, err := Open(f, Options{Product: Router})
	if err != nil {
		t.Fatal(err)
	}
	if _, rej := s.Authenticate(bearerHeader(secret), "1.1.1.1"); rej == nil || rej.Reason != DisabledKey {
		t.Fatalf("disabled key: %+v", rej)
	}
	Command(Router, []string{"enable", "--file", f, "team-a"}, &out, &errb)
	s.Reload()
	k, rej := s.Authenticate(bearerHeader(secret), "1.1.1.1")
	if rej != nil || k.Priority != Critical || k.RPM != 60 || k.Units != 1000 || !k.Allows("org/x") {
		t.Fatalf("enabled key: %+v %+v", k, rej)
	}
	out.Reset()
	if code := Command(Router, []string{"list", "--file", f}, &out, &errb); code != 0 || !strings.Contains(out.String(), "team-a") ||
		strings.Contains(out.String(), HashSecret(secret)) {
		t.Fatalf("list: %s", out.String())
	}
	if code := Command(Router, []string{"bogus"}, &out, &errb); code != 2 {
		t.Fatal("usage")
	}
	fi, _ := os.Stat(f)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(entry("a", "sk-mentat-a", `models = ["x*"]`+"\nrpm = 3\ntpm = 4\npriority = \"critical\"")))
	f.Add([]byte("[[key]]\nid = 1\n"))
	f.Add([]byte("a = [[\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := Parse("f.toml", b, Router)
		if err != nil {
			return
		}
		var text strings.Builder
		for _, e := range es {
			text.WriteString(block(e))
			text.WriteString("disabled = " + fmt.Sprint(e.Disabled) + "\n")
		}
		back, err := Parse("g.toml", []byte(text.String()), Router)
		if err != nil || len(back) != len(es) {
			t.Fatalf("round trip: %v\n%s", err, text.String())
		}
		for i := range es {
			if back[i].ID != es[i].ID || back[i].RPM != es[i].RPM || back[i].TPM != es[i].TPM || back[i].Disabled != es[i].Disabled {
				t.Fatalf("entry %d: %+v vs %+v", i, es[i], back[i])
			}
		}
	})
}

func FuzzAuthorization(f *testing.F) {
	const secret = "sk-mentat-fuzz"
	f.Add("Bearer " + secret)
	f.Add("bearer  sk-mentat-x")
	f.Add("Basic abc")
	f.Add("Bearer sk-mentat-fuzz\x00")
	dir := f.TempDir()
	p := filepath.Join(dir, "keys.toml")
	os.WriteFile(p, []byte(entry("a", secret, "")), 0o600)
	s, err := Open(p, Options{Product: Router, BadKeyBurst: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, rej := s.Authenticate(http.Header{"Authorization": {v}}, "1.2.3.4")
		if (k == nil) == (rej == nil) {
			t.Fatal("both or neither of key and rejection")
		}
		if k != nil {
			tok, _ := bearer([]string{v})
			if tok != secret {
				t.Fatalf("%q admitted", v)
			}
		}
	})
}

// BenchmarkAuthenticateAdmitDone is a key's whole cost on one request:
// a key of the real length authenticated, admitted, its six rate-limit
// headers written, usage charged, the grant ended.
func BenchmarkAuthenticateAdmitDone(b *testing.B) {
	secret, _, err := NewSecret(Router)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := openStore(b, entry("a", secret, "rpm = 1000000000\ntpm = 1000000000\nmax_concurrent = 100000"), Options{})
	h := bearerHeader(secret)
	b.ReportAllocs()
	for b.Loop() {
		k, rej := s.Authenticate(h, "127.0.0.1")
		if rej != nil {
			b.Fatal(rej.Message)
		}
		g, rej := k.Admit()
		if rej != nil {
			b.Fatal(rej.Message)
		}
		out := http.Header{}
		g.SetHeaders(out)
		g.Charge(Charge{Prompt: 10, Completion: 5})
		g.Done(200)
	}
}

// BenchmarkSixHeadersOverNetHTTP is what net/http itself spends on the six
// x-ratelimit headers a keyed answer carries (written by a server, read by
// a client over loopback), beside the same exchange without them: the
// part of the router's keys-on cost that is the headers' and not the key
// store's (BenchmarkAuthenticateAdmitDone).
func BenchmarkSixHeadersOverNetHTTP(b *testing.B) {
	for _, n := range []int{0, 6} {
		b.Run(fmt.Sprintf("headers=%d", n), func(b *testing.B) {
			names := []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
				"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}[:n]
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				for _, k := range names {
					h[k] = []string{"999999"}
				}
				h.Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			defer srv.Close()
			c := srv.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// TestCeilMSMatchesDurationString: the allocation-free rendering of the
// reset headers reads as time.Duration's String of the rounded-up value.
func TestCeilMSMatchesDurationString(t *testing.T) {
	ds := []time.Duration{-time.Second, 0, 1, time.Millisecond - 1, time.Millisecond, 999 * time.Millisecond,
		999*time.Millisecond + 1, time.Second, 1500 * time.Millisecond, 1010 * time.Millisecond, 59*time.Second + 999*time.Millisecond,
		time.Minute, time.Minute + 1, 6 * time.Minute, time.Hour, time.Hour + 1, 49*time.Hour + 3*time.Minute + 4500*time.Millisecond}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		ds = append(ds, time.Duration(r.Int64N(int64(3*time.Hour))))
	}
	for _, d := range ds {
		want := "0s"
		if d > 0 {
			want = ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
		}
		if got := ceilMS(d); got != want {
			t.Fatalf("ceilMS(%d) = %q, want %q", d, got, want)
		}
	}
}
