package enginesim

import "testing"

// ids is n distinct token ids starting at from.
func ids(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func concat(a, b []int) []int { return append(append([]int{}, a...), b...) }

func seq(c *kvCache, toks []int) *kvSeq {
	s := newKVSeq(toks, len(toks), "", c.blockSize, c.caching)
	return &s
}

func mustAllocate(t *testing.T, c *kvCache, s *kvSeq) int {
	t.Helper()
	cached, ok := c.allocate(s, 0)
	if !ok {
		t.Fatalf("allocate of %d tokens refused with %d free blocks", s.tokens, c.free())
	}
	return cached
}

func TestKVCacheRepeatHitsAllButLastToken(t *testing.T) {
	c := newKVCache(1024, 16, true)
	p := ids(1000, 64) // exactly 4 blocks
	a := seq(c, p)
	if got := mustAllocate(t, c, a); got != 0 {
		t.Fatalf("cold cache: %d cached tokens", got)
	}
	c.release(a)
	// The whole prompt is cached, but vLLM recomputes the last token, which
	// with block-aligned hits costs its whole block: 48 of 64 hit.
	b := seq(c, p)
	if got := mustAllocate(t, c, b); got != 48 {
		t.Fatalf("repeat of a 64-token prompt: %d cached tokens, want 48", got)
	}
	// One token more and all four blocks count.
	c.release(b)
	d := seq(c, concat(p, []int{7}))
	if got := mustAllocate(t, c, d); got != 64 {
		t.Fatalf("65-token prompt with its first 64 cached: %d, want 64", got)
	}
	if c.queries != 64+64+65 || c.hits != 48+64 {
		t.Errorf("queries %d hits %d", c.queries, c.hits)
	}
}

func TestKVCacheSharedPrefixBlockByBlock(t *testing.T) {
	c := newKVCache(4096, 16, true)
	system := ids(1, 40) // 2 full blocks and 8 tokens
	a := seq(c, concat(system, ids(5000, 30)))
	mustAllocate(t, c, a)
	// A different suffix shares the two full blocks of the system prompt
	// while a is still running (pinned blocks are shared, not copied).
	b := seq(c, concat(system, ids(9000, 30)))
	if got := mustAllocate(t, c, b); got != 32 {
		t.Fatalf("shared 40-token prefix: %d cached, want 32 (two whole blocks)", got)
	}
	if ref := c.cached[b.hashes[0]].ref; ref != 2 {
		t.Errorf("shared block pinned %d times, want 2", ref)
	}
	// A prompt differing in its first token shares nothing: the chain
	// makes every later block differ too.
	x := seq(c, concat([]int{77}, concat(system[1:], ids(5000, 30))))
	if got := mustAllocate(t, c, x); got != 0 {
		t.Errorf("different first token: %d cached", got)
	}
	// A different cache_salt shares nothing either.
	salted := newKVSeq(concat(system, ids(5000, 30)), 70, "tenant-b", 16, true)
	if got := mustAllocate(t, c, &salted); got != 0 {
		t.Errorf("other cache_salt: %d cached", got)
	}
	for _, s := range []*kvSeq{a, b, x, &salted} {
		c.release(s)
	}
	if c.free() != c.numBlocks {
		t.Errorf("after releasing all: %d of %d free", c.free(), c.numBlocks)
	}
}

func TestKVCacheLRUEviction(t *testing.T) {
	// 8 blocks: two 4-block prompts fill it.
	c := newKVCache(8*16, 16, true)
	pa, pb, pc := ids(100, 64), ids(200, 64), ids(300, 64)
	a := seq(c, pa)
	mustAllocate(t, c, a)
	c.release(a)
	b := seq(c, pb)
	mustAllocate(t, c, b)
	c.release(b)
	// Touch a again: now b is the least recently used.
	a = seq(c, pa)
	if got := mustAllocate(t, c, a); got != 48 {
		t.Fatalf("a again: %d", got)
	}
	c.release(a)
	// The cache was full of evictable blocks; a's recomputed last block
	// took the LRU head, which is a's own old last block (a request frees
	// its tail first).
	if c.evictions != 1 {
		t.Fatalf("evictions after a's repeat: %d, want 1", c.evictions)
	}
	ev := c.evictions
	// c needs 4 blocks: they come from b's blocks (least recently used), so
	// a stays cached and b does not.
	cs := seq(c, pc)
	mustAllocate(t, c, cs)
	c.release(cs)
	if c.evictions-ev != 4 {
		t.Errorf("c evicted %d blocks, want 4", c.evictions-ev)
	}
	if got := c.hitBlocks(seq(c, pa)); got != 3 {
		t.Errorf("a after c: %d blocks hit, want 3 (a was used more recently than b)", got)
	}
	if got := c.hitBlocks(seq(c, pb)); got != 0 {
		t.Errorf("b after c: %d blocks hit, want 0 (evicted)", got)
	}
}

func TestKVCachePinnedBlocksAreNotEvicted(t *testing.T) {
	c := newKVCache(8*16, 16, true)
	a := seq(c, ids(100, 96)) // 6 blocks, running
	mustAllocate(t, c, a)
	b := seq(c, ids(500, 48)) // needs 3, only 2 free
	if _, ok := c.allocate(b, 0); ok {
		t.Fatal("allocated over pinned blocks")
	}
	if b.blocks != nil || c.free() != 2 || c.queries != 96 {
		t.Fatalf("a refused allocation changed state: free %d queries %d", c.free(), c.queries)
	}
	c.release(a)
	if _, ok := c.allocate(b, 0); !ok {
		t.Fatal("refused after a released its blocks")
	}
	if c.evictions != 1 {
		t.Errorf("evictions %d, want 1 (two plain blocks, then one cached)", c.evictions)
	}
}

func TestKVCacheGrowCachesDecodedBlocks(t *testing.T) {
	c := newKVCache(1024, 16, true)
	s := seq(c, ids(1, 10))
	mustAllocate(t, c, s)
	for i := range 22 { // to 32 tokens: two full blocks
		if !c.grow(s, 900+i) {
			t.Fatal("grow refused")
		}
	}
	if len(s.blocks) != 2 || s.blocks[0] == nil || s.blocks[1] == nil || c.cachedBlocks() != 2 {
		t.Fatalf("decoded blocks not cached: %d blocks, %d cached", len(s.blocks), c.cachedBlocks())
	}
	c.release(s)
	// A follow-up turn whose prompt is the whole first exchange hits both.
	next := seq(c, concat(concat(ids(1, 10), ids(900, 22)), []int{5, 6}))
	if got := mustAllocate(t, c, next); got != 32 {
		t.Errorf("follow-up: %d cached, want 32", got)
	}
}

func TestKVCacheGrowPreemptsWhenFull(t *testing.T) {
	c := newKVCache(2*16, 16, true)
	s := seq(c, ids(1, 31))
	mustAllocate(t, c, s)
	if !c.grow(s, 1) {
		t.Fatal("token 32 fits the second block")
	}
	if c.grow(s, 2) {
		t.Fatal("token 33 needs a third block; none is free")
	}
	c.release(s)
	if c.free() != 2 || c.lru.len != 2 {
		t.Errorf("released: free %d, evictable %d", c.free(), c.lru.len)
	}
}

func TestKVCacheOff(t *testing.T) {
	c := newKVCache(1024, 16, false)
	p := ids(1, 64)
	for range 2 {
		s := newKVSeq(p, len(p), "", 16, false)
		if got := mustAllocate(t, c, &s); got != 0 {
			t.Fatalf("caching off: %d cached", got)
		}
		c.release(&s)
	}
	if c.cachedBlocks() != 0 || c.queries != 0 || c.plainFree != c.numBlocks {
		t.Errorf("caching off kept state: %d cached, %d queries", c.cachedBlocks(), c.queries)
	}
}
