package ctl

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
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
