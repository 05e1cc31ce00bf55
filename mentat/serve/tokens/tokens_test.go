package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// engine is a vLLM-like /tokenize: it renders the chat through a ChatML
// template (tools first, then messages, then the generation prompt) and
// counts whitespace-separated pieces. Like vLLM it refuses tools that are
// not chat-shaped, and unlike vLLM it refuses media parts, so a test sees
// any that reach it.
type engine struct {
	*httptest.Server
	calls atomic.Int64
	last  atomic.Value // the last request body
}

func newEngine(t *testing.T) *engine {
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/tokenize" {
			http.Error(w, `{"error":{"message":"Not Found"}}`, http.StatusNotFound)
			return
		}
		e.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		e.last.Store(body)
		n, err := render(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": err.Error(), "type": "BadRequestError", "code": 400}})
			return
		}
		tokens := make([]int, n)
		for i := range tokens {
			tokens[i] = 1000 + i
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": n, "max_model_len": 32768, "tokens": tokens})
	}))
	t.Cleanup(e.Close)
	return e
}

func render(body []byte) (int, error) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCalls  json.RawMessage `json:"tool_calls"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return 0, err
	}
	if req.Model == "" || req.Messages == nil {
		return 0, fmt.Errorf("model and messages are required")
	}
	var b strings.Builder
	if len(req.Tools) > 0 {
		b.WriteString("<|im_start|>system\n# Tools\n")
		for i, t := range req.Tools {
			fn, ok := t["function"]
			if !ok || string(t["type"]) != `"function"` {
				return 0, fmt.Errorf("tools.%d.function: Field required", i)
			}
			var f struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			}
			if err := json.Unmarshal(fn, &f); err != nil || f.Name == "" {
				return 0, fmt.Errorf("tools.%d.function.name: Field required", i)
			}
			fmt.Fprintf(&b, "function %s : %s params %s\n", f.Name, f.Description, f.Parameters)
		}
		b.WriteString("<|im_end|>\n")
	}
	for _, m := range req.Messages {
		fmt.Fprintf(&b, "<|im_start|>%s\n", m.Role)
		var s string
		var parts []struct{ Type, Text string }
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			b.WriteString(s)
		case json.Unmarshal(m.Content, &parts) == nil:
			for i, p := range parts {
				if p.Type != "text" {
					return 0, fmt.Errorf("content part type %q reached the tokenizer", p.Type)
				}
				if i > 0 {
					b.WriteString("\n")
				}
				b.WriteString(p.Text)
			}
		}
		if len(m.ToolCalls) > 0 {
			fmt.Fprintf(&b, " <tool_call> %s </tool_call>", m.ToolCalls)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, " (result of %s)", m.ToolCallID)
		}
		b.WriteString(" <|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return len(strings.Fields(b.String())), nil
}

// engineCount is what the engine says for a chat body sent straight to it.
func engineCount(t *testing.T, e *engine, chat string) int {
	t.Helper()
	resp, err := http.Post(e.URL+"/tokenize", "application/json", strings.NewReader(chat))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Count int }
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("engine refused the reference chat %s: %s", chat, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Count == 0 {
		t.Fatalf("engine counted nothing for %s", chat)
	}
	return out.Count
}

type fixture struct {
	engine *engine
	srv    *httptest.Server
}

func setup(t *testing.T, timeout time.Duration) *fixture {
	t.Helper()
	e := newEngine(t)
	mk := func(model, group, base, provider string) *routes.Route {
		r, err := routes.NewRoute(model, group, base, provider)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var h routes.Holder
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{
			"m":      mk("m", "g1", e.URL+"/v1", "vllm"),
			"sg":     mk("sg", "sglang-group", e.URL+"/v1", "sglang"),
			"silent": mk("silent", "quiet-group", e.URL+"/v1", ""),
		},
		map[string]*routes.Group{
			"g1":           {Name: "g1", Healthy: true, Provider: "vllm", Models: []string{"m"}},
			"sglang-group": {Name: "sglang-group", Healthy: true, Provider: "sglang", Models: []string{"sg"}},
			"quiet-group":  {Name: "quiet-group", Healthy: true, Models: []string{"silent"}},
			"down":         {Name: "down", Provider: "vllm", WhyNot: "no running actors", Models: []string{"downmodel"}},
		}, nil))
	srv := httptest.NewServer(New(&h, timeout, nil, nil))
	t.Cleanup(srv.Close)
	return &fixture{engine: e, srv: srv}
}

type answer struct {
	status int
	body   map[string]any
}

func (f *fixture) post(t *testing.T, body string) answer {
	t.Helper()
	resp, err := http.Post(f.srv.URL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, out}
}

func (a answer) count(t *testing.T) int {
	t.Helper()
	if a.status != 200 || a.body["object"] != "response.input_tokens" {
		t.Fatalf("answer %d %v", a.status, a.body)
	}
	return int(a.body["input_tokens"].(float64))
}

func (a answer) errorMessage(t *testing.T, status int, code string) string {
	t.Helper()
	e, ok := a.body["error"].(map[string]any)
	if a.status != status || !ok {
		t.Fatalf("answer %d %v, want %d with an error", a.status, a.body, status)
	}
	msg, _ := e["message"].(string)
	param, hasParam := e["param"]
	if msg == "" || e["type"] == nil || e["code"] != code || !hasParam || param != nil || len(e) != 4 {
		t.Fatalf("error %v: want OpenAI's shape: message, type, param null and code %q", e, code)
	}
	return msg
}

func TestCountsMatchEngine(t *testing.T) {
	f := setup(t, 10*time.Second)
	weatherParams := `{"type":"object","properties":{"city":{"type":"string"}}}`
	for _, tc := range []struct {
		name  string
		body  string
		chat  string // the same input as a chat, sent straight to the engine
		media int
	}{
		{
			name: "string input",
			body: `{"model":"m","input":"hello world"}`,
			chat: `{"model":"m","messages":[{"role":"user","content":"hello world"}]}`,
		},
		{
			name: "instructions lead as system",
			body: `{"model":"m","instructions":"be brief and kind","input":"hello world"}`,
			chat: `{"model":"m","messages":[{"role":"system","content":"be brief and kind"},{"role":"user","content":"hello world"}]}`,
		},
		{
			name: "items with part lists in both spellings, and media",
			body: `{"model":"m","input":[
				{"role":"developer","content":"answer in French"},
				{"type":"message","role":"user","content":[
					{"type":"input_text","text":"what is in these"},
					{"type":"input_image","image_url":"data:image/png;base64,AAAA"},
					{"type":"image_url","image_url":{"url":"http://x/y.png"}},
					{"type":"image","image":"http://x/z.png"},
					{"type":"input_video","video_url":"http://x/v.mp4"},
					{"type":"video_url","video_url":{"url":"http://x/w.mp4"}},
					{"type":"video","video":"http://x/u.mp4"},
					{"type":"input_file","file_data":"JVBERi0xLjQK","filename":"a.pdf"},
					{"type":"text","text":"and this file"}]},
				{"role":"assistant","content":[{"type":"output_text","text":"une image"}]}]}`,
			chat: `{"model":"m","messages":[{"role":"system","content":"answer in French"},
				{"role":"user","content":[{"type":"text","text":"what is in these"},{"type":"text","text":"and this file"}]},
				{"role":"assistant","content":[{"type":"text","text":"une image"}]}]}`,
			media: 3*ImageTokens + 3*VideoTokens,
		},
		{
			name: "responses-style tools are reshaped",
			body: `{"model":"m","input":"weather in Paris?","tools":[{"type":"function","name":"get_weather","description":"current weather","parameters":` + weatherParams + `,"strict":true}]}`,
			chat: `{"model":"m","messages":[{"role":"user","content":"weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"current weather","parameters":` + weatherParams + `}}]}`,
		},
		{
			name: "chat-style tools pass through",
			body: `{"model":"m","input":"weather in Paris?","tools":[{"type":"function","function":{"name":"get_weather","description":"current weather","parameters":` + weatherParams + `}}]}`,
			chat: `{"model":"m","messages":[{"role":"user","content":"weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"current weather","parameters":` + weatherParams + `}}]}`,
		},
		{
			name: "function call round trip",
			body: `{"model":"m","input":[{"role":"user","content":"weather?"},
				{"type":"reasoning","summary":[]},
				{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
				{"type":"function_call_output","call_id":"c1","output":"sunny, 21 C"}]}`,
			chat: `{"model":"m","messages":[{"role":"user","content":"weather?"},
				{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"sunny, 21 C"}]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := engineCount(t, f.engine, tc.chat) + tc.media
			if got := f.post(t, tc.body).count(t); got != want {
				t.Errorf("input_tokens = %d, want %d (engine %d + media %d); engine saw %s",
					got, want, want-tc.media, tc.media, f.engine.last.Load())
			}
		})
	}
}

// A Responses tool sent to the engine unreshaped is refused, as vLLM does;
// this is what the reshaping prevents.
func TestEngineRefusesFlatTools(t *testing.T) {
	f := setup(t, 10*time.Second)
	resp, err := http.Post(f.engine.URL+"/tokenize", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","name":"f"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("test engine accepted a flat tool: %d", resp.StatusCode)
	}
	// The same tool through the router counts.
	if n := f.post(t, `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}]}`).count(t); n == 0 {
		t.Fatal("zero count")
	}
}

func TestRefusals(t *testing.T) {
	f := setup(t, 10*time.Second)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
		mentions   []string
	}{
		{"other provider", `{"model":"sg","input":"hi"}`, 400, "unsupported_provider", []string{"sglang-group", `"sglang"`, "MENTAT_MODEL_PROVIDER=vllm"}},
		{"no provider", `{"model":"silent","input":"hi"}`, 400, "unsupported_provider", []string{"quiet-group", "no provider"}},
		{"unknown model", `{"model":"nope","input":"hi"}`, 404, "model_not_found", []string{"nope"}},
		{"group not admitted", `{"model":"downmodel","input":"hi"}`, 503, "model_unavailable", []string{`group "down", which is not routable now: no running actors`}},
		{"bad json", `{"model":"m","input":`, 400, "invalid_json", []string{"JSON"}},
		{"no model", `{"input":"hi"}`, 400, "missing_model", []string{"model"}},
		{"input not a list", `{"model":"m","input":42}`, 400, "invalid_input", []string{"input"}},
		{"unknown item", `{"model":"m","input":[{"type":"web_search_call","id":"x"}]}`, 400, "invalid_input", []string{"input[0]", "web_search_call"}},
		{"unknown role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "invalid_input", []string{"robot"}},
		{"tools not a list", `{"model":"m","input":"x","tools":{}}`, 400, "invalid_tools", []string{"tools"}},
		{"stored response", `{"model":"m","previous_response_id":"resp_1","input":"x"}`, 400, "unsupported_parameter", []string{"previous_response_id"}},
		{"engine refuses", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, 400, "engine_rejected", []string{"g1", "tools.0.function"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.engine.calls.Load()
			msg := f.post(t, tc.body).errorMessage(t, tc.status, tc.code)
			for _, want := range tc.mentions {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not mention %q", msg, want)
				}
			}
			if tc.code != "engine_rejected" && f.engine.calls.Load() != before {
				t.Errorf("a refused request reached the engine")
			}
		})
	}

	resp, err := http.Get(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestEngineTimeout(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer slow.Close()
	defer close(release)
	rt, _ := routes.NewRoute("m", "g", slow.URL+"/v1", "vllm")
	var h routes.Holder
	h.Store(routes.New(time.Now(), map[string]*routes.Route{"m": rt},
		map[string]*routes.Group{"g": {Name: "g", Healthy: true, Models: []string{"m"}}}, nil))
	srv := httptest.NewServer(New(&h, 100*time.Millisecond, nil, nil))
	defer srv.Close()
	f := &fixture{srv: srv}
	msg := f.post(t, `{"model":"m","input":"hi"}`).errorMessage(t, 504, "upstream_timeout")
	if !strings.Contains(msg, "MCP_TIMEOUT_S") || !strings.Contains(msg, slow.URL+"/tokenize") {
		t.Errorf("message %q", msg)
	}
}

func TestReadCount(t *testing.T) {
	for body, want := range map[string]int{
		`{"count":14,"max_model_len":8192,"tokens":[1,2]}`: 14,
		`{"max_model_len":8192,"tokens":[1,2],"count":2}`:  2,
		`{"tokens":[],"count":0}`:                          0,
	} {
		if n, err := readCount(strings.NewReader(body)); err != nil || n != want {
			t.Errorf("readCount(%s) = %d, %v; want %d", body, n, err, want)
		}
	}
	for _, body := range []string{`{"tokens":[1]}`, `[]`, `{"count":"x"}`, `{"count":-1}`, ``, `{"count":1.5}`} {
		if n, err := readCount(strings.NewReader(body)); err == nil {
			t.Errorf("readCount(%s) = %d, want an error", body, n)
		}
	}
}

func FuzzConvert(f *testing.F) {
	f.Add(`{"model":"m","input":"hello"}`)
	f.Add(`{"model":"m","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image"}]}],"tools":[{"type":"function","name":"f","parameters":{}}]}`)
	f.Add(`{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"},{"type":"function_call_output","output":[{"type":"input_text","text":"r"}]}]}`)
	f.Add(`{"model":"m","input":[{"role":"user","content":null}],"tools":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req request
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		msgs, m, err := convert(&req)
		if err == nil {
			if m.images < 0 || m.videos < 0 {
				t.Fatal("negative media")
			}
			if _, err := json.Marshal(msgs); err != nil {
				t.Fatalf("messages do not marshal: %v", err)
			}
		}
		tools, err := convertTools(req.Tools)
		if err == nil {
			for _, tool := range tools {
				if !json.Valid(tool) {
					t.Fatalf("tool %s is not JSON", tool)
				}
			}
		}
	})
}
