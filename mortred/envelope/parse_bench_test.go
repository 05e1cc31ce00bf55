package envelope

import (
	"encoding/base64"
	"strings"
	"testing"
)

// BenchmarkParse: one image of about the size bench/ppocr sends (4.5 KB PNG,
// 6 KB of base64).
func BenchmarkParse(b *testing.B) {
	img := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x89PNG\r\n\x1a\n0123456789", 230)))
	body := []byte(`{"images":["` + img + `"]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body, Limits{MaxItems: 32}); err != nil {
			b.Fatal(err)
		}
	}
}
