package balance

import (
	"math/bits"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The prompt's leading text is cut into BlockSize-byte blocks; each
// block's key hashes its bytes together with the previous key, so equal
// keys mean equal text from the start of the prompt (a chain, as engines
// key their KV-cache blocks). The router cannot tokenize: bytes stand in
// for tokens, and about 4 bytes of English make a token, so a block is
// some 64 tokens.
const (
	BlockSize = 256
	// MaxBlocks bounds how much leading text is indexed per request
	// (256 KiB): past that, a longer shared prefix changes no choice,
	// and the routing cost stays flat whatever the body's size.
	MaxBlocks = 1024
)

// Blocks collects a prompt's chained block keys from its text, written in
// pieces (Write). A final partial block counts, so a short prompt sent
// twice still finds its replica. Get one with GetBlocks and Put it back.
type Blocks struct {
	buf  [BlockSize]byte
	n    int
	prev uint64
	keys []uint64
}

var blocksPool = sync.Pool{New: func() any { return &Blocks{keys: make([]uint64, 0, 64)} }}

// GetBlocks returns an empty Blocks from a pool.
func GetBlocks() *Blocks { return blocksPool.Get().(*Blocks) }

// PutBlocks returns b to the pool; b and its Keys must not be used after.
func PutBlocks(b *Blocks) {
	if b == nil {
		return
	}
	b.Reset()
	blocksPool.Put(b)
}

// Reset empties b.
func (b *Blocks) Reset() {
	b.n, b.prev, b.keys = 0, 0, b.keys[:0]
}

// Full reports whether MaxBlocks blocks are collected: further text is
// ignored, so a caller may stop producing it.
func (b *Blocks) Full() bool { return len(b.keys) >= MaxBlocks }

// Write adds text; it never fails.
func (b *Blocks) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !b.Full() {
		c := copy(b.buf[b.n:], p)
		b.n += c
		p = p[c:]
		if b.n == BlockSize {
			b.flush()
		}
	}
	return n, nil
}

// WriteByte adds one byte (a separator).
func (b *Blocks) WriteByte(c byte) error {
	_, err := b.Write([]byte{c})
	return err
}

func (b *Blocks) flush() {
	k := chain(b.prev, xxhash.Sum64(b.buf[:b.n]))
	b.keys = append(b.keys, k)
	b.prev, b.n = k, 0
}

// Keys ends the text and returns the block keys, first block first. The
// slice belongs to b.
func (b *Blocks) Keys() []uint64 {
	if b.n > 0 && !b.Full() {
		b.flush()
	}
	return b.keys
}

// chain mixes the previous key into a block's hash (the finaliser of
// splitmix64 over a rotate-xor), so the same block after a different
// prefix gets an unrelated key.
func chain(prev, h uint64) uint64 {
	x := bits.RotateLeft64(prev, 29) ^ h ^ 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
