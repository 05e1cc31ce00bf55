package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// mentatDeadline bounds every OpenAI call: past it the request is a hang
// (a defect), whatever else happened. Faults that stop a process last
// at most stopMax, so a served answer never needs this long.
const mentatDeadline = 60 * time.Second

// The shared prefix: a long system prompt most chat requests start with,
// so the routers' prefix affinity and the engines' caches are exercised.
var sharedSystem = strings.Repeat("You are the soak's assistant. Answer briefly and exactly. ", 40)

// words makes n distinct-looking words from r.
func words(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "w%x", r.Uint32()&0xfffff)
	}
	return b.String()
}

// mentatClient sends OpenAI calls through Nginx to the routers.
type mentatClient struct {
	front string
	http  *http.Client
	paths map[string][]string // model → the components a call depends on
}

func (c *mentatClient) path(model string) []string { return c.paths[model] }

// chat sends one chat completion (or a completion when legacy) and judges
// it: ignore_eos with a per-request max_tokens makes the answer's length
// exact, so an answer meant for another request (another length) or a
// truncated one shows.
func (c *mentatClient) chat(ctx context.Context, r *rand.Rand, model string, stream, legacy, shared bool) (res record.Result) {
	maxTokens := 3 + r.IntN(40)
	prompt := words(r, 4+r.IntN(60))
	body := map[string]any{"model": model, "max_tokens": maxTokens, "ignore_eos": true, "stream": stream}
	kind := "chat"
	if legacy {
		kind = "completion"
		if shared {
			prompt = sharedSystem + prompt
		}
		body["prompt"] = prompt
	} else {
		msgs := []map[string]string{{"role": "user", "content": prompt}}
		if shared {
			msgs = append([]map[string]string{{"role": "system", "content": sharedSystem}}, msgs...)
		}
		body["messages"] = msgs
	}
	if stream {
		kind += "-stream"
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	res = record.Result{Kind: kind, Path: c.path(model)}
	url := c.front + "/v1/chat/completions"
	if legacy {
		url = c.front + "/v1/completions"
	}
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, mentatDeadline)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	resp, err := c.post(ctx, url, b)
	if err != nil {
		return failed(res, ctx, err)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		return refused(res, resp)
	}
	if !stream {
		var out struct {
			Model   string `json:"model"`
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return failed(res, ctx, fmt.Errorf("reading a 200's body: %w", err))
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return defect(res, "200 with a body that is not JSON: %v: %.120q", err, raw)
		}
		text := ""
		if len(out.Choices) == 1 {
			text = out.Choices[0].Text + out.Choices[0].Message.Content
		}
		switch {
		case out.Model != model:
			return defect(res, "answer for model %q, asked %q", out.Model, model)
		case len(out.Choices) != 1 || text == "" || out.Choices[0].FinishReason != "length":
			return defect(res, "200 without one finished choice with text: %.200s", raw)
		case out.Usage.CompletionTokens != maxTokens:
			return defect(res, "completion_tokens %d, asked exactly %d (ignore_eos)", out.Usage.CompletionTokens, maxTokens)
		}
		return res
	}
	return judgeStream(res, ctx, resp.Body, model, maxTokens)
}

// judgeStream reads an SSE answer to the end. Served: every frame JSON,
// maxTokens content frames, the usage frame, one [DONE] last. An error
// event, or a connection that broke, is a failure; a stream that ended
// cleanly without [DONE] is a defect.
func judgeStream(res record.Result, ctx context.Context, body io.Reader, model string, maxTokens int) record.Result {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	tokens, usage, done := 0, -1, false
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return defect(res, "stream line that is not an SSE data line: %.120q", line)
		}
		if done {
			return defect(res, "data after [DONE]: %.120q", data)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var f struct {
			Model   string          `json:"model"`
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			return defect(res, "stream frame that is not JSON: %.120q", data)
		}
		if len(f.Error) > 0 && string(f.Error) != "null" {
			res.Failed, res.Detail = true, fmt.Sprintf("error event after %d tokens: %.160s", tokens, f.Error)
			// Nothing may follow an error event but the end of the stream.
			for sc.Scan() {
				if l := sc.Text(); l == "data: [DONE]" {
					return defect(res, "[DONE] after an error event")
				}
			}
			return res
		}
		if f.Model != model {
			return defect(res, "frame for model %q, asked %q", f.Model, model)
		}
		for _, ch := range f.Choices {
			if ch.Text != "" || ch.Delta.Content != "" {
				tokens++
			}
		}
		if f.Usage != nil {
			usage = f.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		if done {
			return defect(res, "[DONE] arrived, then the stream broke: %v", err)
		}
		return failed(res, ctx, fmt.Errorf("stream broke after %d tokens: %w", tokens, err))
	}
	switch {
	case !done:
		return defect(res, "stream ended cleanly after %d tokens without [DONE] or an error event", tokens)
	case usage != maxTokens:
		return defect(res, "usage.completion_tokens %d, asked exactly %d", usage, maxTokens)
	case tokens < 1 || tokens > maxTokens:
		return defect(res, "%d content frames for %d tokens", tokens, maxTokens)
	}
	return res
}

