package server

import (
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// limiter is a token bucket per client IP: qps tokens a second, a burst of
// max(1, qps). Buckets idle long enough to be full again carry no
// information and are evicted by a sweep that runs at most once per
// sweepEvery, inline with requests (no goroutine to leak).
type limiter struct {
	qps   float64
	burst float64
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

const sweepEvery = 30 * time.Second

func newLimiter(qps float64) *limiter {
	if qps <= 0 {
		return nil
	}
	return &limiter{qps: qps, burst: math.Max(1, qps), now: time.Now, buckets: map[string]*bucket{}}
}

// allow spends one token of ip's bucket. When empty it returns the seconds
// until the next token.
func (l *limiter) allow(ip string) (bool, int) {
	if l == nil {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.sweep(now)
	}
	b := l.buckets[ip]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[ip] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.qps)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, max(1, int(math.Ceil((1-b.tokens)/l.qps)))
}

func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	full := time.Duration(l.burst / l.qps * float64(time.Second))
	for ip, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, ip)
		}
	}
}

func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientIP is the peer's address. Behind the gateway (a loopback peer) it is
// the last X-Forwarded-For entry, the one the gateway appended.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			parts := strings.Split(xff[len(xff)-1], ",")
			if last := strings.TrimSpace(parts[len(parts)-1]); net.ParseIP(last) != nil {
				return last
			}
		}
	}
	return host
}
