package wire

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ParseEndpoint reads MENTAT_OPENAI_API / MENTAT_MCP_API:
//
//	8000/v1                 port form, port 8000, path /v1
//	8000                    port form, empty path
//	http://0.0.0.0:8000/v1  port form (a wildcard host leaves the host to the router)
//	http://host:port/path   URL form, used verbatim
//
// Anything else is an error that says what was expected.
func ParseEndpoint(v string) (Service, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Service{}, fmt.Errorf("empty endpoint")
	}
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil {
			return Service{}, fmt.Errorf("%q is not a URL: %v", v, err)
		}
		if u.Scheme != "http" {
			return Service{}, fmt.Errorf("%q: only http:// URLs are supported", v)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return Service{}, fmt.Errorf("%q: want http://host:port/path without user, query or fragment", v)
		}
		host := u.Hostname()
		port, err := parsePort(u.Port())
		if host == "" || err != nil {
			return Service{}, fmt.Errorf("%q: want http://host:port/path with an explicit port", v)
		}
		path := strings.TrimRight(u.EscapedPath(), "/")
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return Service{Port: port, Path: path}, nil
		}
		return Service{Host: host, Port: port, Path: path}, nil
	}
	portStr, path, _ := strings.Cut(v, "/")
	port, err := parsePort(portStr)
	if err != nil {
		return Service{}, fmt.Errorf("%q: want PORT, PORT/path or http://host:port/path", v)
	}
	if path != "" {
		path = "/" + strings.TrimRight(path, "/")
		if path == "/" {
			path = ""
		}
		if _, err := url.Parse(path); err != nil || strings.ContainsAny(path, "?# ") {
			return Service{}, fmt.Errorf("%q: bad path", v)
		}
	}
	return Service{Port: port, Path: path}, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return n, nil
}
