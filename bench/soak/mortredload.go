package soak

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
	"github.com/fe64bb06/frontdoor/bench/soak/report"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// mortredDeadline bounds every sync call and every job's whole life.
const mortredDeadline = 90 * time.Second

// ledgerLost are the faults that end the process holding a job's
// in-memory ledger entry: nothing else may lose a job.
var ledgerLost = []string{"sigkill-model", "restart-supervisor"}

// input is one image the load sends, with the answer it must get: want is
// the compact JSON of results[0].data, taken once from a quiet system at
// the start (the models are deterministic with batching off), and for the
// OCR line also checked against the text drawn into it.
type input struct {
	model, name string
	b64         string
	want        []byte
}

type mortredClient struct {
	gw     string
	http   *http.Client
	inputs []*input
	paths  map[string][]string // model → components
}

// newInputs builds the images: a text line for OCR, a real photograph for
// the classifier, and two flat images for TESTMODEL.
func newInputs() ([]*input, error) {
	var line bytes.Buffer
	if err := png.Encode(&line, textimg.Golden()["line_hello"]); err != nil {
		return nil, err
	}
	photo, err := os.ReadFile(filepath.Join(modeltest.PhotoDir, "chelsea.png"))
	if err != nil {
		return nil, fmt.Errorf("the sample photograph (python3-skimage; run `make setup-deb`): %w", err)
	}
	enc := base64.StdEncoding.EncodeToString
	return []*input{
		{model: ModelOCR, name: "line_hello", b64: enc(line.Bytes())},
		{model: ModelNSFW, name: "chelsea.png", b64: enc(photo)},
		{model: ModelTest, name: "dark", b64: enc(testmodel.GrayPNG(16, 16, 20))},
		{model: ModelTest, name: "light", b64: enc(testmodel.GrayPNG(16, 16, 240))},
	}, nil
}

// envelope is the part of an answer the judge reads.
type envelope struct {
	Status  int `json:"status"`
	Results []struct {
		Status int             `json:"status"`
		Data   json.RawMessage `json:"data"`
	} `json:"results"`
	JobID string `json:"job_id"`
	State string `json:"state"`
}

// baseline takes each input's answer once and checks the OCR text.
func (c *mortredClient) baseline(ctx context.Context) error {
	for _, in := range c.inputs {
		code, raw, err := c.send(ctx, http.MethodPost, c.gw+"/v1/models/"+in.model+"/infer", apiToken, body(in))
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("baseline %s %s: %d %v %.200s", in.model, in.name, code, err, raw)
		}
		var e envelope
		if err := json.Unmarshal(raw, &e); err != nil || len(e.Results) != 1 || e.Results[0].Status != 0 {
			return fmt.Errorf("baseline %s %s: %v %.300s", in.model, in.name, err, raw)
		}
		in.want = compact(e.Results[0].Data)
		if in.model == ModelOCR {
			var lines []struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(in.want, &lines)
			var got []string
			for _, l := range lines {
				got = append(got, l.Text)
			}
			if strings.Join(got, " ") != textimg.TextHello {
				return fmt.Errorf("baseline OCR read %q, the image says %q", got, textimg.TextHello)
			}
		}
	}
	return nil
}

