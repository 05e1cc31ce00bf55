package enginesim

// kvCache is the KV cache as vLLM V1's block pool with automatic prefix
// caching: the capacity is cut into blocks of blockSize tokens; a full
// block is known by a hash chained over its tokens and every block before
// it; blocks of running requests are pinned (ref > 0); a finished
// request's hashed blocks stay in the cache, evictable, until a new
// allocation needs the room, least recently used first.
//
// It is not safe for concurrent use: the scheduler calls it under its lock.
type kvCache struct {
	blockSize int
	numBlocks int
	caching   bool
	// plainFree counts free blocks that hold no cached prefix; they are used
	// before any cached block is evicted.
	plainFree int
	// lru holds the free blocks that still hold a cached prefix, least
	// recently used at the front.
	lru    blockList
	cached map[uint64]*kvBlock

	evictions int64
	queries   int64 // prompt tokens looked up (vllm:prefix_cache_queries_total)
	hits      int64 // of those, tokens found (vllm:prefix_cache_hits_total)
}

// kvBlock is one hashed block: in the cache map, pinned by ref running
// requests, and in the LRU list while ref is 0.
type kvBlock struct {
	hash       uint64
	ref        int
	prev, next *kvBlock
	inLRU      bool
}

// kvSeq is one request's side of the cache: its token chain and, while it
// runs, the blocks it holds.
type kvSeq struct {
	tokens int      // tokens in its context: prompt, then each generated one
	hashes []uint64 // chain hash of each full block of the context
	tail   []int    // tokens of the partial last block, for its hash
	// blocks are the blocks held while running, in order; nil for a block
	// not in the cache map (the partial last block, a duplicate, or any
	// block with caching off).
	blocks []*kvBlock
}

func newKVCache(capacityTokens, blockSize int, caching bool) *kvCache {
	n := capacityTokens / blockSize
	return &kvCache{blockSize: blockSize, numBlocks: n, caching: caching, plainFree: n, cached: map[uint64]*kvBlock{}}
}

