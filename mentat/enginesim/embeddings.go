package enginesim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"time"
)

// embeddingRequest is vLLM's EmbeddingCompletionRequest, the fields acted
// on. input is a string, a list of strings, a list of token ids, or a list
// of lists of token ids, as in OpenAI's API.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingData struct {
	Index     int    `json:"index"`
	Object    string `json:"object"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   usageInfo       `json:"usage"`
}

func (e *Engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	res, err := e.embed(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// embed answers at once: an embedding costs no decode, and enginesim does
// not queue it behind generation.
func (e *Engine) embed(w http.ResponseWriter, r *http.Request) (*embeddingResponse, error) {
	var req embeddingRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	model, err := e.resolveModel(req.Model)
	if err != nil {
		return nil, err
	}
	format := "float"
	if req.EncodingFormat != nil {
		format = *req.EncodingFormat
	}
	if format != "float" && format != "base64" {
		return nil, badRequest("1 validation error: encoding_format: Input should be 'float' or 'base64', got %q", format)
	}
	dim := e.cfg.EmbeddingDim
	if req.Dimensions != nil {
		// The simulated model serves any size up to its own (as a
		// matryoshka model does); the vector is computed at that size.
		if *req.Dimensions < 1 || *req.Dimensions > e.cfg.EmbeddingDim {
			return nil, badRequest("dimensions must be between 1 and %d (--embedding-dim), got %d", e.cfg.EmbeddingDim, *req.Dimensions)
		}
		dim = *req.Dimensions
	}
	inputs, err := parseEmbeddingInput(req.Input)
	if err != nil {
		return nil, err
	}
	res := &embeddingResponse{ID: e.newID("embd-"), Object: "list", Created: time.Now().Unix(), Model: model, Data: make([]embeddingData, len(inputs))}
	total := 0
	for i, ids := range inputs {
		if len(ids) > e.cfg.MaxModelLen {
			return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens in the input for "+
				"embedding generation. Please reduce the length of the input.", e.cfg.MaxModelLen, len(ids))
		}
		total += len(ids)
		vec := embedTokens(ids, dim, e.cfg.Seed)
		normalize(vec)
		d := embeddingData{Index: i, Object: "embedding", Embedding: vec}
		if format == "base64" {
			d.Embedding = base64Floats(vec)
		}
		res.Data[i] = d
	}
	res.Usage = usageInfo{PromptTokens: total, TotalTokens: total}
	return res, nil
}

// parseEmbeddingInput reads every input as token ids.
func parseEmbeddingInput(raw json.RawMessage) ([][]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("1 validation error: input: Field required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]int{Tokenize(nil, s)}, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		out := make([][]int, len(strs))
		for i, s := range strs {
			out[i] = Tokenize(nil, s)
		}
		return out, nil
	}
	var one []int
	if json.Unmarshal(raw, &one) == nil && len(one) > 0 {
		return [][]int{one}, checkVocab(one)
	}
	var many [][]int
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		for _, ids := range many {
			if err := checkVocab(ids); err != nil {
				return nil, err
			}
		}
		return many, nil
	}
	return nil, badRequest("input must be a non-empty string, list of strings, list of token ids, or list of lists of token ids")
}

func checkVocab(ids []int) error {
	for _, id := range ids {
		if _, err := Piece(id); err != nil {
			return badRequest("%v", err)
		}
	}
	return nil
}

// embeddingTouches is how many coordinates each token adds to.
const embeddingTouches = 8

// embedTokens is a deterministic bag-of-tokens vector: each token adds ±1
// to a few coordinates picked by its hash, so texts sharing words point in
// similar directions (cosine similarity behaves), and the same input always
// gives the same vector.
func embedTokens(ids []int, dim int, seed uint64) []float32 {
	v := make([]float32, dim)
	for _, id := range ids {
		h := chainHash(seed, []int{id})
		for range embeddingTouches {
			h = h*6364136223846793005 + 1442695040888963407
			sign := float32(1)
			if h>>63 == 1 {
				sign = -1
			}
			v[(h>>32)%uint64(dim)] += sign
		}
	}
	return v
}

func normalize(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		v[0], sum = 1, 1
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
}

// base64Floats is OpenAI's base64 encoding: little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
