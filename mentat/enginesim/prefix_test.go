package enginesim

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// histSum is the _sum of a histogram family's one sample.
func histSum(t testing.TB, fams map[string]*dtoFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram() == nil {
		t.Fatalf("/metrics has no single histogram %s", name)
	}
	return f.GetMetric()[0].GetHistogram().GetSampleSum()
}

// longText is n vocabulary words: n tokens (one per word), distinct per tag.
func longText(tag string, n int) string {
	var b strings.Builder
	b.WriteString(tag)
	for i := range n - 1 {
		b.WriteString(" ")
		b.WriteString(words[(i*7+len(tag))%len(words)])
	}
	return b.String()
}

type cachedUsage struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (te *testEngine) chatCached(t *testing.T, system, user string) cachedUsage {
	t.Helper()
	code, body := te.post(t, "/v1/chat/completions", map[string]any{"model": "sim", "max_tokens": 2, "ignore_eos": true,
		"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}}})
	if code != 200 {
		t.Fatalf("chat: %d %s", code, body)
	}
	u := decode[cachedUsage](t, body)
	if u.Usage.PromptTokensDetails == nil {
		t.Fatalf("no prompt_tokens_details with --enable-prompt-tokens-details: %s", body)
	}
	return u
}

func TestRepeatedPromptSkipsCachedPrefill(t *testing.T) {
	const perToken = 200 * time.Microsecond
	te := startEngine(t, false, func(c *Config) {
		c.PrefillPerToken, c.Jitter, c.EnablePromptTokensDetails = perToken, 0, true
	})
	system := longText("alpha", 3000)
	first := te.chatCached(t, system, "first question")
	n := first.Usage.PromptTokens
	if got := first.Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("cold cache: cached_tokens %d", got)
	}
	f := te.scrape(t)
	p1 := histSum(t, f, "vllm:request_prefill_time_seconds")
	// Timers never fire early: the prefill took at least the fixed part and
	// every prompt token.
	if min1 := (te.cfg.TTFT + time.Duration(n)*perToken).Seconds(); p1 < min1 {
		t.Fatalf("first prefill %.3fs, below its %.3fs of compute", p1, min1)
	}
	second := te.chatCached(t, system, "first question")
	// The whole prompt is cached, but its last token is recomputed, which
	// costs its whole block: cached_tokens is (n-1) rounded down to blocks.
	want := (n - 1) / 16 * 16
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != want {
		t.Fatalf("repeat: cached_tokens %d, want %d of %d", got, want, n)
	}
	f = te.scrape(t)
	p2 := histSum(t, f, "vllm:request_prefill_time_seconds") - p1
	if min2 := (te.cfg.TTFT + time.Duration(n-want)*perToken).Seconds(); p2 < min2 {
		t.Errorf("second prefill %.3fs, below its %.3fs of compute", p2, min2)
	}
	// The cached part (3000 tokens × 200µs ≈ 0.6s) is what the second one
	// skips.
	if p2 >= p1 {
		t.Errorf("second prefill %.3fs is not below the first's %.3fs", p2, p1)
	}
	if q, h := value(t, f, "vllm:prefix_cache_queries_total"), value(t, f, "vllm:prefix_cache_hits_total"); q != float64(2*n) || h != float64(want) {
		t.Errorf("prefix cache queries %v hits %v, want %d and %d", q, h, 2*n, want)
	}
	// A different question after the same system prompt hits the system
	// prompt's whole blocks.
	third := te.chatCached(t, system, "another one entirely")
	shared := commonPrefix(t, system, "first question", "another one entirely")
	if got := third.Usage.PromptTokensDetails.CachedTokens; got != shared/16*16 || shared < 3000 {
		t.Errorf("shared system prompt: cached_tokens %d, want %d (the whole blocks of %d shared tokens)", got, shared/16*16, shared)
	}
}

func TestPrefixCachingOff(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.EnablePrefixCaching, c.EnablePromptTokensDetails = false, true })
	system := longText("beta", 500)
	for range 2 {
		if got := te.chatCached(t, system, "q").Usage.PromptTokensDetails.CachedTokens; got != 0 {
			t.Fatalf("caching off: cached_tokens %d", got)
		}
	}
	f := te.scrape(t)
	if q := value(t, f, "vllm:prefix_cache_queries_total"); q != 0 {
		t.Errorf("caching off: %v queries", q)
	}
}