// chainHash is the hash of a block: its parent's hash and its tokens
// (FNV-1a over 64-bit words, then a final mix). vLLM uses sha256 or its
// builtin hash for the same chain; only equality matters here.
func chainHash(parent uint64, tokens []int) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	h = (h ^ parent) * prime
	for _, t := range tokens {
		h = (h ^ uint64(t)) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// saltHash is the parent hash of a sequence's first block: requests with
// different cache_salt values never share blocks, as in vLLM.
func saltHash(salt string) uint64 {
	if salt == "" {
		return 0
	}
	ids := make([]int, len(salt))
	for i := range len(salt) {
		ids[i] = int(salt[i])
	}
	return chainHash(1, ids)
}

// newKVSeq is the sequence of a prompt. With caching on it hashes every
// full block of ids; with caching off only the count n matters.
func newKVSeq(ids []int, n int, salt string, blockSize int, caching bool) kvSeq {
	s := kvSeq{tokens: n}
	if !caching {
		return s
	}
	parent := saltHash(salt)
	full := len(ids) / blockSize
	s.hashes = make([]uint64, 0, full+1)
	for b := range full {
		parent = chainHash(parent, ids[b*blockSize:(b+1)*blockSize])
		s.hashes = append(s.hashes, parent)
	}
	s.tail = append(make([]int, 0, blockSize), ids[full*blockSize:]...)
	return s
}

func (c *kvCache) blocksFor(tokens int) int { return (tokens + c.blockSize - 1) / c.blockSize }

// free is how many blocks an allocation can take: plain free ones and
// evictable cached ones.
func (c *kvCache) free() int { return c.plainFree + c.lru.len }

// cachedBlocks is how many blocks hold a cached prefix, pinned or not.
func (c *kvCache) cachedBlocks() int { return len(c.cached) }

// usage is vLLM's kv_cache_usage_perc: the fraction of blocks not free.
// Evictable cached blocks count as free, as in vLLM's block pool.
func (c *kvCache) usage() float64 {
	if c.numBlocks == 0 {
		return 0
	}
	return 1 - float64(c.free())/float64(c.numBlocks)
}

// hitBlocks is the number of leading blocks of s found in the cache. As
// in vLLM, a full hit still recomputes the last token (its logits start
// the generation): at most (tokens-1)/blockSize blocks count.
func (c *kvCache) hitBlocks(s *kvSeq) int {
	if !c.caching {
		return 0
	}
	limit := min(len(s.hashes), (s.tokens-1)/c.blockSize)
	n := 0
	for n < limit {
		if _, ok := c.cached[s.hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// allocate admits s: it pins the cached prefix, takes blocks for the rest
// of its context plus extra tokens of room, and caches its new full
// blocks. It returns the number of tokens served from the cache, or false
// (and changes nothing) when the free blocks do not suffice.
func (c *kvCache) allocate(s *kvSeq, extra int) (cachedTokens int, ok bool) {
	hits := c.hitBlocks(s)
	need := c.blocksFor(s.tokens+extra) - hits
	for _, h := range s.hashes[:hits] {
		if c.cached[h].ref == 0 {
			need++ // an evictable hit leaves the free pool when pinned
		}
	}
	if need > c.free() {
		return 0, false
	}
	if c.caching {
		c.queries += int64(s.tokens)
		c.hits += int64(hits * c.blockSize)
	}
	s.blocks = s.blocks[:0]
	for _, h := range s.hashes[:hits] {
		b := c.cached[h]
		if b.ref == 0 {
			c.lru.remove(b)
		}
		b.ref++
		s.blocks = append(s.blocks, b)
	}
	for i := hits; i < c.blocksFor(s.tokens+extra); i++ {
		c.take()
		var b *kvBlock
		if i < len(s.hashes) {
			b = c.insert(s.hashes[i])
		}
		s.blocks = append(s.blocks, b)
	}
	return hits * c.blockSize, true
}

// take removes one block from the free pool, evicting the least recently
// used cached block when no plain one is left. The caller checked free().
func (c *kvCache) take() {
	if c.plainFree > 0 {
		c.plainFree--
		return
	}
	b := c.lru.front()
	c.lru.remove(b)
	delete(c.cached, b.hash)
	c.evictions++
}

// insert caches a freshly computed block under hash and returns it pinned
// once, or nil when caching is off or the hash is already cached (the
// block then stays a private duplicate, as in vLLM).
func (c *kvCache) insert(hash uint64) *kvBlock {
	if !c.caching {
		return nil
	}
	if _, dup := c.cached[hash]; dup {
		return nil
	}
	b := &kvBlock{hash: hash, ref: 1}
	c.cached[hash] = b
	return b
}

// grow adds token to the running s, taking a new block when the last one
// is full. false means no block is free: the caller preempts.
func (c *kvCache) grow(s *kvSeq, token int) bool {
	if s.tokens == len(s.blocks)*c.blockSize {
		if c.free() == 0 {
			return false
		}
		c.take()
		s.blocks = append(s.blocks, nil)
	}
	s.tokens++
	if !c.caching {
		return true
	}
	s.tail = append(s.tail, token)
	if len(s.tail) == c.blockSize {
		parent := uint64(0)
		if len(s.hashes) > 0 {
			parent = s.hashes[len(s.hashes)-1]
		}
		h := chainHash(parent, s.tail)
		s.hashes = append(s.hashes, h)
		s.tail = s.tail[:0]
		if b := c.insert(h); b != nil {
			// The block was private until now: it leaves no free block
			// behind when it becomes a cached one.
			s.blocks[len(s.blocks)-1] = b
		}
	}
	return true
}

// release unpins every block s holds. Hashed blocks stay cached and become
// evictable; the request's last blocks go first, as vLLM frees them in
// reverse order so that a shared prefix outlives its tails.
func (c *kvCache) release(s *kvSeq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		if b == nil {
			c.plainFree++
			continue
		}
		b.ref--
		if b.ref == 0 {
			c.lru.pushBack(b)
		}
	}
	s.blocks = s.blocks[:0]
}

// blockList is an intrusive doubly linked list of free cached blocks.
type blockList struct {
	head, tail *kvBlock
	len        int
}

func (l *blockList) front() *kvBlock { return l.head }

func (l *blockList) pushBack(b *kvBlock) {
	b.prev, b.next, b.inLRU = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = b
	} else {
		l.head = b
	}
	l.tail = b
	l.len++
}

func (l *blockList) remove(b *kvBlock) {
	if !b.inLRU {
		return
	}
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		l.tail = b.prev
	}
	b.prev, b.next, b.inLRU = nil, nil, false
	l.len--
}
