package enginesim

import (
	"fmt"
	"strings"
)

// The tokenizer is deterministic, stateless and exactly reversible: every
// byte string tokenizes, and detokenizing the ids gives the bytes back.
//
// Id layout:
//
//	0 … 255               one byte
//	256 … 65791           two bytes (256 + b0<<8 | b1)
//	65792 …               special tokens (chat template markers)
//	then                  each generated word, bare and with a leading space
//
// Words from the generation vocabulary are one token; anything else costs
// one token per two bytes, so counts grow with text the way real ones do.
const (
	pairBase    = 256
	specialBase = pairBase + 1<<16
)

// Special tokens, matched before anything else.
var specials = [...]string{
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
	"<|image_pad|>", "<|video_pad|>", "<|audio_pad|>",
}

var (
	wordBase  = specialBase + len(specials)
	vocabSize = wordBase + 2*len(words)
	// pieceID maps a whole word piece (" the", "the") to its id.
	pieceID = func() map[string]int {
		m := make(map[string]int, 2*len(words))
		for i, w := range words {
			m[w] = wordBase + 2*i
			m[" "+w] = wordBase + 2*i + 1
		}
		return m
	}()
)

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// Tokenize appends the ids of s to dst and returns it.
func Tokenize(dst []int, s string) []int {
	dst, _ = scan(dst, s, false)
	return dst
}

// CountTokens is len(Tokenize(nil, s)) without building the slice.
func CountTokens(s string) int {
	_, n := scan(nil, s, true)
	return n
}

// scan tokenizes s, appending ids to dst unless countOnly, and returns the
// number of tokens.
func scan(dst []int, s string, countOnly bool) ([]int, int) {
	n := 0
	emit := func(id int) {
		n++
		if !countOnly {
			dst = append(dst, id)
		}
	}
	pairs := func(p string) {
		if countOnly {
			n += (len(p) + 1) / 2
			return
		}
		n += (len(p) + 1) / 2
		dst = appendPairs(dst, p)
	}
	for i := 0; i < len(s); {
		if s[i] == '<' {
			if id, l := matchSpecial(s[i:]); l > 0 {
				emit(id)
				i += l
				continue
			}
		}
		j := i
		if s[j] == ' ' && j+1 < len(s) && isLetter(s[j+1]) {
			j++
		}
		if isLetter(s[j]) {
			k := j + 1
			for k < len(s) && isLetter(s[k]) {
				k++
			}
			if id, ok := pieceID[s[i:k]]; ok {
				emit(id)
			} else {
				pairs(s[i:k])
			}
			i = k
			continue
		}
		// A run of other bytes up to the next word or special token.
		k := i + 1
		for k < len(s) && !isLetter(s[k]) && s[k] != '<' && !(s[k] == ' ' && k+1 < len(s) && isLetter(s[k+1])) {
			k++
		}
		pairs(s[i:k])
		i = k
	}
	return dst, n
}

func matchSpecial(s string) (id, n int) {
	for i, sp := range specials {
		if strings.HasPrefix(s, sp) {
			return specialBase + i, len(sp)
		}
	}
	return 0, 0
}

func appendPairs(dst []int, s string) []int {
	for len(s) >= 2 {
		dst = append(dst, pairBase+int(s[0])<<8|int(s[1]))
		s = s[2:]
	}
	if len(s) == 1 {
		dst = append(dst, int(s[0]))
	}
	return dst
}

// Piece returns the text of one token id, or an error naming the id when it
// is outside the vocabulary.
func Piece(id int) (string, error) {
	switch {
	case id < 0 || id >= vocabSize:
		return "", fmt.Errorf("token id %d is out of vocabulary (0 to %d)", id, vocabSize-1)
	case id < pairBase:
		return string([]byte{byte(id)}), nil
	case id < specialBase:
		p := id - pairBase
		return string([]byte{byte(p >> 8), byte(p)}), nil
	case id < wordBase:
		return specials[id-specialBase], nil
	}
	w := words[(id-wordBase)/2]
	if (id-wordBase)%2 == 1 {
		return " " + w, nil
	}
	return w, nil
}

// Detokenize joins the pieces of ids.
func Detokenize(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		p, err := Piece(id)
		if err != nil {
			return "", err
		}
		b.WriteString(p)
	}
	return b.String(), nil
}

// VocabSize is the number of token ids.
func VocabSize() int { return vocabSize }