func body(ins ...*input) []byte {
	imgs := make([]string, len(ins))
	for i, in := range ins {
		imgs[i] = in.b64
	}
	b, _ := json.Marshal(map[string]any{"images": imgs})
	return b
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// infer sends ins (one model) in one sync request and judges every item.
func (c *mortredClient) infer(ctx context.Context, ins ...*input) (res record.Result) {
	model := ins[0].model
	res = record.Result{Kind: "infer-" + strings.ToLower(model), Path: c.paths[model]}
	if len(ins) > 1 {
		res.Kind = "batch-" + strings.ToLower(model)
	}
	ctx, cancel := context.WithTimeout(ctx, mortredDeadline)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	code, raw, err := c.send(ctx, http.MethodPost, c.gw+"/v1/models/"+model+"/infer", apiToken, body(ins...))
	res.Status = code
	if err != nil {
		return failed(res, ctx, err)
	}
	if code != http.StatusOK {
		return refusedBody(res, raw)
	}
	return judgeEnvelope(res, raw, ins)
}

func judgeEnvelope(res record.Result, raw []byte, ins []*input) record.Result {
	var e envelope
	if err := json.Unmarshal(raw, &e); err != nil {
		return defect(res, "200 with a body that is not JSON: %v: %.120q", err, raw)
	}
	if e.Status != 0 || len(e.Results) != len(ins) {
		return defect(res, "200 with status %d and %d results for %d images: %.200s", e.Status, len(e.Results), len(ins), raw)
	}
	for i, r := range e.Results {
		if r.Status != 0 {
			return defect(res, "200 with item %d status %d: %.200s", i, r.Status, raw)
		}
		if got := compact(r.Data); !bytes.Equal(got, ins[i].want) {
			return defect(res, "item %d (%s) answered %.120s, the same image answered %.120s at the start", i, ins[i].name, got, ins[i].want)
		}
	}
	return res
}

// job submits in as an async job, polls it (late when late is set, so it
// sits completed for a while first) and checks its result against the
// sync answer for the same image.
func (c *mortredClient) job(ctx context.Context, in *input, late time.Duration) (res record.Result) {
	res = record.Result{Kind: "job-" + strings.ToLower(in.model), Path: c.paths[in.model]}
	if late > 0 {
		res.Kind = report.LatePrefix + res.Kind
	}
	ctx, cancel := context.WithTimeout(ctx, mortredDeadline+late)
	defer cancel()
	res.Start = time.Now()
	defer func() { res.End = time.Now() }()
	code, raw, err := c.send(ctx, http.MethodPost, c.gw+"/v1/models/"+in.model+"/jobs", apiToken, body(in))
	res.Status = code
	if err != nil {
		return failed(res, ctx, err)
	}
	if code != http.StatusAccepted {
		return refusedBody(res, raw)
	}
	var sub envelope
	if err := json.Unmarshal(raw, &sub); err != nil || sub.JobID == "" {
		return defect(res, "202 without a job id: %.200s", raw)
	}
	select {
	case <-time.After(late):
	case <-ctx.Done():
		return res // the run ended; Run drops results after its end
	}
	base := c.gw + "/v1/models/" + in.model + "/jobs/" + sub.JobID
	url := base + "/wait?timeout=20000"
	for ctx.Err() == nil {
		code, raw, err = c.send(ctx, http.MethodGet, url, apiToken, nil)
		res.Status = code
		if err != nil {
			return failed(res, ctx, fmt.Errorf("polling job %s: %w", sub.JobID, err))
		}
		if code == http.StatusNotFound {
			// The job is gone: its holder restarted (in-memory jobs)
			// or it was lost; the judge decides which from the faults.
			res.Failed, res.Detail = true, fmt.Sprintf("job %s: 404 %.160s", sub.JobID, raw)
			res.Only = ledgerLost
			return res
		}
		if code != http.StatusOK {
			return refusedBody(res, raw)
		}
		var st envelope
		if err := json.Unmarshal(raw, &st); err != nil {
			return defect(res, "job poll 200 that is not JSON: %.120q", raw)
		}
		switch st.State {
		case "pending", "running":
			continue
		case "done":
			code, raw, err = c.send(ctx, http.MethodGet, base+"/result", apiToken, nil)
			res.Status = code
			if err != nil {
				return failed(res, ctx, fmt.Errorf("job %s result: %w", sub.JobID, err))
			}
			if code != http.StatusOK {
				if code == http.StatusNotFound {
					res.Failed, res.Detail = true, fmt.Sprintf("job %s done, then its result 404: %.160s", sub.JobID, raw)
					res.Only = ledgerLost
					return res
				}
				return refusedBody(res, raw)
			}
			return judgeEnvelope(res, raw, []*input{in})
		default:
			res.Failed, res.Detail = true, fmt.Sprintf("job %s ended %s: %.160s", sub.JobID, st.State, raw)
			return res
		}
	}
	return failed(res, ctx, ctx.Err())
}

func (c *mortredClient) send(ctx context.Context, method, url, token string, b []byte) (int, []byte, error) {
	var r io.Reader
	if b != nil {
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if b != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, raw, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, raw, nil
}

// refusedBody is refused for an answer already read.
func refusedBody(res record.Result, raw []byte) record.Result {
	if len(bytes.TrimSpace(raw)) == 0 {
		return defect(res, "HTTP %d with an empty body", res.Status)
	}
	if res.Status < 400 {
		return defect(res, "HTTP %d: %.160s", res.Status, raw)
	}
	res.Failed, res.Detail = true, fmt.Sprintf("HTTP %d: %.160s", res.Status, raw)
	return res
}

// pick chooses a random input of model.
func (c *mortredClient) pick(r *rand.Rand, model string) *input {
	var of []*input
	for _, in := range c.inputs {
		if in.model == model {
			of = append(of, in)
		}
	}
	return of[r.IntN(len(of))]
}
