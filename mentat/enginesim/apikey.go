package enginesim

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// vLLM's --api-key (or VLLM_API_KEY): with a key, every route the server
// registered needs "Authorization: Bearer <key>", and so does any path
// under /v1, /v2, /inference or /cohere; the public endpoints (health,
// version, metrics and the like) and OPTIONS requests stay open. A
// refused request gets 401 {"error":"Unauthorized"}.

// publicPaths are vLLM's PUBLIC_ENDPOINTS (the docs paths enginesim does
// not serve stay open too, as in vLLM).
var publicPaths = []string{"/health", "/ping", "/load", "/version", "/metrics", "/docs", "/redoc", "/openapi.json", "/static"}

// guardedPrefixes are vLLM's fail-closed floor plus the static prefixes of
// enginesim's routes that are not public. vLLM matches them as plain
// string prefixes.
var guardedPrefixes = []string{"/v1", "/v2", "/inference", "/cohere", "/tokenize", "/detokenize"}

// UseEnvKey sets the key from VLLM_API_KEY's value v when no --api-key was
// given, as vLLM does.
func (c *Config) UseEnvKey(v string) {
	if len(c.APIKeys) == 0 && v != "" {
		c.APIKeys = []string{v}
	}
}

// requireKey wraps h with vLLM's API-key check for keys (none: h itself).
func requireKey(keys []string, h http.Handler) http.Handler {
	if len(keys) == 0 {
		return h
	}
	hashes := make([][32]byte, len(keys))
	for i, k := range keys {
		hashes[i] = sha256.Sum256([]byte(k))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions || !guarded(r.URL.Path) || validToken(r.Header.Get("Authorization"), hashes) {
			h.ServeHTTP(w, r)
			return
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
	})
}

func guarded(path string) bool {
	for _, p := range publicPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return false
		}
	}
	for _, p := range guardedPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// validToken is vLLM's verify_token: scheme "bearer" in any case, the
// rest after the first space compared by hash, in constant time, against
// every key.
func validToken(header string, hashes [][32]byte) bool {
	scheme, param, _ := strings.Cut(header, " ")
	if header == "" || !strings.EqualFold(scheme, "bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(param))
	ok := 0
	for i := range hashes {
		ok |= subtle.ConstantTimeCompare(sum[:], hashes[i][:])
	}
	return ok == 1
}