func TestCancelFreesBlocksAndKeepsCache(t *testing.T) {
	te := startEngine(t, true, func(c *Config) { c.ITL = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := te.openStream(t, ctx, 3000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	st := te.sched.state()
	if st.BlocksUsed == 0 || st.Running != 1 {
		t.Fatalf("a running stream holds no blocks: %+v", st)
	}
	// The stream takes a block every 16 tokens: the scrape falls between
	// the readings before and after it.
	f := te.scrape(t)
	after := te.sched.state()
	if u := value(t, f, "vllm:kv_cache_usage_perc"); u < float64(st.BlocksUsed)/float64(st.Blocks) || u > float64(after.BlocksUsed)/float64(after.Blocks) {
		t.Errorf("kv_cache_usage_perc %v, want between %d and %d of %d blocks", u, st.BlocksUsed, after.BlocksUsed, st.Blocks)
	}
	cancel()
	res.Body.Close()
	eventually(t, "the cancelled stream's blocks freed", func() bool {
		st := te.sched.state()
		return st.BlocksUsed == 0 && st.Running == 0
	})
	f = te.scrape(t)
	if u := value(t, f, "vllm:kv_cache_usage_perc"); u != 0 {
		t.Errorf("kv_cache_usage_perc %v after the cancel", u)
	}
}

// commonPrefix is how many leading tokens two rendered chats share.
func commonPrefix(t *testing.T, system, userA, userB string) int {
	t.Helper()
	render := func(user string) []int {
		msgs := []chatMessage{{Role: "system", Content: []byte(mustJSON(system))}, {Role: "user", Content: []byte(mustJSON(user))}}
		s, err := renderChat(msgs, nil, true, false)
		if err != nil {
			t.Fatal(err)
		}
		return Tokenize(nil, s)
	}
	a, b := render(userA), render(userB)
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

func (te *testEngine) completionCached(t *testing.T, prompt []int) int {
	t.Helper()
	code, body := te.post(t, "/v1/completions", map[string]any{"model": "sim", "prompt": prompt, "max_tokens": 1})
	if code != 200 {
		t.Fatalf("completion: %d %s", code, body)
	}
	u := decode[cachedUsage](t, body)
	if u.Usage.PromptTokensDetails == nil {
		t.Fatalf("no prompt_tokens_details: %s", body)
	}
	return u.Usage.PromptTokensDetails.CachedTokens
}

func TestLRUEvictionUnderSmallCache(t *testing.T) {
	// 16 blocks of 16 tokens. Three 120-token prompts (8 blocks each, 7 of
	// them whole) do not all stay cached.
	te := startEngine(t, false, func(c *Config) {
		c.MaxModelLen, c.KVCacheTokens, c.EnablePromptTokensDetails = 256, 256, true
	})
	a, b, c := ids(300, 120), ids(600, 120), ids(900, 120)
	for _, p := range [][]int{a, b} {
		if got := te.completionCached(t, p); got != 0 {
			t.Fatalf("cold prompt: %d cached", got)
		}
	}
	// c needs 8 blocks: the 2 plain free ones, then 6 evicted from the LRU
	// front, which is a's (the least recently used), tail first.
	te.completionCached(t, c)
	st := te.sched.state()
	if st.Evictions != 6 || st.BlocksUsed != 0 {
		t.Fatalf("after c: %+v, want 6 evictions", st)
	}
	// a kept only its first block; b is whole (all but the last token's
	// block, as for every full hit).
	if got := te.completionCached(t, b); got != 112 {
		t.Errorf("b after c: %d cached, want 112", got)
	}
	if got := te.completionCached(t, a); got != 16 {
		t.Errorf("a after c: %d cached, want 16 (its first block outlived its tail)", got)
	}
	f := te.scrape(t)
	if u := value(t, f, "vllm:kv_cache_usage_perc"); u != 0 {
		t.Errorf("kv_cache_usage_perc %v with nothing running: cached blocks are free blocks", u)
	}
	if h := value(t, f, "vllm:prefix_cache_hits_total"); h != 112+16 {
		t.Errorf("prefix_cache_hits_total %v, want 128", h)
	}
}

func TestStreamUsageCarriesCachedTokens(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.EnablePromptTokensDetails = true })
	prompt := ids(300, 40)
	te.completionCached(t, prompt)
	res, err := te.client.Post(te.url+"/v1/completions", "application/json", strings.NewReader(
		`{"model":"sim","prompt":`+strings.Join(strings.Fields(fmt.Sprint(prompt)), ",")+`,"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	frames := readFrames(t, res.Body)
	if len(frames) < 2 || frames[len(frames)-1].data != "[DONE]" {
		t.Fatalf("frames %v", frames)
	}
	u := decode[cachedUsage](t, []byte(frames[len(frames)-2].data))
	if u.Usage.PromptTokens != 40 || u.Usage.PromptTokensDetails == nil || u.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Errorf("usage frame %s, want 32 of 40 prompt tokens cached", frames[len(frames)-2].data)
	}
}

func TestCacheSalt(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.EnablePromptTokensDetails = true })
	prompt := ids(300, 40)
	salted := func(salt any) (int, []byte) {
		return te.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "cache_salt": salt})
	}
	if code, body := salted("tenant-a"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	// The same salt shares the blocks; another salt or none does not.
	for _, c := range []struct {
		salt any
		want int
	}{{"tenant-a", 32}, {"tenant-b", 0}, {nil, 0}} {
		code, body := salted(c.salt)
		if u := decode[cachedUsage](t, body); code != 200 || u.Usage.PromptTokensDetails.CachedTokens != c.want {
			t.Errorf("cache_salt %v: %d %s, want %d cached", c.salt, code, body, c.want)
		}
	}
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/v1/responses"} {
		code, body := te.post(t, path, map[string]any{"prompt": "x", "input": "x", "messages": []map[string]any{{"role": "user", "content": "x"}},
			"max_tokens": 1, "cache_salt": ""})
		if code != 400 || !strings.Contains(string(body), "cache_salt") {
			t.Errorf("%s with an empty cache_salt: %d %s", path, code, body)
		}
	}
}
