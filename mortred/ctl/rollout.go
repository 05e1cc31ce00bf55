package ctl

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"
)

// rolloutClient waits for a rollout: the new version loads (up to the
// supervisor's 2-minute start limit) and is warmed before the answer.
var rolloutClient = &http.Client{Timeout: 11 * time.Minute}

// rollout runs `rollout ID [--model-file F | --config F] [--version V]`
// and `rollback ID` through the supervisor's API. Paths are made absolute
// here: the supervisor reads them on its own host, from its own directory.
func (c *CLI) rollout(cmd string, args []string) error {
	var req struct {
		ModelFile string `json:"model_file,omitempty"`
		Config    string `json:"config,omitempty"`
		Version   string `json:"version,omitempty"`
	}
	pos, err := c.subFlags(cmd, args, func(fs *flag.FlagSet) {
		if cmd == "rollout" {
			fs.StringVar(&req.ModelFile, "model-file", "", "the new version's ONNX file, for the model config in service")
			fs.StringVar(&req.Config, "config", "", "the new version's model config (TOML)")
			fs.StringVar(&req.Version, "version", "", "the new version's name (default: the config's version, or the one in service plus the file's SHA-256 prefix)")
		}
	})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{cmd + " takes one server id (see mortredctl catalog)"}
	}
	if req.ModelFile != "" && req.Config != "" {
		return usageError{"give --model-file or --config, not both"}
	}
	for _, p := range []*string{&req.ModelFile, &req.Config} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	if err := c.needToken(); err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	u := "http://" + c.G.Addr + "/api/v1/servers/" + url.PathEscape(pos[0]) + "/" + cmd
	if err := c.doWith(rolloutClient, "POST", u, body, "application/json", &raw, "the supervisor at "+c.G.Addr); err != nil {
		return err
	}
	if c.G.JSON {
		return printJSON(c.Out, raw)
	}
	var res struct {
		Version  string `json:"version"`
		Instance int    `json:"instance"`
		From     string `json:"from"`
		Note     string `json:"note"`
		Warmup   struct {
			Samples []struct {
				LatencyMS float64 `json:"latency_ms"`
			} `json:"samples"`
		} `json:"warmup"`
		Draining struct {
			Port int `json:"port"`
		} `json:"draining"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the supervisor's answer: %v", err)
	}
	fmt.Fprintf(c.Out, "%s %s: version %q (instance %d) serves; it passed warm-up on %d samples\n", cmd, pos[0], res.Version, res.Instance, len(res.Warmup.Samples))
	fmt.Fprintf(c.Out, "version %q drains on port %d: it stops once its requests are done and its async jobs expire\n", res.From, res.Draining.Port)
	if res.Note != "" {
		fmt.Fprintln(c.Out, "note:", res.Note)
	}
	return nil
}
