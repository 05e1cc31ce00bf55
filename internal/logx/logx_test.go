package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestNewWritesEventAndFields(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo)
	l.Info("probe_failed", "url", "http://127.0.0.1:8000/v1", "n", 2)
	l.Debug("hidden")
	out := buf.String()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one line, got %q", out)
	}
	for _, want := range []string{"level=INFO", "event=probe_failed", "url=http://127.0.0.1:8000/v1", "n=2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in %q", want, out)
		}
	}
	if strings.Contains(out, "msg=") {
		t.Fatalf("message key not renamed: %q", out)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"": slog.LevelInfo, "DEBUG": slog.LevelDebug, "warn": slog.LevelWarn, "error": slog.LevelError, "bogus": slog.LevelInfo} {
		if got := ParseLevel(in); got != want {
			t.Errorf("ParseLevel(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestOnceConcurrent(t *testing.T) {
	var o Once
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.First("k") {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("First returned true %d times, want 1", firsts)
	}
	if !o.First("other") {
		t.Fatal("a new key must be first")
	}
}

func TestOnceLog(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, slog.LevelInfo)
	var o Once
	for i := 0; i < 3; i++ {
		o.Log(l, slog.LevelWarn, "src:10.0.0.1", "announce_source_not_allowed", "source", "10.0.0.1")
	}
	o.Log(l, slog.LevelWarn, "src:10.0.0.2", "announce_source_not_allowed", "source", "10.0.0.2")
	if n := strings.Count(buf.String(), "announce_source_not_allowed"); n != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", n, buf.String())
	}
}
