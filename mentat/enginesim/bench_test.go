package enginesim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkStreamChat measures the engine's cost per streamed token over
// real loopback HTTP with zero simulated latency (no TTFT, ITL or prefill
// cost): parse, tokenize, look up the prefix cache, schedule, encode,
// write and flush 64 frames per request.
func BenchmarkStreamChat(b *testing.B) {
	te := startEngine(b, false, func(c *Config) { c.TTFT, c.ITL, c.PrefillPerToken = 0, 0, 0; c.MaxNumSeqs = 1024 })
	body, _ := json.Marshal(map[string]any{"model": "sim", "stream": true, "max_tokens": 64, "ignore_eos": true,
		"messages": []map[string]any{{"role": "user", "content": "benchmark the stream"}}})
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := te.client.Post(te.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || n == 0 {
				b.Errorf("status %d, %d bytes", res.StatusCode, n)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkChunkEncode is the per-token frame encoding alone.
func BenchmarkChunkEncode(b *testing.B) {
	j := &job{id: "chatcmpl-0123456789abcdef", created: time.Now().Unix(), model: "sim", promptTokens: 10}
	enc := newChunkEncoder(j, true, false)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = enc.appendToken(buf[:0], i%100+1, i%len(words), "")
	}
}
