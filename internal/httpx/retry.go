package httpx

import (
	"net/http"
	"strconv"
	"time"
)

// SetRetryAfter tells a refused client how long to wait, d, the two ways
// clients read it: Retry-After in whole seconds and Retry-After-Ms (the
// official OpenAI clients prefer it), both rounded up and at least 1, so
// that no client retries before the wait is over.
func SetRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(max(1, int64((d+time.Millisecond-1)/time.Millisecond)), 10))
}