// embeddings asks for one vector per input and checks their count and
// length.
func (c *mentatClient) embeddings(ctx context.Context, r *rand.Rand, model string) (res record.Result) {
	n := 1 + r.IntN(4)
	in := make([]string, n)
	for i := range in {
		in[i] = words(r, 3+r.IntN(20))
	}
	b, _ := json.Marshal(map[string]any{"model": model, "input": in})
	res = record.Result{Kind: "embeddings", Path: c.path(model)}
	ctx, cancel := context.WithTimeout(ctx, mentatDeadline)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	resp, err := c.post(ctx, c.front+"/v1/embeddings", b)
	if err != nil {
		return failed(res, ctx, err)
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		return refused(res, resp)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return failed(res, ctx, fmt.Errorf("reading a 200's body: %w", err))
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return defect(res, "200 with a body that is not JSON: %v", err)
	}
	if len(out.Data) != n {
		return defect(res, "%d embeddings for %d inputs", len(out.Data), n)
	}
	for i, d := range out.Data {
		if d.Index != i || len(d.Embedding) != EmbeddingDim {
			return defect(res, "embedding %d: index %d, %d dimensions (want %d)", i, d.Index, len(d.Embedding), EmbeddingDim)
		}
	}
	return res
}

func (c *mentatClient) post(ctx context.Context, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.http.Do(req)
}

// mcpClient holds one MCP session through Nginx (each call may land on
// either router: the session id is sealed, any router continues it).
type mcpClient struct {
	front string
	http  *http.Client
	cs    *mcp.ClientSession
	paths map[string][]string // tool → components
}

// call calls one tool on the session, opening a session first when there
// is none (or the last one failed).
func (c *mcpClient) call(ctx context.Context, tool string) (res record.Result) {
	res = record.Result{Kind: "mcp-call", Path: c.paths[tool]}
	ctx, cancel := context.WithTimeout(ctx, mentatDeadline)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	if c.cs == nil {
		cl := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "v0"}, nil)
		cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.front + "/mcp", HTTPClient: c.http, MaxRetries: -1}, nil)
		if err != nil {
			res.Kind = "mcp-connect"
			return failed(res, ctx, err)
		}
		c.cs = cs
	}
	out, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
	if err != nil {
		_ = c.cs.Close()
		c.cs = nil
		return failed(res, ctx, err)
	}
	if out.IsError {
		res.Failed, res.Detail = true, "tool error: "+toolText(out)
		return res
	}
	if len(out.Content) == 0 || toolText(out) == "" {
		return defect(res, "tool result without content")
	}
	return res
}

func (c *mcpClient) close() {
	if c.cs != nil {
		_ = c.cs.Close()
	}
}

func toolText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	s := b.String()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// failed marks a request that got no answer: a deadline passed is a hang
// (a defect), anything else a connection error the judge attributes.
func failed(res record.Result, ctx context.Context, err error) record.Result {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return defect(res, "no answer within its deadline: %v", err)
	}
	res.Failed, res.Detail = true, "connection: "+err.Error()
	return res
}

// refused marks a non-2xx answer as a failure, with its body for the
// report (a body that does not say what failed is a defect: clients must
// be told).
func refused(res record.Result, resp *http.Response) record.Result {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	res.Status = resp.StatusCode
	return refusedBody(res, raw)
}

func defect(res record.Result, format string, args ...any) record.Result {
	res.Defect, res.Detail = true, fmt.Sprintf(format, args...)
	return res
}
