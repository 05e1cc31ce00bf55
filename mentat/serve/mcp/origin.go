package mcp

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// originPolicy refuses browser requests from pages the router does not
// trust, on every method (the stdlib's CrossOriginProtection checks only
// unsafe methods, which would let a foreign page open the GET stream).
// A request without an Origin header is not from a browser page and passes.
type originPolicy struct {
	allowed map[string]bool // normalised scheme://host[:port]
}

func newOriginPolicy(extra []string) (*originPolicy, error) {
	p := &originPolicy{allowed: map[string]bool{}}
	for _, o := range extra {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		n, ok := normaliseOrigin(o)
		if !ok {
			return nil, fmt.Errorf("mcp: allowed origin %q is not scheme://host[:port]", o)
		}
		p.allowed[n] = true
	}
	return p, nil
}

// normaliseOrigin lowercases scheme and host and drops a default port.
func normaliseOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host, true
}

// allows decides one request's Origin.
func (p *originPolicy) allows(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	n, ok := normaliseOrigin(origin)
	if !ok {
		return false // "null" (sandboxed frames, file://) and garbage
	}
	if p.allowed[n] {
		return true
	}
	u, _ := url.Parse(n)
	host := u.Hostname()
	if isLoopbackHost(host) {
		return true
	}
	// The router's own pages, reached by IP address: same origin. A DNS
	// name is not trusted this way, since a rebinding attack makes a
	// foreign name's page same-origin with the router.
	if net.ParseIP(host) != nil {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if own, ok := normaliseOrigin(scheme + "://" + r.Host); ok && own == n {
			return true
		}
	}
	return false
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (p *originPolicy) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.allows(r) {
			http.Error(w, fmt.Sprintf("origin %q may not use this MCP endpoint: only loopback origins and "+
				"the router's configured allowed origins may; browse from one of those or ask the operator to allow this one",
				r.Header.Get("Origin")), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
