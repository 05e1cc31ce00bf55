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

func TestParseArgsEngineModel(t *testing.T) {
	c, err := ParseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.EnablePrefixCaching || c.BlockSize != 16 || c.MaxNumBatchedTokens != 2048 || c.DecodeKnee != 256 ||
		c.PrefillPerToken != 50*time.Microsecond || c.EnablePromptTokensDetails || c.EmbeddingDim != 1024 {
		t.Errorf("defaults: %+v", c)
	}
	for _, ok := range []struct {
		args  []string
		check func(Config) bool
	}{
		{[]string{"--no-enable-prefix-caching"}, func(c Config) bool { return !c.EnablePrefixCaching }},
		{[]string{"--enable-prefix-caching=false"}, func(c Config) bool { return !c.EnablePrefixCaching }},
		{[]string{"--max-num-seqs", "4096"}, func(c Config) bool { return c.MaxNumBatchedTokens == 4096 }},
		{[]string{"--block-size", "32", "--prefill-per-token", "1ms", "--decode-knee", "0", "--embedding-dim", "8",
			"--max-num-batched-tokens", "8192", "--enable-prompt-tokens-details"}, func(c Config) bool {
			return c.BlockSize == 32 && c.PrefillPerToken == time.Millisecond && c.DecodeKnee == 0 && c.EmbeddingDim == 8 &&
				c.MaxNumBatchedTokens == 8192 && c.EnablePromptTokensDetails
		}},
	} {
		c, err := ParseArgs(ok.args, io.Discard)
		if err != nil || !ok.check(c) {
			t.Errorf("%v: %v %+v", ok.args, err, c)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefill-per-token", "-1us"}, "--prefill-per-token -1µs must not be negative"},
		{[]string{"--max-num-batched-tokens", "100"}, "--max-num-batched-tokens 100 is below --max-num-seqs 256"},
		{[]string{"--decode-knee", "-1"}, "--decode-knee -1 must not be negative"},
		{[]string{"--block-size", "12"}, "--block-size 12 is not one of vLLM's block sizes [1 8 16 32 64 128]"},
		{[]string{"--embedding-dim", "0"}, "--embedding-dim 0 must be between 1 and 65536"},
		{[]string{"--max-model-len", "100", "--kv-cache-tokens", "100", "--block-size", "64"}, "holds 1 whole blocks of 64 tokens"},
		{[]string{"--no-enable-prefix-caching=maybe"}, "no-enable-prefix-caching"},
	} {
		_, err := ParseArgs(bad.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want one containing %q", bad.args, err, bad.want)
		}
	}
}
