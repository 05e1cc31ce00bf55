package stats

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadFixture(t testing.TB, name string) Families {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fams, err := ParseMetrics(f, "text/plain; version=0.0.4; charset=utf-8")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return fams
}

func ptr(v float64) *float64 { return &v }

func checkNum(t *testing.T, what string, got, want *float64) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v", what, fmtp(got), fmtp(want))
	case math.Abs(*got-*want) > 1e-9*math.Max(1, math.Abs(*want)):
		t.Errorf("%s = %v, want %v", what, *got, *want)
	}
}

func fmtp(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestExtractVersions(t *testing.T) {
	for _, tc := range []struct {
		fixture, model string
		want           Numbers
	}{
		{
			// Current vLLM, two data-parallel engines summed, a second
			// model on the same engine left out.
			fixture: "vllm-current.txt", model: "glm53",
			want: Numbers{
				Running: ptr(3), Waiting: ptr(2), KV: ptr(0.5),
				PromptTokens: ptr(45476058), GenerationTokens: ptr(210549), Preemptions: ptr(3),
				Finished: map[string]float64{"stop": 170, "length": 3, "abort": 1},
				TTFT:     ptr(0.84), Queue: ptr(8.27), ITL: ptr(0.031),
			},
		},
		{
			fixture: "vllm-current.txt", model: "other",
			want: Numbers{
				Running: ptr(7), Waiting: ptr(9), KV: ptr(0.99),
				PromptTokens: ptr(1), GenerationTokens: ptr(1), Preemptions: ptr(50),
				Finished: map[string]float64{"stop": 999},
				TTFT:     ptr(1000), Queue: ptr(99), ITL: ptr(50),
			},
		},
		{
			// An alias the engine does not label: the engine's totals.
			fixture: "vllm-current.txt", model: "glm53-alias",
			want: Numbers{
				Running: ptr(10), Waiting: ptr(11), KV: ptr((0.6 + 0.4 + 0.99) / 3),
				PromptTokens: ptr(45476059), GenerationTokens: ptr(210550), Preemptions: ptr(53),
				Finished: map[string]float64{"stop": 1169, "length": 3, "abort": 1},
				TTFT:     ptr(1084.0 / 101), Queue: ptr(760.6 / 81), ITL: ptr(112.0 / 2001),
			},
		},
		{
			// Older vLLM: gpu_cache_usage_perc, time_per_output_token_seconds,
			// finish_reason spelling, no engine label.
			fixture: "vllm-v0.txt", model: "llama",
			want: Numbers{
				Running: ptr(4), Waiting: ptr(1), KV: ptr(0.25),
				PromptTokens: ptr(1234), GenerationTokens: ptr(5678), Preemptions: ptr(7),
				Finished: map[string]float64{"stop": 12, "length": 2},
				TTFT:     ptr(0.5), ITL: ptr(0.05),
			},
		},
		{
			// Both spellings present: the current one wins. A histogram
			// with no observations has no mean.
			fixture: "vllm-transitional.txt", model: "qwen",
			want: Numbers{
				Running: ptr(0), Waiting: ptr(0), KV: ptr(0.1),
				ITL: ptr(0.025),
			},
		},
	} {
		t.Run(tc.fixture+"/"+tc.model, func(t *testing.T) {
			got := loadFixture(t, tc.fixture).Extract(tc.model)
			checkNum(t, "running", got.Running, tc.want.Running)
			checkNum(t, "waiting", got.Waiting, tc.want.Waiting)
			checkNum(t, "kv", got.KV, tc.want.KV)
			checkNum(t, "prompt_tokens", got.PromptTokens, tc.want.PromptTokens)
			checkNum(t, "generation_tokens", got.GenerationTokens, tc.want.GenerationTokens)
			checkNum(t, "preemptions", got.Preemptions, tc.want.Preemptions)
			checkNum(t, "ttft", got.TTFT, tc.want.TTFT)
			checkNum(t, "queue", got.Queue, tc.want.Queue)
			checkNum(t, "itl", got.ITL, tc.want.ITL)
			if len(got.Finished) != len(tc.want.Finished) {
				t.Fatalf("finished = %v, want %v", got.Finished, tc.want.Finished)
			}
			for k, v := range tc.want.Finished {
				if got.Finished[k] != v {
					t.Errorf("finished[%s] = %v, want %v", k, got.Finished[k], v)
				}
			}
		})
	}
}

// An engine that declares nothing (untyped samples) still gives means.
func TestExtractUntyped(t *testing.T) {
	text := `vllm:num_requests_running{model_name="m"} 5
vllm:time_to_first_token_seconds_sum{model_name="m"} 3
vllm:time_to_first_token_seconds_count{model_name="m"} 6
vllm:request_success_total{model_name="m",finished_reason="stop"} 2
`
	fams, err := ParseMetrics(strings.NewReader(text), "")
	if err != nil {
		t.Fatal(err)
	}
	n := fams.Extract("m")
	checkNum(t, "running", n.Running, ptr(5))
	checkNum(t, "ttft", n.TTFT, ptr(0.5))
	checkNum(t, "waiting", n.Waiting, nil)
	if n.Finished["stop"] != 2 {
		t.Errorf("finished = %v", n.Finished)
	}
}

func TestParseMetricsRejectsGarbage(t *testing.T) {
	for _, text := range []string{
		"<html>502 Bad Gateway</html>\n",
		"vllm:num_requests_running{model_name=\"m\" 5\n",
		"# TYPE x gauge\n# TYPE x counter\nx 1\n",
	} {
		if _, err := ParseMetrics(strings.NewReader(text), "text/plain"); err == nil {
			t.Errorf("ParseMetrics(%q) succeeded", text)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"vllm-current.txt", "vllm-v0.txt", "vllm-transitional.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "glm53")
	}
	f.Add("vllm:num_requests_running NaN\n", "m")
	f.Add("# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_count 0\nvllm:time_to_first_token_seconds_sum 1\n", "m")
	f.Fuzz(func(t *testing.T, text, model string) {
		fams, err := ParseMetrics(strings.NewReader(text), "")
		if err != nil {
			return
		}
		n := fams.Extract(model)
		for _, p := range []*float64{n.Running, n.Waiting, n.KV, n.PromptTokens, n.GenerationTokens, n.Preemptions, n.TTFT, n.Queue, n.ITL} {
			if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0)) {
				t.Fatalf("non-finite number %v from %q", *p, text)
			}
		}
		for r, v := range n.Finished {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite finished[%s] %v from %q", r, v, text)
			}
		}
	})
}

func TestTotal(t *testing.T) {
	fams, err := ParseMetrics(strings.NewReader("# TYPE a_total counter\na_total{x=\"1\"} 2\na_total{x=\"2\"} 3\n# TYPE g gauge\ng 1.5\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if fams.Total("a_total") != 5 || fams.Total("g") != 1.5 || fams.Total("missing") != 0 {
		t.Errorf("totals %v %v %v", fams.Total("a_total"), fams.Total("g"), fams.Total("missing"))
	}
}
