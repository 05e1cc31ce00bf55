package enginesim

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"
)

type embeddingOut struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Index     int    `json:"index"`
		Object    string `json:"object"`
		Embedding any    `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func floats(t *testing.T, v any) []float64 {
	t.Helper()
	switch x := v.(type) {
	case []any:
		out := make([]float64, len(x))
		for i, f := range x {
			out[i] = f.(float64)
		}
		return out
	case string:
		b, err := base64.StdEncoding.DecodeString(x)
		if err != nil || len(b)%4 != 0 {
			t.Fatalf("base64 embedding: %v (%d bytes)", err, len(b))
		}
		out := make([]float64, len(b)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return out
	}
	t.Fatalf("embedding of type %T", v)
	return nil
}

func cosine(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	return dot / math.Sqrt(na*nb)
}

func TestEmbeddings(t *testing.T) {
	te := startEngine(t, false, func(c *Config) { c.EmbeddingDim = 64 })
	input := []string{"the queue is long today", "the queue is long", "public called come"}
	code, body := te.post(t, "/v1/embeddings", map[string]any{"model": "sim", "input": input})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	f := decode[embeddingOut](t, body)
	if f.Object != "list" || f.Model != "sim" || len(f.Data) != 3 || f.Data[2].Index != 2 || f.Data[0].Object != "embedding" {
		t.Fatalf("shape: %s", body)
	}
	want := 0
	for _, s := range input {
		want += CountTokens(s)
	}
	if f.Usage.PromptTokens != want || f.Usage.TotalTokens != want {
		t.Errorf("usage %+v, want %d tokens", f.Usage, want)
	}
	v0 := floats(t, f.Data[0].Embedding)
	if len(v0) != 64 || math.Abs(cosine(v0, v0)-1) > 1e-6 {
		t.Fatalf("vector of %d, self-cosine %v", len(v0), cosine(v0, v0))
	}
	var norm float64
	for _, x := range v0 {
		norm += x * x
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("norm² %v, want unit vectors", norm)
	}
	// Texts sharing words are closer than unrelated ones.
	if near, far := cosine(v0, floats(t, f.Data[1].Embedding)), cosine(v0, floats(t, f.Data[2].Embedding)); near <= far {
		t.Errorf("cosine to a near text %v, to an unrelated one %v", near, far)
	}
	// base64 carries the same float32s; token ids give the same vector.
	_, body = te.post(t, "/v1/embeddings", map[string]any{"model": "sim", "input": Tokenize(nil, input[0]), "encoding_format": "base64"})
	b := decode[embeddingOut](t, body)
	v64 := floats(t, b.Data[0].Embedding)
	for i := range v0 {
		if float32(v0[i]) != float32(v64[i]) {
			t.Fatalf("base64 element %d: %v, float gave %v", i, v64[i], v0[i])
		}
	}
	_, body = te.post(t, "/v1/embeddings", map[string]any{"input": [][]int{Tokenize(nil, input[0])}, "dimensions": 8})
	if d := floats(t, decode[embeddingOut](t, body).Data[0].Embedding); len(d) != 8 {
		t.Errorf("dimensions 8: %d", len(d))
	}
	for _, c := range []struct {
		body map[string]any
		code int
		typ  string
	}{
		{map[string]any{"model": "nope", "input": "x"}, 404, "NotFoundError"},
		{map[string]any{"model": "sim"}, 400, "BadRequestError"},
		{map[string]any{"input": []string{}}, 400, "BadRequestError"},
		{map[string]any{"input": "x", "encoding_format": "int8"}, 400, "BadRequestError"},
		{map[string]any{"input": []int{-1}}, 400, "BadRequestError"},
		{map[string]any{"input": "x", "dimensions": 65}, 400, "BadRequestError"},
		{map[string]any{"input": make([]int, 5000)}, 400, "BadRequestError"},
	} {
		code, body := te.post(t, "/v1/embeddings", c.body)
		if e := decode[errorBody](t, body); code != c.code || e.Type != c.typ || e.Code != c.code || e.Object != "error" {
			t.Errorf("%v: %d %s", c.body, code, body)
		}
	}
}

func FuzzEmbeddingsRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"sim","input":"hi"}`, `{"input":["a","b"],"encoding_format":"base64"}`, `{"input":[1,2,3]}`,
		`{"input":[[1],[2,3]],"dimensions":3}`, `{"input":[]}`, `{"input":[[]]}`, `{"input":null}`, `[]`, `{"input":[-1]}`,
	} {
		f.Add([]byte(s))
	}
	te := startEngine(f, false, func(c *Config) { c.EmbeddingDim = 16; c.MaxModelLen = 512 })
	f.Fuzz(func(t *testing.T, body []byte) {
		code, out := te.do(t, "POST", "/v1/embeddings", body)
		switch code {
		case 200:
			if r := decode[embeddingOut](t, out); len(r.Data) == 0 || r.Object != "list" {
				t.Fatalf("200 without embeddings: %s", out)
			}
		case 400, 404:
		default:
			t.Fatalf("status %d: %s", code, out)
		}
	})
}
