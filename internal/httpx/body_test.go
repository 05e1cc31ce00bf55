package httpx

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadBody: declared and undeclared lengths, at and over the limit,
// short bodies, and reads that come in small pieces.
func TestReadBody(t *testing.T) {
	big := strings.Repeat("x", 3<<20) // past the 1 MiB pre-commit
	cases := []struct {
		name            string
		body            string
		declared, limit int64
		want            error
	}{
		{"empty", "", 0, 10, nil},
		{"declared", "hello", 5, 10, nil},
		{"declared at limit", "0123456789", 10, 10, nil},
		{"declared over limit", "01234567890", 11, 10, ErrTooLarge},
		{"short", "hel", 5, 10, io.ErrUnexpectedEOF},
		{"undeclared", "hello", -1, 10, nil},
		{"undeclared at limit", "0123456789", -1, 10, nil},
		{"undeclared over limit", "01234567890", -1, 10, ErrTooLarge},
		{"declared big", big, int64(len(big)), 128 << 20, nil},
		{"undeclared big", big, -1, 128 << 20, nil},
		{"undeclared big over limit", big, -1, 2 << 20, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(c.body), iotest.HalfReader(strings.NewReader(c.body))} {
				b, err := ReadBody(r, c.declared, c.limit)
				if !errors.Is(err, c.want) {
					t.Fatalf("err %v, want %v", err, c.want)
				}
				if err != nil {
					continue
				}
				if string(b.Bytes()) != c.body || b.Len() != len(c.body) {
					t.Fatalf("read %d bytes, want %d", b.Len(), len(c.body))
				}
				b.Release()
			}
		})
	}
}

// TestReadBodyNoGrowth: once warm, reading a body of a size seen before
// takes its buffers from the pool instead of allocating them. Unpooled, a
// 2 MiB body costs 3 MiB a read (the 1 MiB first buffer, then the declared
// length). The bound is half of that, in bytes rather than allocations:
// the race detector's sync.Pool drops a quarter of what is put back on
// purpose (about 0.75 MiB a read here), and a GC may empty the pool.
func TestReadBodyNoGrowth(t *testing.T) {
	data := bytes.Repeat([]byte("y"), 2<<20)
	r := bytes.NewReader(data)
	read := func() {
		r.Reset(data)
		b, err := ReadBody(r, int64(len(data)), 128<<20)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	read()
	const runs = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := float64(after.TotalAlloc-before.TotalAlloc) / runs; per > 1.5*(1<<20) {
		t.Fatalf("%.2f MiB allocated per 2 MiB body: its buffers are not reused", per/(1<<20))
	}
}

func TestClass(t *testing.T) {
	for _, c := range []struct{ n, class int }{{1, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {1 << 20, 8}, {1<<20 + 1, 9}} {
		if got := class(c.n); got != c.class {
			t.Errorf("class(%d) = %d, want %d", c.n, got, c.class)
		}
	}
}

// FuzzReadBody: whatever the body, declared length and limit, ReadBody
// returns the body's exact bytes or one of its errors, never more than
// the limit.
func FuzzReadBody(f *testing.F) {
	f.Add([]byte("hello"), int64(5), int64(10), uint8(0))
	f.Add([]byte("hello"), int64(-1), int64(4), uint8(1))
	f.Add([]byte(""), int64(3), int64(10), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, declared, limit int64, chunk uint8) {
		if limit < 0 || limit > 1<<20 || declared < -1 || declared > 1<<21 {
			return
		}
		var r io.Reader = bytes.NewReader(data)
		if declared >= 0 {
			r = io.LimitReader(r, declared) // what net/http's body does
		}
		if chunk%2 == 1 {
			r = iotest.OneByteReader(r)
		}
		b, err := ReadBody(r, declared, limit)
		switch {
		case declared > limit:
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("declared %d over limit %d: %v", declared, limit, err)
			}
		case declared >= 0 && int64(len(data)) < declared:
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short body: %v", err)
			}
		case declared >= 0:
			if err != nil || !bytes.Equal(b.Bytes(), data[:declared]) {
				t.Fatalf("declared %d: %v", declared, err)
			}
		case int64(len(data)) > limit:
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("undeclared %d over limit %d: %v", len(data), limit, err)
			}
		default:
			if err != nil || !bytes.Equal(b.Bytes(), data) {
				t.Fatalf("undeclared %d: %v", len(data), err)
			}
		}
		if b != nil {
			b.Release()
		}
	})
}

func BenchmarkReadBody1MiB(b *testing.B) {
	data := bytes.Repeat([]byte("z"), 1<<20)
	r := bytes.NewReader(data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(data)
		body, err := ReadBody(r, int64(len(data)), 128<<20)
		if err != nil {
			b.Fatal(err)
		}
		body.Release()
	}
}
