package supervisor

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxReasonBytes bounds the reason a status note quotes; a longer one
// keeps its start (what failed) and its end (what to do), cut in between.
const maxReasonBytes = 600

// lastError remembers the line of a child's stderr that most likely says why
// it exited, so the status note can carry it ("exited (exit status 1): no
// ONNX Runtime library found …; restarting in 8s"). Our binaries end a fatal
// run with one line "<name>: <error>" on stderr; their slog lines at ERROR
// carry the cause in err=; a Go panic starts with "panic: ". Log lines below
// ERROR and indented lines (stack frames) never count.
type lastError struct {
	mu       sync.Mutex
	prog     string // "mortred-server: " is cut from a line that starts with it
	line     string
	panicked bool
}

func (l *lastError) observe(line string) {
	line = strings.TrimSpace(line)
	reason := ""
	switch {
	case line == "", strings.HasPrefix(line, "goroutine "), strings.HasPrefix(line, "[signal "):
		return
	case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
		reason = line
	case strings.HasPrefix(line, "time=") && strings.Contains(line, " level="):
		if !strings.Contains(line, " level=ERROR") {
			return
		}
		reason = logValue(line, "err")
		if reason == "" {
			reason = logValue(line, "event")
		}
	default:
		reason = strings.TrimPrefix(line, l.prog)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.panicked {
		return // what follows a panic line is its trace
	}
	l.panicked = strings.HasPrefix(reason, "panic: ") || strings.HasPrefix(reason, "fatal error: ")
	l.line = cutMiddle(reason, maxReasonBytes)
}

func (l *lastError) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}

// logValue is the value of key in a slog text line ("" when absent),
// unquoted when slog quoted it.
func logValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if q, err := strconv.QuotedPrefix(v); err == nil {
			if s, err := strconv.Unquote(q); err == nil {
				return s
			}
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// cutMiddle shortens s to about n bytes, keeping a third from its start and
// the rest from its end, on UTF-8 boundaries.
func cutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head, tail := n/3, s[len(s)-(n-n/3):]
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return s[:head] + " … " + tail
}
