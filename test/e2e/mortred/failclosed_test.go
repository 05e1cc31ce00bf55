package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// TestGatewayFailClosed starts the gateway binary with each configuration
// it must refuse: it exits non-zero at once and says why.
func TestGatewayFailClosed(t *testing.T) {
	t.Parallel()
	conf := stack.WriteConf(t, []stack.Model{{ID: "TM"}}, nil)
	badConf := filepath.Join(conf.Dir, "bad.toml")
	if err := os.WriteFile(badConf, []byte("[gateway]\nport = 1\nbogus_key = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noCatalog := filepath.Join(t.TempDir(), "mortred.toml")
	if err := os.WriteFile(noCatalog, []byte("[supervisor]\nserver_conf_dir = \"missing\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		config string
		env    []string
		want   string
	}{
		{"no inference token", conf.File, []string{"MORTRED_METRICS_TOKEN=m"}, "no inference token: set MORTRED_GATEWAY_AUTH_TOKEN or MORTRED_API_TOKEN"},
		{"empty inference token", conf.File, []string{"MORTRED_GATEWAY_AUTH_TOKEN=", "MORTRED_API_TOKEN=", "MORTRED_METRICS_TOKEN=m"}, "no inference token"},
		{"no metrics token", conf.File, []string{"MORTRED_GATEWAY_AUTH_TOKEN=a"}, "no metrics token: set MORTRED_METRICS_TOKEN"},
		{"metrics token equals the gateway token", conf.File, []string{"MORTRED_GATEWAY_AUTH_TOKEN=same", "MORTRED_METRICS_TOKEN=same"}, "must be distinct"},
		{"metrics token equals the API token", conf.File, []string{"MORTRED_API_TOKEN=same", "MORTRED_METRICS_TOKEN=same"}, "must be distinct"},
		{"wildcard bind", conf.File, []string{"MORTRED_API_TOKEN=a", "MORTRED_METRICS_TOKEN=m", "MORTRED_LISTEN_HOST=0.0.0.0"}, "refusing wildcard bind"},
		{"wildcard bind with a wrong MORTRED_EXPOSE", conf.File, []string{"MORTRED_API_TOKEN=a", "MORTRED_METRICS_TOKEN=m", "MORTRED_LISTEN_HOST=::", "MORTRED_EXPOSE=yes"}, "refusing wildcard bind"},
		{"unknown key", badConf, []string{"MORTRED_API_TOKEN=a", "MORTRED_METRICS_TOKEN=m"}, "unknown keys"},
		{"no catalog", noCatalog, []string{"MORTRED_API_TOKEN=a", "MORTRED_METRICS_TOKEN=m"}, "missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := stack.Start(t, testproc.Bin(t, "mortred-gateway"), []string{"--config", c.config}, stack.BaseEnv(c.env...))
			code, ok := p.ExitCode(30 * time.Second)
			if !ok {
				t.Fatalf("still running with %v", c.env)
			}
			if code == 0 || !strings.Contains(p.Output(), c.want) || !strings.HasPrefix(p.Output(), "mortred-gateway: ") {
				t.Fatalf("exit %d, output %q; want non-zero and %q", code, p.Output(), c.want)
			}
		})
	}
	t.Run("API token alone starts it", func(t *testing.T) {
		t.Parallel()
		p := stack.Start(t, testproc.Bin(t, "mortred-gateway"), []string{"--config", conf.File},
			stack.BaseEnv("MORTRED_API_TOKEN=api", "MORTRED_METRICS_TOKEN=m"))
		testproc.Eventually(t, 30*time.Second, "gateway /healthz", func() error {
			select {
			case <-p.Done():
				t.Fatalf("exited: %s", p.Output())
			default:
			}
			r, err := stack.Do(stack.Req{URL: conf.GatewayURL() + "/healthz"})
			if err != nil || r.Code != 200 {
				return fmt.Errorf("%v %v", r, err)
			}
			return nil
		})
		// The API token is the inference token (the model is not running: 503).
		r, err := stack.Do(stack.Req{URL: conf.GatewayURL() + "/v1/models/TM/infer", Token: "api", Body: stack.Envelope("x", "", stack.DarkPNG)})
		if err != nil || r.Code != 503 {
			t.Fatalf("%v %v", r, err)
		}
		p.Stop(15 * time.Second)
		if code, _ := p.ExitCode(0); code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, p.Output())
		}
	})
}
