package enginesim

import (
	"strings"
	"testing"
)

func TestMetricsFollowTraffic(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.ServedModelNames = []string{"glm53", "alias"} })
	var prompt, gen, itls int
	for i, maxTokens := range []int{1, 3, 7} {
		code, body := te.post(t, "/v1/chat/completions", map[string]any{"model": "alias", "max_tokens": maxTokens,
			"messages": []map[string]any{{"role": "user", "content": strings.Repeat("q", i+1)}}})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		u := decode[chatOut](t, body).Usage
		prompt += u.PromptTokens
		gen += u.CompletionTokens
		itls += u.CompletionTokens - 1
	}
	// One natural stop.
	_, body := te.post(t, "/v1/completions", map[string]any{"model": "glm53", "prompt": "p", "max_tokens": 500})
	u := decode[completionOut](t, body).Usage
	prompt += u.PromptTokens
	gen += u.CompletionTokens
	itls += u.CompletionTokens - 1

	f := te.scrape(t)
	if f["go_goroutines"] == nil || f["process_open_fds"] == nil {
		t.Error("no go_goroutines or process_open_fds: the runtime's own series are missing")
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds"} {
		m := f[name].GetMetric()[0]
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		// vLLM labels with the first served name and engine index 0.
		if labels["model_name"] != "glm53" || labels["engine"] != "0" {
			t.Errorf("%s labels %v", name, labels)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vllm:prompt_tokens_total", nil, float64(prompt)},
		{"vllm:generation_tokens_total", nil, float64(gen)},
		{"vllm:request_success_total", []string{"finished_reason", "length"}, 3},
		{"vllm:request_success_total", []string{"finished_reason", "stop"}, 1},
		{"vllm:request_success_total", []string{"finished_reason", "abort"}, 0},
		{"vllm:time_to_first_token_seconds", nil, 4},
		{"vllm:request_queue_time_seconds", nil, 4},
		{"vllm:request_prefill_time_seconds", nil, 4},
		{"vllm:request_decode_time_seconds", nil, 4},
		{"vllm:request_inference_time_seconds", nil, 4},
		{"vllm:prefix_cache_queries_total", nil, float64(prompt)},
		{"vllm:inter_token_latency_seconds", nil, float64(itls)},
		{"vllm:num_preemptions_total", nil, 0},
		{"vllm:num_requests_running", nil, 0},
		{"vllm:num_requests_waiting", nil, 0},
		{"vllm:kv_cache_usage_perc", nil, 0},
	} {
		if got := value(t, f, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Histogram sums follow the configured timing: mean TTFT at least the
	// prefill time less jitter.
	h := f["vllm:time_to_first_token_seconds"].GetMetric()[0].GetHistogram()
	if mean := h.GetSampleSum() / float64(h.GetSampleCount()); mean < te.cfg.TTFT.Seconds()*0.85 {
		t.Errorf("mean TTFT %vs below the configured %v", mean, te.cfg.TTFT)
	}
}
