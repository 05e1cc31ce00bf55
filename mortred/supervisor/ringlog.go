package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// RingLog keeps the last Cap lines of a child's output in memory, numbered
// from the start of the supervisor's life so readers can page with offsets,
// and appends every line to a log file rotated at RotateBytes (one previous
// generation kept as NAME.1).
type RingLog struct {
	mu    sync.Mutex
	lines []string
	cap   int
	// total counts every line ever written; lines[0] is number total-len(lines).
	total int64
	// notify is closed and replaced whenever a line arrives (for followers).
	notify chan struct{}

	path        string
	rotateBytes int64
	file        *os.File
	size        int64
}

// NewRingLog keeps capLines lines in memory. path may be empty (no file).
func NewRingLog(capLines int, path string, rotateBytes int64) *RingLog {
	if capLines <= 0 {
		capLines = 5000
	}
	return &RingLog{cap: capLines, notify: make(chan struct{}), path: path, rotateBytes: rotateBytes}
}

// Append adds one line (without its newline).
func (l *RingLog) Append(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == l.cap {
		copy(l.lines, l.lines[1:])
		l.lines = l.lines[:l.cap-1]
	}
	l.lines = append(l.lines, line)
	l.total++
	l.writeFileLocked(line)
	close(l.notify)
	l.notify = make(chan struct{})
}

func (l *RingLog) writeFileLocked(line string) {
	if l.path == "" {
		return
	}
	if l.file == nil {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
			return
		}
		f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return
		}
		st, _ := f.Stat()
		l.file, l.size = f, st.Size()
	}
	n, _ := fmt.Fprintln(l.file, line)
	l.size += int64(n)
	if l.rotateBytes > 0 && l.size >= l.rotateBytes {
		l.file.Close()
		l.file = nil
		_ = os.Rename(l.path, l.path+".1")
	}
}

// Page returns up to limit lines starting at line number offset (0 = the
// oldest line still kept when offset is older than that), the offset of the
// first returned line, and the total number of lines ever written.
func (l *RingLog) Page(offset int64, limit int) (lines []string, first, total int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest := l.total - int64(len(l.lines))
	if offset < oldest {
		offset = oldest
	}
	if offset > l.total {
		offset = l.total
	}
	start := int(offset - oldest)
	end := len(l.lines)
	if limit >= 0 && start+limit < end {
		end = start + limit
	}
	// Never nil: the API answers lines:[] when nothing is new, and the UI
	// appends what it gets (a null showed as a "null" line).
	return append([]string{}, l.lines[start:end]...), offset, l.total
}

// Wait returns a channel closed when the next line arrives.
func (l *RingLog) Wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify
}

// Close closes the log file.
func (l *RingLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
}

// pump copies r into the log line by line until EOF, showing each line to
// observe when it is not nil. Overlong lines are cut so one runaway child
// cannot hold unbounded memory.
func (l *RingLog) pump(r io.Reader, observe func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for {
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			l.Append(line)
			if observe != nil {
				observe(line)
			}
		}
		if sc.Err() != bufio.ErrTooLong {
			return
		}
		l.Append("[line over 64 KiB cut]")
		sc = bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
	}
}
