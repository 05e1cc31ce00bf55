// Package openaijs runs the official OpenAI Node clients (pinned in
// scripts/npm-tools.json, installed into .deps/node by `make setup`)
// against a server and returns what they parsed: the check that an
// OpenAI-compatible endpoint really is compatible with the client people use.
package openaijs

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

//go:embed client.mjs
var script []byte

//go:embed keys.mjs
var keysScript []byte

//go:embed flow.mjs
var flowScript []byte

// Clients are the npm aliases of the pinned client majors.
var Clients = []string{"openai-v4", "openai-v7"}

// Result is what client.mjs prints.
type Result struct {
	Embeddings struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Count  int    `json:"count"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
		Default [][]float64 `json:"default"`
		Float   [][]float64 `json:"float"`
		Base64  string      `json:"base64"`
	} `json:"embeddings"`
	Response struct {
		ID         string `json:"id"`
		Object     string `json:"object"`
		Status     string `json:"status"`
		OutputText string `json:"output_text"`
		Usage      struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	} `json:"response"`
	Stream struct {
		Types         []string `json:"types"`
		Seqs          []int    `json:"seqs"`
		Deltas        string   `json:"deltas"`
		CompletedText string   `json:"completed_text"`
		Status        string   `json:"status"`
	} `json:"stream"`
	Helper struct {
		OutputText string `json:"output_text"`
		Status     string `json:"status"`
	} `json:"helper"`
}

// depsNode finds .deps/node above the working directory (tests run in
// their package directory, somewhere under the module root).
func depsNode() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".deps", "node"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Run runs client (one of Clients) against baseURL (ending in /v1) with
// model, within a minute.
func Run(client, baseURL, model string) (*Result, error) {
	var r Result
	if err := run(script, client, &r, baseURL, model); err != nil {
		return nil, err
	}
	return &r, nil
}

// KeysArgs is what keys.mjs is given: the router's base URL (ending in
// /v1), a model in the scoped key's scope and a routed one outside it,
// and the secrets of the keys it uses.
type KeysArgs struct {
	BaseURL string `json:"baseURL"`
	Model   string `json:"model"`
	Other   string `json:"other"`
	// Scoped may use Model only; Wide every model; Tiny has a small rpm;
	// Bad is no key of the file.
	Scoped string `json:"scoped"`
	Wide   string `json:"wide"`
	Tiny   string `json:"tiny"`
	Bad    string `json:"bad"`
}

// Failure is an error the client raised: its class and fields.
type Failure struct {
	Class  string `json:"cls"`
	Status int    `json:"status"`
	Type   string `json:"type"`
	Code   string `json:"code"`
}

// KeysResult is what keys.mjs prints.
type KeysResult struct {
	Listed struct {
		Scoped []string `json:"scoped"`
		Wide   []string `json:"wide"`
	} `json:"listed"`
	RetrieveOther Failure  `json:"retrieveOther"`
	BadKey        Failure  `json:"badKey"`
	OutOfScope    Failure  `json:"outOfScope"`
	Limited       *Failure `json:"limited"`
	Retry         Retry    `json:"retry"`
	Streams       struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		CountedFrames int64 `json:"counted_frames"`
	} `json:"streams"`
}

// Retry is one call made with retries on: the statuses of the client's
// requests for it, for each retry what the refusal before it advertised
// and how long the client waited, and the choices answered.
type Retry struct {
	Statuses []int `json:"statuses"`
	Waits    []struct {
		AdvertisedMS float64 `json:"advertisedMs"`
		RetryAfter   string  `json:"retryAfter"`
		WaitedMS     float64 `json:"waitedMs"`
	} `json:"waits"`
	Answered int `json:"answered"`
}

// RunKeys runs keys.mjs with client (one of Clients), within two minutes.
func RunKeys(client string, args KeysArgs) (*KeysResult, error) {
	return runJSON[KeysResult](keysScript, client, args)
}

// RunFlow runs flow.mjs with client (one of Clients) against baseURL
// (ending in /v1) for model: one sheddable call with retries on.
func RunFlow(client, baseURL, model string) (*Retry, error) {
	return runJSON[Retry](flowScript, client, map[string]string{"baseURL": baseURL, "model": model})
}

// runJSON runs src with its arguments as one JSON object and decodes what
// it prints.
func runJSON[T any](src []byte, client string, args any) (*T, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	var r T
	if err := run(src, client, &r, string(b)); err != nil {
		return nil, err
	}
	return &r, nil
}

// run runs the script src with client's index.mjs and args, and decodes
// what it prints into out.
func run(src []byte, client string, out any, args ...string) error {
	deps, err := depsNode()
	if err != nil {
		return err
	}
	node := filepath.Join(deps, "node_modules", ".bin", "node")
	entry := filepath.Join(deps, "node_modules", client, "index.mjs")
	for _, p := range []string{node, entry} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: run `make setup` (scripts/setup-npm.sh installs the pinned OpenAI clients)", err)
		}
	}
	dir, err := os.MkdirTemp("", "openaijs")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "client.mjs")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{path, entry}, args...)...)
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	printed, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", client, err, stderr.b)
	}
	if err := json.Unmarshal(printed, out); err != nil {
		return fmt.Errorf("%s printed %q: %v", client, printed, err)
	}
	return nil
}

// limitedBuffer keeps the first 64 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// StreamEvents is the event sequence of a streamed response with n tokens.
func StreamEvents(n int) []string {
	ev := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range n {
		ev = append(ev, "response.output_text.delta")
	}
	return append(ev, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
}

// Check reports every way r differs from what client.mjs asked of an
// engine serving model with dim-long embeddings.
func Check(t testing.TB, client string, r *Result, model string, dim int) {
	t.Helper()
	e := r.Embeddings
	if e.Object != "list" || e.Model != model || e.Count != 2 || len(e.Float) != 2 || len(e.Default) != 2 || e.Usage.PromptTokens < 2 ||
		e.Usage.TotalTokens != e.Usage.PromptTokens {
		t.Errorf("%s embeddings: %+v", client, e)
		return
	}
	b, err := base64.StdEncoding.DecodeString(e.Base64)
	if err != nil || len(b) != 4*dim {
		t.Errorf("%s base64 embedding: %d bytes, %v; want %d float32s", client, len(b), err, dim)
		return
	}
	for i := range e.Float {
		if len(e.Float[i]) != dim || len(e.Default[i]) != dim {
			t.Errorf("%s embedding %d: %d floats (default encoding %d), want %d", client, i, len(e.Float[i]), len(e.Default[i]), dim)
			return
		}
		for k := range dim {
			// The client decoded base64 into float32s; the float encoding
			// carries the same float32s in decimal.
			if float32(e.Default[i][k]) != float32(e.Float[i][k]) {
				t.Errorf("%s embedding %d[%d]: client-decoded %v, float %v", client, i, k, e.Default[i][k], e.Float[i][k])
				return
			}
		}
	}
	for k := range dim {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:])); got != float32(e.Float[0][k]) {
			t.Errorf("%s base64 element %d: %v, float %v", client, k, got, e.Float[0][k])
			return
		}
	}
	resp := r.Response
	if !strings.HasPrefix(resp.ID, "resp_") || resp.Object != "response" || resp.Status != "incomplete" ||
		len(strings.Fields(resp.OutputText)) != 5 || resp.Usage.OutputTokens != 5 || resp.Usage.InputTokens < 1 ||
		resp.Usage.TotalTokens != resp.Usage.InputTokens+5 {
		t.Errorf("%s responses.create: %+v", client, resp)
	}
	s := r.Stream
	if want := StreamEvents(4); !slices.Equal(s.Types, want) {
		t.Errorf("%s stream events %v\nwant %v", client, s.Types, want)
	}
	for i, n := range s.Seqs {
		if n != i {
			t.Errorf("%s stream sequence_numbers %v", client, s.Seqs)
			break
		}
	}
	if len(strings.Fields(s.Deltas)) != 4 || s.Deltas != s.CompletedText || s.Status != "incomplete" {
		t.Errorf("%s stream: deltas %q, completed text %q, status %q", client, s.Deltas, s.CompletedText, s.Status)
	}
	if len(strings.Fields(r.Helper.OutputText)) != 3 || r.Helper.Status != "incomplete" {
		t.Errorf("%s responses.stream helper: %+v", client, r.Helper)
	}
}
