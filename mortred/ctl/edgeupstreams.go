package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// The gateways behind one edge: which addresses, which models each serves
// (from its GET /readyz), and the Nginx upstreams that follow from both.

// sharedUpstream is the upstream of location /: every gateway.
const sharedUpstream = "mortred_gateway"

// readyzTimeout bounds each gateway's GET /readyz, connection included.
const readyzTimeout = 2 * time.Second

// readyzClient asks the gateways' /readyz: straight to the address given
// (no proxy from the environment), one connection per question.
var readyzClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// edgeUpstream is one Nginx upstream block and the location that uses it.
type edgeUpstream struct {
	// Name is the upstream's name: sharedUpstream, or mortred_m_<id>.
	Name string
	// Model is the catalog id whose location /v1/models/<Model>/ uses this
	// upstream; "" for the shared upstream (location /).
	Model string
	// Servers are the gateways, HOST:PORT as Nginx reads them, in the
	// order --gateways listed them.
	Servers []string
	// MaxFails and FailTimeoutS are the server parameters max_fails and
	// fail_timeout (seconds), written only when Servers has more than one
	// entry: Nginx ignores both for a single server and never marks it
	// unavailable.
	MaxFails, FailTimeoutS int
	// ReadTimeoutS is proxy_read_timeout and proxy_send_timeout (seconds).
	ReadTimeoutS int
}

// KeepaliveS is the upstream's keepalive_timeout (seconds): 60, below the
// gateway's 90 s idle timeout, and with several servers at most half of
// fail_timeout. A host whose link was cut leaves idle connections that
// look alive; a request sent on one would hang until proxy_read_timeout
// and, being sent, never move to another gateway. While the host is left
// out nothing uses them, so they expire before Nginx tries it again, and
// that try opens a new connection, which fails within
// proxy_connect_timeout and moves on.
func (u edgeUpstream) KeepaliveS() int {
	if len(u.Servers) < 2 || u.FailTimeoutS == 0 {
		return 60
	}
	return max(1, min(60, u.FailTimeoutS/2))
}

// Location is the path prefix the upstream serves.
func (u edgeUpstream) Location() string {
	if u.Model == "" {
		return "/"
	}
	return "/v1/models/" + u.Model + "/"
}

// gatewayModels is what one gateway's /readyz said.
type gatewayModels struct {
	Addr     string   // HOST:PORT, as in --gateways
	Host     string   // the gateway's own name for its host ("host"); may be ""
	Draining bool     // it answered draining (503)
	Models   []string // the catalog ids it lists, ready or not; sorted, distinct
}

// parseGateways splits a comma-separated HOST:PORT list (an IPv6 address in
// brackets) into addresses in the form Nginx and net/http both read. An
// empty, malformed or repeated entry is a usageError naming it; flagName
// names the flag in the message.
func parseGateways(flagName, list string) ([]string, error) {
	var out []string
	seen := map[string]string{}
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, usageError{flagName + ": an empty entry (two commas in a row, or one at either end)"}
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil || host == "" {
			return nil, usageError{fmt.Sprintf("%s: %q is not HOST:PORT (an IPv6 address goes in brackets: [::1]:8080)", flagName, entry)}
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return nil, usageError{fmt.Sprintf("%s: %q: the port must be a number from 1 to 65535", flagName, entry)}
		}
		key := strings.ToLower(host)
		if ip := net.ParseIP(host); ip != nil {
			key = ip.String()
		} else if !hostName(host) {
			return nil, usageError{fmt.Sprintf("%s: %q: the host must be an IP address or a DNS name (letters, digits, '-', '_', '.')", flagName, entry)}
		}
		addr := net.JoinHostPort(host, port)
		key = net.JoinHostPort(key, port)
		if first, ok := seen[key]; ok {
			return nil, usageError{fmt.Sprintf("%s: %q is listed twice (also as %q)", flagName, entry, first)}
		}
		seen[key] = entry
		out = append(out, addr)
	}
	return out, nil
}

