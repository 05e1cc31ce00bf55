package mortred

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// bombPNG is a well-formed PNG whose header claims w×h 8-bit gray pixels,
// with a real zlib stream of zeros as its data: decoding it would need
// w×h bytes, whatever the few kilobytes on the wire.
func bombPNG(w, h uint32) []byte {
	var buf bytes.Buffer
	buf.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&buf, binary.BigEndian, uint32(len(data)))
		c := crc32.NewIEEE()
		io.WriteString(c, typ)
		c.Write(data)
		buf.WriteString(typ)
		buf.Write(data)
		_ = binary.Write(&buf, binary.BigEndian, c.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 0 // bit depth 8, grayscale
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write(make([]byte, 1<<20))
	_ = zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return buf.Bytes()
}

// bombJPEG is the start of a baseline JFIF whose frame header claims w×h;
// a header read stops at the frame header.
func bombJPEG(w, h uint16) []byte {
	b := []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0}
	// DQT: one table of ones.
	dqt := append([]byte{0xFF, 0xDB, 0x00, 0x43, 0x00}, bytes.Repeat([]byte{1}, 64)...)
	b = append(b, dqt...)
	sof := []byte{0xFF, 0xC0, 0x00, 0x11, 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3,
		1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0}
	return append(b, sof...)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestHostileBodies: bodies over the gateway's and the model's size
// limits, too many items, and images whose headers claim 10^10 pixels. Each
// gets its own answer (413, or a per-item error beside its batch mates'
// results), and the model server neither dies nor balloons.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	d := deploy(t, []stack.Model{{ID: "GUARD", Keys: map[string]any{"request_size_limit": 1, "max_request_items": 4}}},
		map[string]any{"request_size_limit_mb": 2})
	pid := d.Server(t, "GUARD").PID
	gw := d.Conf.GatewayURL() + "/v1/models/GUARD/infer"
	padded := func(n int) []byte {
		// A valid envelope n bytes long: one big base64 item.
		head, tail := `{"req_id":"big","images":["`, `"]}`
		return []byte(head + strings.Repeat("A", n-len(head)-len(tail)) + tail)
	}

	cases := []struct {
		name    string
		body    []byte
		chunked bool // no Content-Length: the limit is found while reading
		code    int
		status  int
	}{
		{"1.5 MB body, over the model's 1 MB", padded(3 << 19), false, http.StatusRequestEntityTooLarge, 61},
		{"1.5 MB chunked body, over the model's 1 MB", padded(3 << 19), true, http.StatusRequestEntityTooLarge, 61},
		{"3 MB body, over the gateway's 2 MB", padded(3 << 20), false, http.StatusRequestEntityTooLarge, 61},
		{"3 MB chunked body, over the gateway's 2 MB", padded(3 << 20), true, http.StatusRequestEntityTooLarge, 61},
		{"five images, over max_request_items 4", stack.Envelope("many", "", stack.DarkPNG, stack.DarkPNG, stack.DarkPNG, stack.DarkPNG, stack.DarkPNG),
			false, http.StatusRequestEntityTooLarge, 67},
	}
	for _, c := range cases {
		req, err := http.NewRequest(http.MethodPost, gw, bytes.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.chunked {
			req.Body = io.NopCloser(bytes.NewReader(c.body)) // hides the length
			req.ContentLength = -1
		}
		req.Header.Set("Authorization", "Bearer "+d.Tokens.API)
		req.Header.Set("Content-Type", "application/json")
		resp, err := stack.Client.Do(req)
		if err != nil && c.status == 61 && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
			// A server that refuses a body it has not read (the gateway at
			// the headers, or the model server while the gateway streams
			// the body to it) closes the connection after its 413; a
			// client still writing the rest may see the close before the
			// answer (TCP resets the unread data), and Go's client then
			// reports the write error, not the answer (golang/go#51109).
			// Refused either way: nothing was run, and the server must
			// still be up (checked below with the bombs).
			t.Logf("%s: refused by closing the connection mid-body (%v)", c.name, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := stack.Reply{Code: resp.StatusCode, Header: resp.Header, Body: b}
		var env stack.Response
		if r.Code != c.code || r.JSON(&env) != nil || env.Status != c.status {
			t.Fatalf("%s: %s; want HTTP %d with status %d", c.name, r, c.code, c.status)
		}
		t.Logf("%s: %s", c.name, r)
	}

	bombs := []struct{ name, image, want string }{
		{"PNG claiming 100000x100000", b64(bombPNG(100000, 100000)), "pixels"},
		{"PNG claiming 1x2^31-1", b64(bombPNG(1, 1<<31-1)), ""},
		{"JPEG claiming 65500x65500", b64(bombJPEG(65500, 65500)), "pixels"},
	}
	for _, b := range bombs {
		r, err := d.infer("GUARD", stack.Envelope("bomb", "", b.image, stack.LightPNG))
		if err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		var env stack.Response
		if err := r.JSON(&env); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		t.Logf("%s: %s", b.name, r)
		if r.Code != http.StatusOK || len(env.Results) != 2 {
			t.Fatalf("%s beside a good image: %s; want 200 with two results", b.name, r)
		}
		bad, good := env.Results[0], env.Results[1]
		if bad.Status == 0 || string(bad.Data) != "null" {
			t.Fatalf("%s: item answered %d %s; want a per-item error with null data", b.name, bad.Status, bad.Data)
		}
		if good.Status != 0 || !strings.Contains(string(good.Data), `"light"`) {
			t.Fatalf("%s: its batch mate answered %d %s", b.name, good.Status, good.Data)
		}
		if b.want != "" && !strings.Contains(string(r.Body), b.want) {
			t.Fatalf("%s: the error does not mention %q: %s", b.name, b.want, r)
		}
	}

	// Still the same process, still serving, and no giant allocation
	// happened: 10^10 pixels would have been gigabytes.
	st := d.Server(t, "GUARD")
	if st.PID != pid || st.RestartCount != 0 {
		t.Fatalf("the model server died under hostile bodies: %+v", st)
	}
	d.mustInfer(t, "GUARD")
	kb, err := testproc.RSSKiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("model server RSS after the hostile bodies: %d KiB", kb)
	if kb > 256<<10 {
		t.Fatalf("model server RSS %d KiB after hostile bodies: something decoded a bomb", kb)
	}
	if r, err := stack.Do(stack.Req{URL: fmt.Sprintf("http://127.0.0.1:%d/healthz", d.Conf.Models["GUARD"].Port)}); err != nil || r.Code != 200 {
		t.Fatalf("/healthz: %v %v", r, err)
	}
}
