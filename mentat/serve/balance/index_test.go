package balance

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestBlocksChain(t *testing.T) {
	shared := strings.Repeat("a", 3*BlockSize)
	a, b := keys(shared+"tail one"), keys(shared+"tail two")
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("3 full blocks and a partial: %d and %d keys, want 4", len(a), len(b))
	}
	for i := range 3 {
		if a[i] != b[i] {
			t.Errorf("block %d differs for the same leading text", i)
		}
	}
	if a[3] == b[3] {
		t.Error("different tails got the same key")
	}
	// The same block after a different prefix is a different key.
	c := keys("x" + shared[1:] + "tail one")
	if c[1] == a[1] || c[2] == a[2] {
		t.Error("a block's key ignores what came before it")
	}
	// Pieces do not matter, only the bytes.
	bl := GetBlocks()
	for _, p := range []string{shared[:10], shared[10:700], shared[700:], "tail", " one"} {
		bl.Write([]byte(p))
	}
	if got := bl.Keys(); fmt.Sprint(got) != fmt.Sprint(a) {
		t.Error("writing in pieces changed the keys")
	}
	PutBlocks(bl)
	if k := keys(""); len(k) != 0 {
		t.Errorf("empty text: %d keys", len(k))
	}
}

func TestBlocksBounded(t *testing.T) {
	bl := GetBlocks()
	defer PutBlocks(bl)
	bl.Write(bytes.Repeat([]byte("z"), (MaxBlocks+10)*BlockSize+7))
	if !bl.Full() || len(bl.Keys()) != MaxBlocks {
		t.Errorf("keys = %d, want the cap %d", len(bl.Keys()), MaxBlocks)
	}
}

func TestIndexLRUBound(t *testing.T) {
	ix := newIndex(100)
	hot := keys(strings.Repeat("hot tenant prompt ", 100)) // 8 blocks
	ix.insert(hot, "g0")
	for i := range 500 {
		ix.insert(keys(fmt.Sprintf("cold %d %s", i, strings.Repeat("-", 2*BlockSize))), "g1")
		if i%10 == 0 {
			d := []int{0}
			ix.match(hot, []string{"g0"}, d) // touched: stays
			if d[0] != len(hot) {
				t.Fatalf("after %d cold prompts the hot prefix matched %d of %d blocks", i, d[0], len(hot))
			}
		}
		if n := ix.size(); n > 100 {
			t.Fatalf("index holds %d blocks, bound is 100", n)
		}
	}
	d := []int{0, 0}
	ix.match(keys("cold 0 "+strings.Repeat("-", 2*BlockSize)), []string{"g0", "g1"}, d)
	if d[1] != 0 {
		t.Errorf("the oldest cold prompt still matches %d blocks", d[1])
	}
}

func TestIndexDepthPerReplica(t *testing.T) {
	ix := newIndex(1000)
	long := strings.Repeat("b", 6*BlockSize)
	ix.insert(keys(long[:2*BlockSize]), "g0")
	ix.insert(keys(long[:5*BlockSize]), "g1")
	d := []int{0, 0, 0}
	ix.match(keys(long), []string{"g0", "g1", "g2"}, d)
	if d[0] != 2 || d[1] != 5 || d[2] != 0 {
		t.Errorf("depths = %v, want [2 5 0]", d)
	}
}

func TestAddHolderBounded(t *testing.T) {
	var hs []string
	for i := range 20 {
		hs = addHolder(hs, fmt.Sprint("g", i))
	}
	hs = addHolder(hs, "g15")
	if len(hs) != maxHolders || hs[0] != "g15" || hs[1] != "g19" {
		t.Errorf("holders = %v", hs)
	}
}
