package enginesim

import (
	"testing"
)

func TestFailRate(t *testing.T) {
	pattern := func(seed uint64) []int {
		te := startEngine(t, false, func(c *Config) { c.FailRate = 0.5; c.Seed = seed; c.TTFT, c.ITL = 0, 0 })
		var codes []int
		for i := 0; i < 40; i++ {
			code, body := te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": "x", "max_tokens": 1})
			if code == 500 {
				e := decode[errorBody](t, body)
				if e.Object != "error" || e.Type != "InternalServerError" || e.Code != 500 || e.Message == "" {
					t.Fatalf("injected failure shape: %s", body)
				}
			} else if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			codes = append(codes, code)
		}
		if got := te.stats.injectedFailures.Load(); got == 0 || got == 40 {
			t.Errorf("fail-rate 0.5 failed %d of 40", got)
		}
		return codes
	}
	a, b := pattern(7), pattern(7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different failures: %v vs %v", a, b)
		}
	}

	te := startEngine(t, false, func(c *Config) { c.FailRate = 1 })
	if code, _ := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "x"}}}); code != 500 {
		t.Errorf("fail-rate 1, stream: %d", code)
	}
	// Only generation fails; the rest of the API stays up.
	if code, _ := te.post(t, "/tokenize", map[string]any{"model": "sim", "prompt": "x"}); code != 200 {
		t.Errorf("fail-rate 1, /tokenize: %d", code)
	}
}
