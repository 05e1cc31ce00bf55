// Package logx builds the project's loggers: log/slog text lines with one
// event name per line (the key "event") and key=value fields, e.g.
//
//	time=2026-11-29T13:00:00Z level=WARN event=announce_source_not_allowed source=10.9.0.4 allowed=127.0.0.1,::1
//
// and an explicit once-per-key guard for lines the manuals say are logged
// only once per process.
package logx

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// New returns a logger writing text lines to w at level and above. The
// record's message is written as event=<name>, so callers pass an event name
// (snake_case), not a sentence: logger.Info("probe_failed", "url", u).
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.MessageKey {
				a.Key = "event"
			}
			return a
		},
	}))
}

// Default returns a logger on stderr whose level comes from LOG_LEVEL
// (debug, info, warn, error; default info).
func Default() *slog.Logger {
	return New(os.Stderr, ParseLevel(os.Getenv("LOG_LEVEL")))
}

// ParseLevel reads a level name; anything unknown is info.
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Discard returns a logger that writes nothing (for tests and benchmarks).
func Discard() *slog.Logger { return New(io.Discard, slog.LevelError+1) }

// Once remembers which keys have been seen. The zero value is ready to use
// and safe for concurrent use. It is per process by design: the manuals
// explain a repeated "once" line as one line per process.
//
// Keys are kept for the life of the process, so key on something bounded
// (an event name plus a source address, not a request id).
type Once struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// First reports whether key is seen for the first time, and records it.
func (o *Once) First(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[key]; ok {
		return false
	}
	if o.seen == nil {
		o.seen = make(map[string]struct{})
	}
	o.seen[key] = struct{}{}
	return true
}

// Log logs msg with args at level only the first time key is seen.
func (o *Once) Log(l *slog.Logger, level slog.Level, key, event string, args ...any) bool {
	if !o.First(key) {
		return false
	}
	l.Log(context.Background(), level, event, args...)
	return true
}
