package ctl

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// maxImageFile bounds what infer reads from disk (the gateway's default
// request limit is 64 MiB, base64 adds a third).
const maxImageFile = 48 << 20

func (c *CLI) infer(args []string) error {
	var image string
	pos, err := c.subFlags("infer", args, func(fs *flag.FlagSet) {
		fs.StringVar(&image, "image", "", "image file (PNG, JPEG, WebP)")
	})
	if err != nil {
		return err
	}
	if len(pos) != 1 || image == "" {
		return usageError{"infer takes one model id and --image PATH"}
	}
	if err := c.needToken(); err != nil {
		return err
	}
	st, err := os.Stat(image)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot read the image: %v (sample images: `go run ./mortred/model/ppocr/textimg/gen -out DIR` in the checkout writes page.png and others)", err)
	}
	if err != nil {
		return fmt.Errorf("cannot read the image: %v", err)
	}
	if st.Size() > maxImageFile {
		return fmt.Errorf("%s is %d bytes; the limit is %d", image, st.Size(), maxImageFile)
	}
	data, err := os.ReadFile(image)
	if err != nil {
		return fmt.Errorf("cannot read the image: %v", err)
	}
	body, _ := json.Marshal(map[string]any{"req_id": "mortredctl", "images": []string{base64.StdEncoding.EncodeToString(data)}})
	var raw json.RawMessage
	u := "http://" + c.G.Gateway + "/v1/models/" + url.PathEscape(pos[0]) + "/infer"
	if err := c.do("POST", u, body, "application/json", &raw, "the gateway at "+c.G.Gateway); err != nil {
		return err
	}
	if c.G.JSON {
		return printJSON(c.Out, raw)
	}
	var env struct {
		Status       int     `json:"status"`
		StatusStr    string  `json:"status_str"`
		ServerTimeMS float64 `json:"server_time_ms"`
		Partial      bool    `json:"partial"`
		Results      []struct {
			Status int             `json:"status"`
			Data   json.RawMessage `json:"data"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("unexpected answer from the gateway: %v", err)
	}
	fmt.Fprintf(c.Out, "status %d (%s), %.1f ms\n", env.Status, env.StatusStr, env.ServerTimeMS)
	for i, r := range env.Results {
		fmt.Fprintf(c.Out, "result %d: status %d\n", i, r.Status)
		describeData(c, r.Data)
	}
	if env.Status != 0 {
		return fmt.Errorf("inference status %d (%s)", env.Status, env.StatusStr)
	}
	for i, r := range env.Results {
		if r.Status != 0 {
			return fmt.Errorf("item %d failed with status %d", i, r.Status)
		}
	}
	return nil
}

// describeData prints a payload for people: OCR lines as text, otherwise
// the JSON.
func describeData(c *CLI, data json.RawMessage) {
	var lines []struct {
		Text  *string   `json:"text"`
		Score float64   `json:"score"`
		BBox  []float64 `json:"bbox"`
	}
	if json.Unmarshal(data, &lines) == nil && len(lines) > 0 {
		for _, l := range lines {
			box := make([]string, len(l.BBox))
			for i, v := range l.BBox {
				box[i] = strconv.FormatFloat(v, 'f', 0, 64)
			}
			if l.Text != nil {
				fmt.Fprintf(c.Out, "  %-40s score %.3f  bbox [%s]\n", strconv.Quote(*l.Text), l.Score, strings.Join(box, " "))
			} else {
				fmt.Fprintf(c.Out, "  box [%s] score %.3f\n", strings.Join(box, " "), l.Score)
			}
		}
		return
	}
	var buf strings.Builder
	_ = printJSON(&buf, data)
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		fmt.Fprintln(c.Out, "  "+l)
	}
}
