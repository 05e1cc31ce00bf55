package mcp

import (
	"io"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func tapAll(t *testing.T, stream string, chunk int) []*sdk.ProgressNotificationParams {
	t.Helper()
	var got []*sdk.ProgressNotificationParams
	tap := &sseTap{body: io.NopCloser(strings.NewReader(stream)), deliver: func(p *sdk.ProgressNotificationParams) { got = append(got, p) }}
	buf := make([]byte, chunk)
	var out strings.Builder
	for {
		n, err := tap.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if out.String() != stream {
		t.Fatalf("tap changed the stream")
	}
	return got
}

func TestSSETap(t *testing.T) {
	stream := "event: message\nid: 1\n" +
		`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"mentat-7","progress":1,"total":3,"message":"a"}}` + "\n\n" +
		// CRLF lines, data split over two lines
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\r\ndata: \"params\":{\"progressToken\":\"mentat-7\",\"progress\":2}}\r\n\r\n" +
		// someone else's token, a result, a comment
		`data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"theirs","progress":9}}` + "\n\n" +
		": keep-alive\n\n" +
		`data: {"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"mentat-7 notifications/progress"}]}}` + "\n\n"
	for _, chunk := range []int{1, 7, 64, 4096} {
		got := tapAll(t, stream, chunk)
		if len(got) != 2 || got[0].Progress != 1 || got[0].Total != 3 || got[0].Message != "a" || got[1].Progress != 2 {
			t.Fatalf("chunk %d: %+v", chunk, got)
		}
	}
}

func TestSSETapSkipsHugeEvents(t *testing.T) {
	huge := `data: {"method":"notifications/progress","params":{"progressToken":"mentat-1","progress":1,"message":"` +
		strings.Repeat("x", maxSSEEvent) + `"}}` + "\n\n"
	small := `data: {"method":"notifications/progress","params":{"progressToken":"mentat-1","progress":2}}` + "\n\n"
	got := tapAll(t, huge+small, 32<<10)
	if len(got) != 1 || got[0].Progress != 2 {
		t.Fatalf("%+v", got)
	}
}

func FuzzSSETap(f *testing.F) {
	f.Add([]byte("data: {\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"mentat-1\",\"progress\":1}}\n\n"), 3)
	f.Add([]byte("data:\r\n\r\n\n\ndata: x\n"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, chunk int) {
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 1 + len(stream)
		}
		for _, p := range tapAll(t, string(stream), chunk) {
			if tok, _ := p.ProgressToken.(string); !strings.HasPrefix(tok, progressTokenPrefix) {
				t.Fatalf("delivered a foreign token %v", p.ProgressToken)
			}
		}
	})
}
