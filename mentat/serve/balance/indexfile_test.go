package balance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A router that starts from the index its predecessor saved sends a
// known prefix to the replica that holds it, by affinity, even while that
// replica carries more than HomeSlack above the least loaded; a router
// that starts empty takes the prefix for a new one and sends it by load
// to the other replica, which has to prefill it again.
func TestSavedIndexRoutesLikeThePredecessor(t *testing.T) {
	old := newFixture(t, Prefix, 2)
	system := strings.Repeat("the handbook of tenant seven, which every request quotes. ", 40)
	req := Request{Model: "m", Keys: keys(system + "user: first")}
	d := old.b.Choose(old.reps, req)
	home := d.Order[0].Group
	old.b.Start(req, d.Order[0], d.Reason, d.Matched).End()
	// A second model, so that models are saved apart.
	old.b.Start(Request{Model: "n", Keys: keys(system)}, old.reps[0], Home, 0).End()

	var buf bytes.Buffer
	saved, err := old.b.SaveIndex(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := len(req.Keys)
	if saved.Models != 2 || saved.Blocks < n || !saved.Saved.Equal(old.now) {
		t.Fatalf("SaveIndex = %+v, want 2 models, at least %d blocks, saved %v", saved, n, old.now)
	}
	if strings.Contains(buf.String(), "handbook") {
		t.Fatal("the saved index holds prompt text; it must hold block hashes only")
	}

	next, fresh := newFixture(t, Prefix, 2), newFixture(t, Prefix, 2)
	got, err := next.b.LoadIndex(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Models != saved.Models || got.Blocks != saved.Blocks || !got.Saved.Equal(saved.Saved) {
		t.Errorf("LoadIndex = %+v, want what was saved %+v", got, saved)
	}
	for _, f := range []*fixture{next, fresh} {
		for _, rt := range f.reps {
			if rt.Group == home {
				for range HomeSlack + 1 {
					f.b.Start(Request{Model: "m"}, rt, Load, 0)
				}
			}
		}
	}
	again := Request{Model: "m", Keys: keys(system + "user: second")}
	if d := next.b.Choose(next.reps, again); d.Order[0].Group != home || d.Reason != Affinity || d.Matched < n-1 {
		t.Errorf("after loading: %s (%s, %d blocks), want %s by affinity on the saved prefix", d.Order[0].Group, d.Reason, d.Matched, home)
	}
	if d := fresh.b.Choose(fresh.reps, again); d.Order[0].Group == home || d.Reason != Load {
		t.Errorf("without the saved index: %s (%s), want the other replica by load", d.Order[0].Group, d.Reason)
	}
}

// Loading keeps the saved order of use: past IndexBlocks the blocks used
// least recently before the save are the ones left out.
func TestSavedIndexKeepsRecency(t *testing.T) {
	old := newFixture(t, Prefix, 2)
	a := keys(strings.Repeat("prompt a, used first. ", 20))
	b := keys(strings.Repeat("prompt b, used last. ", 20))
	old.b.Start(Request{Model: "m", Keys: a}, old.reps[0], Home, 0).End()
	old.b.Start(Request{Model: "m", Keys: b}, old.reps[1], Home, 0).End()
	var buf bytes.Buffer
	if _, err := old.b.SaveIndex(&buf); err != nil {
		t.Fatal(err)
	}
	small := New(Config{Policy: Prefix, IndexBlocks: len(b)}, nil)
	small.now = func() time.Time { return old.now }
	got, err := small.LoadIndex(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Blocks != len(b) {
		t.Errorf("loaded %d blocks into an index of %d", got.Blocks, len(b))
	}
	ix := small.model("m").ix
	depth := make([]int, 2)
	ix.match(b, []string{"g0", "g1"}, depth)
	if depth[1] != len(b) {
		t.Errorf("the most recent prompt's depth on g1 = %d, want all %d blocks kept", depth[1], len(b))
	}
	depth = make([]int, 2)
	ix.match(a, []string{"g0", "g1"}, depth)
	if depth[0] != 0 {
		t.Errorf("the older prompt's depth on g0 = %d, want it dropped first", depth[0])
	}
}

// A saved index that is old, from the future, of another version or
// malformed is refused whole, with the reason, and changes nothing.
func TestSavedIndexRefused(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	doc := func(saved time.Time, version int, models string) string {
		return fmt.Sprintf(`{"version":%d,"saved":%q,"models":%s}`, version, saved.Format(time.RFC3339Nano), models)
	}
	good := `{"m":{"blocks":[1,2],"holders":[["g0"],["g0","g1"]]}}`
	for _, tc := range []struct {
		name, text, want string
		stale            bool
	}{
		{"stale", doc(f.now.Add(-IndexFileMaxAge-time.Second), 1, good), "too old", true},
		{"future", doc(f.now.Add(time.Hour), 1, good), "too old", true},
		{"version", doc(f.now, 2, good), "version 2", false},
		{"not json", "blocks: 1, 2", "not a saved index", false},
		{"cut short", doc(f.now, 1, good)[:40], "not a saved index", false},
		{"holders short", doc(f.now, 1, `{"m":{"blocks":[1,2],"holders":[["g0"]]}}`), "2 blocks but 1 holder lists", false},
		{"no holder", doc(f.now, 1, `{"m":{"blocks":[1],"holders":[[]]}}`), "no holder", false},
		{"empty holder", doc(f.now, 1, `{"m":{"blocks":[1],"holders":[[""]]}}`), "holder without a name", false},
		{"empty model", doc(f.now, 1, `{"":{"blocks":[1],"holders":[["g0"]]}}`), "without a name", false},
		{"negative block", doc(f.now, 1, `{"m":{"blocks":[-1],"holders":[["g0"]]}}`), "not a saved index", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.b.LoadIndex(strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrIndexStale) != tc.stale {
				t.Fatalf("LoadIndex(%s) = %v, want an error with %q (stale: %v)", tc.text, err, tc.want, tc.stale)
			}
			if n := f.b.model("m").ix.size(); n != 0 {
				t.Errorf("a refused index left %d blocks", n)
			}
		})
	}
	// The same document, fresh, loads; repeated and surplus holders are
	// dropped.
	many := `{"m":{"blocks":[7],"holders":[["g0","g0","g1","g2","g3","g4","g5","g6","g7","g8"]]}}`
	if _, err := f.b.LoadIndex(strings.NewReader(doc(f.now, 1, many))); err != nil {
		t.Fatal(err)
	}
	if hs := f.b.model("m").ix.nodes[7].holders; len(hs) != maxHolders || hs[0] != "g0" || hs[1] != "g1" {
		t.Errorf("holders %v, want the first %d distinct", hs, maxHolders)
	}
}

// The file is written whole under a temporary name and renamed, mode
// 0600; a missing file is fs.ErrNotExist.
func TestIndexFile(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	path := filepath.Join(t.TempDir(), "index.json")
	if _, err := f.b.LoadIndexFile(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadIndexFile of no file = %v, want fs.ErrNotExist", err)
	}
	f.b.Start(Request{Model: "m", Keys: keys(strings.Repeat("text ", 100))}, f.reps[0], Home, 0).End()
	saved, err := f.b.SaveIndexFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("index file mode %v, want 0600", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".index.json.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	var doc savedIndex
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != IndexFileVersion {
		t.Fatalf("index file %s: %v", b, err)
	}
	next := newFixture(t, Prefix, 2)
	got, err := next.b.LoadIndexFile(path)
	if err != nil || got.Blocks != saved.Blocks || got.Blocks == 0 {
		t.Errorf("LoadIndexFile = %+v, %v; want the %d blocks saved", got, err, saved.Blocks)
	}
	// A directory that does not exist fails the save and leaves nothing.
	if _, err := f.b.SaveIndexFile(filepath.Join(t.TempDir(), "no", "index.json")); err == nil {
		t.Error("SaveIndexFile into a missing directory succeeded")
	}
}

// FuzzLoadIndex: any input is loaded or refused, never a panic, and a
// refused one changes nothing.
func FuzzLoadIndex(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	f.Add(fmt.Sprintf(`{"version":1,"saved":%q,"models":{"m":{"blocks":[1,2],"holders":[["g0"],["g1","g0"]]}}}`, now.Format(time.RFC3339)))
	f.Add(`{"version":1,"models":{"m":{"blocks":[1],"holders":[["g0","g0"]]}}}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, text string) {
		b := New(Config{Policy: Prefix, IndexBlocks: 4}, nil)
		b.now = func() time.Time { return now }
		info, err := b.LoadIndex(strings.NewReader(text))
		total := 0
		b.models.Range(func(_, v any) bool {
			ix := v.(*modelState).ix
			total += ix.size()
			for _, n := range ix.nodes {
				if len(n.holders) == 0 || len(n.holders) > maxHolders {
					t.Fatalf("block %d holders %v", n.key, n.holders)
				}
			}
			return true
		})
		if err != nil && total != 0 {
			t.Fatalf("refused (%v) but %d blocks loaded", err, total)
		}
		if err == nil && total > info.Blocks {
			t.Fatalf("loaded %d blocks, reported %d", total, info.Blocks)
		}
	})
}
