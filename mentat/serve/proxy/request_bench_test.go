package proxy

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
)

// BenchmarkUpstreamRequest is building the engine's request for a small
// chat body: the request, its header and the attached body.
func BenchmarkUpstreamRequest(b *testing.B) {
	const body = `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`
	in := http.Header{"Content-Type": {"application/json"}, "Accept": {"*/*"}, "User-Agent": {"curl"}}
	target, _ := url.Parse("http://127.0.0.1:8000/v1/chat/completions")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		bd, err := httpx.ReadBody(strings.NewReader(body), int64(len(body)), DefaultMaxBody)
		if err != nil {
			b.Fatal(err)
		}
		req := upstreamRequest(ctx, target, bd, upstreamHeader(in))
		if req.ContentLength != int64(len(body)) {
			b.Fatal(req.ContentLength)
		}
		bd.Release()
	}
}

// BenchmarkRoutingRequest is what the balancer reads from a small chat
// request: its prompt blocks and the session header.
func BenchmarkRoutingRequest(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`)
	f, err := extract("application/json", body)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	key := http.CanonicalHeaderKey(balance.DefaultSessionHeader)
	b.ReportAllocs()
	for b.Loop() {
		bl := balance.GetBlocks()
		_ = routingRequest("m", &f, h, key, bl)
		balance.PutBlocks(bl)
	}
}
