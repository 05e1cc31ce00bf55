package version

import (
	"bytes"
	"strings"
	"testing"
)

func TestHandle(t *testing.T) {
	Version, Commit = "v1.2.3", "abc123"
	var buf bytes.Buffer
	if !Handle("enginesim", []string{"--version"}, &buf) {
		t.Fatal("--version not handled")
	}
	if got := strings.TrimSpace(buf.String()); got != "enginesim v1.2.3 (commit abc123)" {
		t.Fatalf("got %q", got)
	}
	if Handle("x", []string{"--port", "1"}, &buf) || Handle("x", nil, &buf) {
		t.Fatal("handled other arguments")
	}
}
