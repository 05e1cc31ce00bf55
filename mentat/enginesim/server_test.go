package enginesim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestModelsShape(t *testing.T) {
	te := startEngine(t, false, func(c *Config) {
		c.Model = "/models/glm"
		c.ServedModelNames = []string{"glm53", "glm"}
		c.MaxModelLen = 8192
	})
	code, body := te.do(t, http.MethodGet, "/v1/models", nil)
	if code != 200 {
		t.Fatalf("GET /v1/models: %d %s", code, body)
	}
	got := decode[struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}](t, body)
	if got.Object != "list" || len(got.Data) != 2 {
		t.Fatalf("want a list of 2 models, got %s", body)
	}
	for i, want := range []string{"glm53", "glm"} {
		m := got.Data[i]
		if m["id"] != want || m["object"] != "model" || m["owned_by"] != "vllm" || m["root"] != "/models/glm" ||
			m["max_model_len"] != float64(8192) {
			t.Errorf("model %d: %v", i, m)
		}
		if p, ok := m["parent"]; !ok || p != nil {
			t.Errorf("model %d: parent must be present and null, got %v", i, m)
		}
		if c, ok := m["created"].(float64); !ok || c <= 0 {
			t.Errorf("model %d: created must be a Unix time, got %v", i, m["created"])
		}
		perms, ok := m["permission"].([]any)
		if !ok || len(perms) != 1 || perms[0].(map[string]any)["object"] != "model_permission" {
			t.Errorf("model %d: permission like vLLM's, got %v", i, m["permission"])
		}
	}
}

func TestHealthAndRouting(t *testing.T) {
	te := startEngine(t, false, nil)
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/health", 200, ""},
		{"GET", "/v1/chat/completions", 405, `{"detail":"Method Not Allowed"}`},
		{"POST", "/v1/models", 405, `{"detail":"Method Not Allowed"}`},
		{"GET", "/v1/nothing", 404, `{"detail":"Not Found"}`},
		// vLLM routes this to GET /v1/responses/{response_id}.
		{"POST", "/v1/responses/input_tokens", 405, `{"detail":"Method Not Allowed"}`},
	} {
		code, body := te.do(t, tc.method, tc.path, nil)
		if code != tc.code || string(body) != tc.body {
			t.Errorf("%s %s: got %d %q, want %d %q", tc.method, tc.path, code, body, tc.code, tc.body)
		}
	}
	code, body := te.do(t, "GET", "/version", nil)
	if code != 200 || !strings.Contains(string(body), "enginesim") {
		t.Errorf("GET /version: %d %s", code, body)
	}
}

func TestErrorShapes(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.MaxModelLen = 64 })
	user := []map[string]any{{"role": "user", "content": "hello"}}
	long := strings.Repeat("zq ", 100)
	for _, tc := range []struct {
		name string
		path string
		body any
		code int
		typ  string
		msg  string
	}{
		{"unknown model", "/v1/chat/completions", map[string]any{"model": "nope", "messages": user}, 404, "NotFoundError", "The model `nope` does not exist."},
		{"unknown model completions", "/v1/completions", map[string]any{"model": "nope", "prompt": "x"}, 404, "NotFoundError", "The model `nope` does not exist."},
		{"unknown model tokenize", "/tokenize", map[string]any{"model": "nope", "prompt": "x"}, 404, "NotFoundError", "The model `nope` does not exist."},
		{"no messages", "/v1/chat/completions", map[string]any{"model": "sim"}, 400, "BadRequestError", "messages: Field required"},
		{"messages wrong type", "/v1/chat/completions", map[string]any{"model": "sim", "messages": "hi"}, 400, "BadRequestError", "messages"},
		{"max_tokens too large", "/v1/chat/completions", map[string]any{"model": "sim", "messages": user, "max_tokens": 60}, 400, "BadRequestError", "'max_tokens' or 'max_completion_tokens' is too large: 60. This model's maximum context length is 64 tokens"},
		{"prompt too long", "/v1/completions", map[string]any{"model": "sim", "prompt": long}, 400, "BadRequestError", "This model's maximum context length is 64 tokens. However, your request has"},
		{"max_tokens zero", "/v1/completions", map[string]any{"model": "sim", "prompt": "x", "max_tokens": 0}, 400, "BadRequestError", "max_tokens must be at least 1"},
		{"n=2", "/v1/chat/completions", map[string]any{"model": "sim", "messages": user, "n": 2}, 400, "BadRequestError", "n=2"},
		{"stream_options without stream", "/v1/chat/completions", map[string]any{"model": "sim", "messages": user, "stream_options": map[string]any{"include_usage": true}}, 400, "BadRequestError", "Stream options can only be defined when `stream=True`."},
		{"responses-API tool", "/v1/chat/completions", map[string]any{"model": "sim", "messages": user, "tools": []any{map[string]any{"type": "function", "name": "f", "parameters": map[string]any{}}}}, 400, "BadRequestError", "function: Field required"},
		{"empty prompt", "/v1/completions", map[string]any{"model": "sim", "prompt": ""}, 400, "BadRequestError", "Either prompt or prompt_embeds"},
		{"batch prompt", "/v1/completions", map[string]any{"model": "sim", "prompt": []string{"a", "b"}}, 400, "BadRequestError", "one prompt per request"},
		{"token out of vocab", "/v1/completions", map[string]any{"model": "sim", "prompt": []int{1, 1 << 30}}, 400, "BadRequestError", "out of vocabulary"},
		{"unknown content part", "/v1/chat/completions", map[string]any{"model": "sim", "messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "hologram"}}}}}, 400, "BadRequestError", "unknown content part type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := te.post(t, tc.path, tc.body)
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %s: %v", code, body, err)
			}
			if code != tc.code || e.Code != tc.code || e.Object != "error" || e.Type != tc.typ || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("got %d %s, want %d %s containing %q", code, body, tc.code, tc.typ, tc.msg)
			}
			if !strings.Contains(string(body), `"param":null`) {
				t.Errorf("vLLM's error has param:null: %s", body)
			}
		})
	}
	code, body := te.do(t, "POST", "/v1/chat/completions", []byte(`{"model":`))
	if code != 400 || !strings.Contains(string(body), `"type":"BadRequestError"`) {
		t.Errorf("broken JSON: %d %s", code, body)
	}
	// Nothing above may have reached the scheduler.
	if n := te.stats.requests.Load(); n != 0 {
		t.Errorf("%d rejected requests were counted as served", n)
	}
}