// hostName reports whether s is a plain DNS name (no zone, no characters
// Nginx or a URL would read otherwise).
func hostName(s string) bool {
	if s == "" || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// readyzAnswer is the part of a gateway's GET /readyz this command reads.
// Models is a pointer so that an answer without the list is told apart
// from an empty list.
type readyzAnswer struct {
	Ready    bool   `json:"ready"`
	Host     string `json:"host"`
	Draining bool   `json:"draining"`
	Models   *[]struct {
		ID    string `json:"id"`
		Ready bool   `json:"ready"`
	} `json:"models"`
}

// askGateways GETs http://ADDR/readyz from every gateway at once, each
// bounded by timeout (connection included), and returns the answers in
// addrs' order. A gateway that cannot be reached, answers a status other
// than 200 or 503, or a body without the models list is an error naming
// it and the reason; the returned error names every such gateway.
func askGateways(ctx context.Context, client *http.Client, addrs []string, timeout time.Duration) ([]gatewayModels, error) {
	answers := make([]gatewayModels, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			answers[i], errs[i] = askGateway(ctx, client, addr, timeout)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("gateway %s: %w", addr, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return answers, nil
}

func askGateway(ctx context.Context, client *http.Client, addr string, timeout time.Duration) (gatewayModels, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := "http://" + addr + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return gatewayModels{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return gatewayModels{}, fmt.Errorf("GET %s: connection refused (is the gateway running, and listening on that address?)", u)
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			return gatewayModels{}, fmt.Errorf("GET %s: no answer within %v", u, timeout)
		}
		return gatewayModels{}, fmt.Errorf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return gatewayModels{}, fmt.Errorf("GET %s: reading the answer: %v", u, err)
	}
	// 503 (draining, or no model ready yet) has the same body.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return gatewayModels{}, fmt.Errorf("GET %s answered %s, not 200 or 503 (is this a mortred gateway?)", u, resp.Status)
	}
	var a readyzAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return gatewayModels{}, fmt.Errorf("GET %s: the answer is not the readiness JSON: %v", u, err)
	}
	if a.Models == nil {
		return gatewayModels{}, fmt.Errorf("GET %s: the answer has no \"models\" list", u)
	}
	g := gatewayModels{Addr: addr, Host: a.Host, Draining: a.Draining}
	for _, m := range *a.Models {
		if m.ID == "" {
			return gatewayModels{}, fmt.Errorf("GET %s: a model without an \"id\" in the answer", u)
		}
		g.Models = append(g.Models, m.ID)
	}
	slices.Sort(g.Models)
	g.Models = slices.Compact(g.Models)
	return g, nil
}

// planUpstreams returns the shared upstream (every gateway, location /)
// and, for each model that only some gateways list, an upstream of just
// those, sorted by model id. answers nil (--offline, or one gateway from
// --gateway-addr) means every gateway serves every model: the shared
// upstream alone. A model that needs its own location must have an id
// made of letters, digits and -._~ (it goes into the location's path).
func planUpstreams(addrs []string, answers []gatewayModels, maxFails, failTimeoutS int) ([]edgeUpstream, error) {
	ups := []edgeUpstream{{Name: sharedUpstream, Servers: addrs, MaxFails: maxFails, FailTimeoutS: failTimeoutS}}
	servedBy := map[string][]string{} // model id → gateways, in addrs' order
	for _, g := range answers {
		for _, id := range g.Models {
			servedBy[id] = append(servedBy[id], g.Addr)
		}
	}
	names := map[string]bool{strings.ToLower(sharedUpstream): true} // Nginx compares upstream names ignoring case
	for _, id := range slices.Sorted(maps.Keys(servedBy)) {
		gws := servedBy[id]
		if len(gws) == len(addrs) {
			continue
		}
		if !httpx.PlainSegment(id) {
			return nil, fmt.Errorf("gateway %s lists model %q, which only some gateways serve: its location /v1/models/ID/ needs an id of letters, digits and -._~ only", gws[0], id)
		}
		name := upstreamName(id, names)
		ups = append(ups, edgeUpstream{Name: name, Model: id, Servers: gws, MaxFails: maxFails, FailTimeoutS: failTimeoutS})
	}
	return ups, nil
}

// upstreamName is mortred_m_<id> with every character but letters, digits
// and '_' made '_', and _2, _3, … added when taken (names, which it
// updates, holds the lower-cased names in use).
func upstreamName(id string, names map[string]bool) string {
	base := "mortred_m_" + strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, id)
	name := base
	for n := 2; names[strings.ToLower(name)]; n++ {
		name = base + "_" + strconv.Itoa(n)
	}
	names[strings.ToLower(name)] = true
	return name
}
