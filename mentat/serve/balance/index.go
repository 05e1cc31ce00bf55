package balance

import (
	"slices"
	"sync"
)

// maxHolders bounds how many replicas one block remembers: a prefix hot
// enough to be on more replicas than this is everywhere anyway.
const maxHolders = 8

// index maps block keys to the replicas (groups) that were sent a prompt
// containing them, for one model. It holds at most max blocks, dropping
// the least recently used; a lookup or insert touches the blocks it
// walks, so a hot prefix stays. Safe for concurrent use.
type index struct {
	mu    sync.Mutex
	max   int
	nodes map[uint64]*node
	// head is the most recently used node, tail the least; a ring
	// through a sentinel keeps the list code branch-free.
	ring node
}

type node struct {
	key        uint64
	prev, next *node
	// holders are the groups that hold the block, most recent first.
	holders []string
}

func newIndex(max int) *index {
	ix := &index{max: max, nodes: map[uint64]*node{}}
	ix.ring.prev, ix.ring.next = &ix.ring, &ix.ring
	return ix
}

func (ix *index) unlink(n *node) {
	n.prev.next, n.next.prev = n.next, n.prev
}

func (ix *index) pushFront(n *node) {
	n.prev, n.next = &ix.ring, ix.ring.next
	ix.ring.next.prev = n
	ix.ring.next = n
}

// match returns, for each group in groups, how many leading blocks of
// keys it holds (depth[i] for groups[i]); depth must have len(groups).
// The walk stops at the first block no replica holds.
func (ix *index) match(keys []uint64, groups []string, depth []int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, k := range keys {
		n := ix.nodes[k]
		if n == nil {
			return
		}
		ix.unlink(n)
		ix.pushFront(n)
		for _, h := range n.holders {
			for j, g := range groups {
				if g == h && depth[j] == i {
					depth[j] = i + 1
				}
			}
		}
	}
}

// insert records that group was sent a prompt with these blocks.
func (ix *index) insert(keys []uint64, group string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, k := range keys {
		n := ix.nodes[k]
		if n == nil {
			n = &node{key: k, holders: make([]string, 0, 2)}
			ix.nodes[k] = n
		} else {
			ix.unlink(n)
		}
		ix.pushFront(n)
		n.holders = addHolder(n.holders, group)
	}
	ix.evict()
}

// evict drops the least recently used blocks past max. Callers hold mu.
func (ix *index) evict() {
	for len(ix.nodes) > ix.max {
		old := ix.ring.prev
		ix.unlink(old)
		delete(ix.nodes, old.key)
	}
}

// restore puts a block with its holders (most recent first, at most
// maxHolders, owned by the index from now on) in front, as the most
// recently used: restoring a saved index oldest first rebuilds its order.
func (ix *index) restore(key uint64, holders []string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := ix.nodes[key]
	if n == nil {
		n = &node{key: key}
		ix.nodes[key] = n
	} else {
		ix.unlink(n)
	}
	ix.pushFront(n)
	n.holders = holders
	ix.evict()
}

// entries lists the index's blocks and their holders, least recently
// used first (the order restore takes).
func (ix *index) entries() (keys []uint64, holders [][]string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	keys = make([]uint64, 0, len(ix.nodes))
	holders = make([][]string, 0, len(ix.nodes))
	for n := ix.ring.prev; n != &ix.ring; n = n.prev {
		keys = append(keys, n.key)
		holders = append(holders, slices.Clone(n.holders))
	}
	return keys, holders
}

// addHolder moves g to the front of hs, dropping the oldest holder past
// maxHolders.
func addHolder(hs []string, g string) []string {
	for i, h := range hs {
		if h == g {
			copy(hs[1:i+1], hs[:i])
			hs[0] = g
			return hs
		}
	}
	if len(hs) < maxHolders {
		hs = append(hs, "")
	}
	copy(hs[1:], hs[:len(hs)-1])
	hs[0] = g
	return hs
}

// size is how many blocks the index holds.
func (ix *index) size() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.nodes)
}
