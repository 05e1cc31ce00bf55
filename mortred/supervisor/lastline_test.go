package supervisor

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLastErrorPicksTheReason(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		want  string
	}{
		{"fatal line, program name cut", []string{
			"mortred-server listening on 127.0.0.1:9002",
			`time=2026-12-01T19:53:42.980Z level=INFO event=listening id=X`,
			`time=2026-12-01T19:53:42.980Z level=ERROR event=model_load_failed id=X err="no ONNX Runtime library found (tried \"a\")"`,
			"mortred-server: loading model x: no ONNX Runtime library found",
		}, "loading model x: no ONNX Runtime library found"},
		{"an ERROR log line's err", []string{
			`time=2026-12-01T19:53:42.980Z level=ERROR event=model_load_failed err="quoted \"reason\" here" id=X`,
			`time=2026-12-01T19:53:43.000Z level=INFO event=stopping`,
		}, `quoted "reason" here`},
		{"an ERROR log line without err", []string{`time=x level=ERROR event=gateway_listen_failed addr=:8080`}, "gateway_listen_failed"},
		{"a panic and its trace", []string{"panic: runtime error: index out of range", "", "goroutine 1 [running]:", "main.main()", "\t/x/main.go:9 +0x1d", "exit status 2"}, "panic: runtime error: index out of range"},
		{"info lines only", []string{`time=x level=INFO event=listening`, `time=x level=WARN event=slow`}, ""},
	}
	for _, c := range cases {
		l := &lastError{prog: "mortred-server: "}
		for _, line := range c.lines {
			l.observe(line)
		}
		if got := l.get(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	l := &lastError{}
	long := "loading model x: " + strings.Repeat("é", maxReasonBytes) + ": run `make setup`"
	l.observe(long)
	got := l.get()
	if len(got) > maxReasonBytes+len(" … ") || !strings.HasPrefix(got, "loading model x: ") || !strings.HasSuffix(got, ": run `make setup`") || !utf8.ValidString(got) {
		t.Errorf("a long line kept as %d bytes: %q", len(got), got)
	}
}
