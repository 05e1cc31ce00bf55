package enginesim

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	c, err := ParseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "0.0.0.0" || c.Port != 8000 || c.MaxModelLen != 4096 || c.KeepAliveTimeout != 5*time.Second ||
		c.ServedModelNames[0] != c.Model || c.KVCacheTokens != c.MaxNumSeqs*c.MaxModelLen || c.MCPPort != 0 {
		t.Errorf("defaults: %+v", c)
	}
	c, err = ParseArgs([]string{"serve", "/models/glm", "--served-model-name", "a,b", "--served-model-name", "c",
		"--ttft", "1s", "--itl", "30ms", "--max-num-seqs", "4", "--fail-rate", "0.25", "--mcp-port", "9000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "/models/glm" || strings.Join(c.ServedModelNames, " ") != "a b c" || c.TTFT != time.Second ||
		c.ITL != 30*time.Millisecond || c.MaxNumSeqs != 4 || c.FailRate != 0.25 || c.MCPPort != 9000 {
		t.Errorf("parsed: %+v", c)
	}
	for _, bad := range [][]string{
		{"--fail-rate", "2"}, {"--max-num-seqs", "0"}, {"--jitter", "-1"}, {"--keepalive-timeout", "0s"},
		{"--port", "70000"}, {"--served-model-name", "a,a"}, {"--max-model-len", "8192", "--kv-cache-tokens", "100"},
		{"m", "--model", "n"}, {"--ttft", "-1s"}, {"--port", "1", "extra"},
	} {
		if _, err := ParseArgs(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	if _, err := ParseArgs([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}
