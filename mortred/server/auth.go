package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// bearer checks Authorization: Bearer <token> in constant time. An empty
// configured token admits nobody: inference and /metrics then answer 401.
type bearer struct {
	sum   [32]byte
	empty bool
}

func newBearer(token string) bearer {
	return bearer{sum: sha256.Sum256([]byte(token)), empty: token == ""}
}

func (b bearer) allow(r *http.Request) bool {
	if b.empty {
		return false
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// Comparing digests keeps the time independent of the token's length.
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], b.sum[:]) == 1
}
