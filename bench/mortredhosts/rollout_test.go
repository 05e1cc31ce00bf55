package mortredhosts

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRolloutMarkdown(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var outs []outcome
	for i := range 40 {
		outs = append(outs, at(t0, time.Duration(i)*250*time.Millisecond, 4*time.Millisecond, 200, "v1"))
	}
	outs = append(outs, at(t0, 11*time.Second, 9*time.Millisecond, 200, "v1+ab12"), at(t0, 12*time.Second, 0, 502, ""),
		at(t0, 20*time.Second, 3*time.Millisecond, 200, "v1+ab12"))
	from, to := t0.Add(10*time.Second), t0.Add(12*time.Second)
	st := analyze(outs, from, to, SwitchGrace, requestTimeout)
	cfg := Config{}.withDefaults()
	res := RolloutResult{Rate: 40, Took: to.Sub(from), From: "v1", To: "v1+ab12"}
	md := rolloutMarkdown(cfg, res, st, "mortredctl rollout PPOCR_CLS --model-file /w/cls-v2.onnx", "rollout PPOCR_CLS: version \"v1+ab12\" serves", "[PPOCR_CLS]\nworker_nums = 1\n")
	for _, want := range []string{
		"40 sync inferences per second",
		"| phase | requests that started in | requests | failed | p50 ms | p99 ms | max ms | p99 ÷ steady |",
		"| steady | 10s before the rollout | 40 | 0 | 4.000 | 4.000 | 4.000 | 1.00× |",
		"| switch | the rollout command (2.0 s) + 2s | 2 | 1 | 9.000 | 30000.000 | 30000.000 | 7500.00× |",
		"| after | the 8.0 s after | 1 | 0 | 3.000 | 3.000 | 3.000 | 0.75× |",
		"| all |  | 43 | 1 |",
		"1 of 43 requests failed. The switch window's p99 is 7500.00× the steady phase's",
		"The rollout took 2.0 s",
		"(`model.version` in the envelope): `v1` 40, `v1+ab12` 2.",
		"- +2.000 s after the rollout began: HTTP 502 after 0.000 ms",
		"mortredctl rollout PPOCR_CLS --model-file /w/cls-v2.onnx\nrollout PPOCR_CLS: version \"v1+ab12\" serves\n```",
		"```toml\n[PPOCR_CLS]\nworker_nums = 1\n```",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// No failures, no list.
	st = analyze(outs[:40], from, to, SwitchGrace, requestTimeout)
	if md := rolloutMarkdown(cfg, res, st, "c", "o", ""); strings.Contains(md, "First failures") {
		t.Errorf("a failure list without failures:\n%s", md)
	}
}

func TestRank99(t *testing.T) {
	for n, want := range map[int]string{
		0:    "the window held no request",
		1:    "with 1 request in the window, its p99 is that request",
		94:   "with 94 requests in the window, its p99 is their second slowest",
		400:  "with 400 requests in the window, its p99 is their 5th slowest",
		1000: "with 1000 requests in the window, its p99 is their 11th slowest",
	} {
		if got := rank99(n); got != want {
			t.Errorf("rank99(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestVersionOf(t *testing.T) {
	for _, c := range []struct {
		r    reply
		want string
	}{
		{reply{header: http.Header{"X-Mortred-Version": {"v2"}}, body: []byte(`{"model":{"version":"v1"}}`)}, "v2"},
		{reply{header: http.Header{}, body: []byte(`{"status":0,"model":{"name":"PPOCR_CLS","version":"v1"}}`)}, "v1"},
		{reply{header: http.Header{}, body: []byte(`not json`)}, ""},
		{reply{}, ""},
	} {
		if got := versionOf(c.r); got != c.want {
			t.Errorf("versionOf(%v %s) = %q, want %q", c.r.header, c.r.body, got, c.want)
		}
	}
}

func TestVersions(t *testing.T) {
	if got := versions(map[string]int{"b": 1, "v1": 3, "": 2, "a": 4}, "v1"); got != "`v1` 3, `(none)` 2, `a` 4, `b` 1" {
		t.Errorf("versions: %s", got)
	}
	if got := versions(nil, "v1"); got != "none" {
		t.Errorf("no answers: %s", got)
	}
}
