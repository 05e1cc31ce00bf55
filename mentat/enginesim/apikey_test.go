package enginesim

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestAPIKey: with --api-key, vLLM's rules: every OpenAI route and
// /tokenize need the bearer key (401 {"error":"Unauthorized"} otherwise),
// the public endpoints and OPTIONS do not.
func TestAPIKey(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.APIKeys = []string{"k-one", "k-two"} })
	send := func(method, path, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, te.url+path, strings.NewReader(`{"model":"sim","prompt":"hi","max_tokens":1}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := te.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, path := range []string{"/v1/models", "/v1/completions", "/tokenize", "/detokenize", "/v1/nothing", "/v2/x"} {
		method := "POST"
		if path == "/v1/models" {
			method = "GET"
		}
		for _, auth := range []string{"", "Bearer k-three", "Basic k-one", "Bearer  k-one", "k-one"} {
			if code, body := send(method, path, auth); code != 401 || body != `{"error":"Unauthorized"}` {
				t.Errorf("%s %s with %q: %d %q, want 401 Unauthorized", method, path, auth, code, body)
			}
		}
		for _, auth := range []string{"Bearer k-one", "bearer k-two", "BEARER k-one"} {
			if code, body := send(method, path, auth); code == 401 {
				t.Errorf("%s %s with %q: 401 %s", method, path, auth, body)
			}
		}
	}
	for _, path := range []string{"/health", "/version", "/metrics", "/nothing"} {
		if code, _ := send("GET", path, ""); code == 401 {
			t.Errorf("GET %s without a key: 401; vLLM leaves it open", path)
		}
	}
	if code, _ := send("OPTIONS", "/v1/models", ""); code == 401 {
		t.Error("OPTIONS without a key: 401; vLLM leaves preflights open")
	}
}

func TestAPIKeyFlagAndEnv(t *testing.T) {
	c, err := ParseArgs([]string{"--api-key", "a", "--api-key", "b"}, io.Discard)
	if err != nil || !slices.Equal(c.APIKeys, []string{"a", "b"}) {
		t.Fatalf("flags: %v %v", c.APIKeys, err)
	}
	c.UseEnvKey("env")
	if !slices.Equal(c.APIKeys, []string{"a", "b"}) {
		t.Fatalf("VLLM_API_KEY overrode --api-key: %v", c.APIKeys)
	}
	c, _ = ParseArgs(nil, io.Discard)
	if c.UseEnvKey(""); c.APIKeys != nil {
		t.Fatal("an empty VLLM_API_KEY set a key")
	}
	if c.UseEnvKey("env"); !slices.Equal(c.APIKeys, []string{"env"}) {
		t.Fatalf("VLLM_API_KEY: %v", c.APIKeys)
	}
	if _, err := ParseArgs([]string{"--api-key="}, io.Discard); err == nil {
		t.Fatal("an empty --api-key was accepted")
	}
}
