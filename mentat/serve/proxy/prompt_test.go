package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// promptKeys is the block keys routing computes for body.
func promptKeys(t testing.TB, body string) []uint64 {
	t.Helper()
	f, err := extract(jsonCT, []byte(body))
	if err != nil {
		t.Fatalf("extract(%q): %v", body, err)
	}
	bl := balance.GetBlocks()
	defer balance.PutBlocks(bl)
	writePrompt(&f, bl)
	return slices.Clone(bl.Keys())
}

// textKeys is the block keys of text written directly.
func textKeys(text string) []uint64 {
	bl := balance.GetBlocks()
	defer balance.PutBlocks(bl)
	bl.Write([]byte(text))
	return slices.Clone(bl.Keys())
}

func TestPromptText(t *testing.T) {
	long := strings.Repeat("You answer questions about the tenant's invoices. ", 20)
	for _, c := range []struct {
		name, body, want string
	}{
		{"chat in order with roles", `{"model":"m","messages":[{"role":"system","content":"` + long + `"},{"content":"hi","role":"user"}]}`,
			`"system"` + "\x1e" + `"` + long + `"` + "\x1f" + `"user"` + "\x1e" + `"hi"` + "\x1f"},
		{"content parts are raw JSON", `{"messages":[{"role":"user","content":[{"type":"text","text":"a\"b"}]}],"model":"m"}`,
			`"user"` + "\x1e" + `[{"type":"text","text":"a\"b"}]` + "\x1f"},
		{"other message keys ignored", `{"model":"m","messages":[{"role":"tool","name":"x","tool_call_id":"1","content":"r"}]}`,
			`"tool"` + "\x1e" + `"r"` + "\x1f"},
		{"prompt", `{"model":"m","prompt":"Once upon a time"}`, `"Once upon a time"`},
		{"prompt list", `{"model":"m","prompt":[1,2,3]}`, `[1,2,3]`},
		{"input", `{"model":"m","input":"embed me"}`, `"embed me"`},
		{"messages win over prompt", `{"model":"m","prompt":"p","messages":[{"role":"user","content":"c"}]}`, `"user"` + "\x1e" + `"c"` + "\x1f"},
		{"nothing", `{"model":"m","max_tokens":3}`, ``},
		{"non-object message", `{"model":"m","messages":["raw",{"role":"user","content":"c"}]}`, `"raw"` + "\x1f" + `"user"` + "\x1e" + `"c"` + "\x1f"},
		{"not a list", `{"model":"m","messages":"text"}`, `"text"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, want := promptKeys(t, c.body), textKeys(c.want)
			if !slices.Equal(got, want) {
				t.Errorf("keys of %s differ from keys of %q", c.body, c.want)
			}
		})
	}
}

func TestPromptSharedPrefixSharesBlocks(t *testing.T) {
	system := strings.Repeat("shared system prompt for every question. ", 30)
	body := func(q string) string {
		return fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, q)
	}
	a, b := promptKeys(t, body("what is 2+2?")), promptKeys(t, body("name a colour"))
	shared := 0
	for shared < min(len(a), len(b)) && a[shared] == b[shared] {
		shared++
	}
	if want := len(system)/balance.BlockSize - 1; shared < want {
		t.Errorf("two questions under one %d-byte system prompt share %d blocks, want at least %d", len(system), shared, want)
	}
	if slices.Equal(a, b) {
		t.Error("different questions gave identical keys")
	}
}

func TestRoutingRequestSession(t *testing.T) {
	f, err := extract(jsonCT, []byte(`{"model":"m","user":"alice","prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	bl := balance.GetBlocks()
	defer balance.PutBlocks(bl)
	h := http.Header{}
	if r := routingRequest("m", &f, h, "X-Session-ID", bl); r.Session != "alice" || r.Model != "m" || len(r.Keys) != 1 {
		t.Errorf("from the body: %+v", r)
	}
	bl.Reset()
	h.Set("X-Session-ID", "s-1")
	if r := routingRequest("m", &f, h, "X-Session-ID", bl); r.Session != "s-1" {
		t.Errorf("the header should win: %+v", r)
	}
}

// FuzzPromptText checks that any body the model scan accepts yields
// prompt text without panicking or looping, bounded by MaxBlocks, and
// that for valid chat JSON the text is the messages' roles and contents
// in order.
func FuzzPromptText(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null}]}`,
		`{"model":"m","messages":[1 2}]}`, `{"model":"m","messages":[,]}`, `{"model":"m","messages":[{"role":}]}`,
		`{"model":"m","prompt":"p","user":"u"}`, `{"model":"m","messages":[{"rol\u0065":"user","content":"c"}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := extract(jsonCT, []byte(s))
		if err != nil {
			return
		}
		bl := balance.GetBlocks()
		defer balance.PutBlocks(bl)
		writePrompt(&fl, bl)
		got := bl.Keys()
		if len(got) > balance.MaxBlocks {
			t.Fatalf("%d keys, more than MaxBlocks", len(got))
		}
		// Maps, not structs: encoding/json matches struct fields without
		// regard to case, engines (and the scan) do not.
		var doc map[string]json.RawMessage
		var msgs []map[string]json.RawMessage
		if !json.Valid([]byte(s)) || json.Unmarshal([]byte(s), &doc) != nil ||
			json.Unmarshal(doc["messages"], &msgs) != nil || len(msgs) == 0 {
			return
		}
		var want strings.Builder
		for _, m := range msgs {
			want.Write(m["role"])
			want.WriteByte(sepRole)
			want.Write(m["content"])
			want.WriteByte(sepMessage)
		}
		// encoding/json keeps raw values verbatim but a duplicated key's
		// last value; the scan keeps the last too.
		if w := textKeys(want.String()); !slices.Equal(got, w) {
			t.Fatalf("prompt keys differ from encoding/json's roles and contents for %q (text %q)", s, want.String())
		}
	})
}

// BenchmarkRoute1MiB is the whole per-request routing cost for a 1 MiB
// chat body over four replicas under the prefix policy: the model scan,
// the prompt's block keys, the choice and the index update.
func BenchmarkRoute1MiB(b *testing.B) {
	body := chatBody(1 << 20)
	var reps []*routes.Route
	for i := range 4 {
		rt, err := routes.NewRoute("m", fmt.Sprint("g", i), fmt.Sprintf("http://127.0.0.1:%d/v1", 9000+i), "")
		if err != nil {
			b.Fatal(err)
		}
		reps = append(reps, rt)
	}
	bal := balance.New(balance.Config{}, nil)
	h := http.Header{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := extract(jsonCT, body)
		if err != nil {
			b.Fatal(err)
		}
		bl := balance.GetBlocks()
		req := routingRequest(f.Model, &f, h, balance.DefaultSessionHeader, bl)
		d := bal.Choose(reps, req)
		bal.Start(req, d.Order[0], d.Reason, d.Matched).End()
		balance.PutBlocks(bl)
	}
}
