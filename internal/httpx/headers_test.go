package httpx

import (
	"fmt"
	"net/http"
	"testing"
)

func TestCopyResponseHeader(t *testing.T) {
	src := http.Header{}
	src.Add("Connection", "X-Hop, keep-alive")
	src.Set("X-Hop", "1")
	src.Set("Keep-Alive", "timeout=5")
	src.Set("Proxy-Authenticate", "Basic")
	src.Set("Transfer-Encoding", "chunked")
	src.Set("Upgrade", "h2c")
	src.Set("Te", "trailers")
	src.Set("Trailer", "X-T")
	src.Set("Content-Type", "application/json")
	src.Add("Set-Cookie", "a=1")
	src.Add("Set-Cookie", "b=2")
	src.Set("X-Request-Id", "r1")
	dst := http.Header{}
	CopyResponseHeader(dst, src)
	want := http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "X-Request-Id": {"r1"}}
	if fmt.Sprint(dst) != fmt.Sprint(want) {
		t.Fatalf("copied %v, want %v", dst, want)
	}
	src["Set-Cookie"][0] = "changed"
	if dst["Set-Cookie"][0] != "a=1" {
		t.Fatal("copied header shares its slice with the upstream's")
	}
}

// TestForwardHeader: only the listed fields go upstream, and none the
// client named in its Connection header (RFC 9110 §7.6.1).
func TestForwardHeader(t *testing.T) {
	in := http.Header{}
	in.Set("Content-Type", "application/json")
	in.Set("Accept", "text/event-stream")
	in.Set("Authorization", "Bearer x")
	in.Set("Cookie", "c=1")
	keys := []string{"Content-Type", "Accept", "Authorization"}
	out := http.Header{}
	ForwardHeader(out, in, keys)
	if len(out) != 3 || out.Get("Accept") != "text/event-stream" {
		t.Fatalf("forwarded %v", out)
	}
	in.Add("Connection", "keep-alive,  accept")
	in.Add("Connection", "AUTHORIZATION")
	out = http.Header{}
	ForwardHeader(out, in, keys)
	if fmt.Sprint(out) != fmt.Sprint(http.Header{"Content-Type": {"application/json"}}) {
		t.Fatalf("Connection-named fields forwarded: %v", out)
	}
}
