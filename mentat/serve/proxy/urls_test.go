package proxy

import (
	"net/url"
	"testing"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestTarget(t *testing.T) {
	cases := []struct{ base, req, want string }{
		{"http://10.0.0.1:8000/v1", "/v1/chat/completions", "http://10.0.0.1:8000/v1/chat/completions"},
		{"http://10.0.0.1:8000/v1", "/v1/completions?api-version=1&b=%26", "http://10.0.0.1:8000/v1/completions?api-version=1&b=%26"},
		{"http://10.0.0.1:8000/v1", "/v1", "http://10.0.0.1:8000/v1"},
		{"http://10.0.0.1:8000/v1", "/tokenize", "http://10.0.0.1:8000/tokenize"},
		{"http://10.0.0.1:8000/v1", "/detokenize?x=1", "http://10.0.0.1:8000/detokenize?x=1"},
		{"http://10.0.0.1:8000/v1", "/v1x/foo", "http://10.0.0.1:8000/v1x/foo"},
		{"http://10.0.0.1:8000/v1", "/pooling", "http://10.0.0.1:8000/pooling"},
		{"http://10.0.0.1:8000/v1/", "/v1/embeddings", "http://10.0.0.1:8000/v1/embeddings"},
		{"http://10.0.0.1:8000/v1/", "/tokenize", "http://10.0.0.1:8000/tokenize"},
		{"http://gw.example/team/a/v1", "/v1/chat/completions", "http://gw.example/team/a/v1/chat/completions"},
		{"http://gw.example/team/a/v1", "/tokenize", "http://gw.example/team/a/tokenize"},
		{"http://10.0.0.1:8000", "/v1/chat/completions", "http://10.0.0.1:8000/chat/completions"},
		{"http://10.0.0.1:8000", "/tokenize", "http://10.0.0.1:8000/tokenize"},
		{"http://10.0.0.1:8000/v1", "/v1/files/a%2Fb", "http://10.0.0.1:8000/v1/files/a%2Fb"},
		{"http://10.0.0.1:8000/v1", "/v1/a%20b?q", "http://10.0.0.1:8000/v1/a%20b?q"},
		{"http://10.0.0.1:8000/v1?key=k", "/v1/models?x=1", "http://10.0.0.1:8000/v1/models?key=k&x=1"},
		{"http://10.0.0.1:8000/v1?key=k", "/v1/models", "http://10.0.0.1:8000/v1/models?key=k"},
		{"http://[::1]:8000/v1", "/v1/chat/completions#frag", "http://[::1]:8000/v1/chat/completions"},
	}
	for _, c := range cases {
		rt, err := routes.NewRoute("m", "g", c.base, "")
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := Target(rt, u).String(); got != c.want {
			t.Errorf("Target(%s, %s) = %s, want %s", c.base, c.req, got, c.want)
		}
	}
}
