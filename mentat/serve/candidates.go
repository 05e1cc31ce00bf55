package serve

import (
	"net"
	"strconv"
	"strings"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
)

// candidates resolves an announced endpoint to the URLs to try, best first.
// The URL form is its own single candidate, used as written and not checked
// against ALLOWED_SOURCES. The port form gives one URL per address of the
// node: addresses on a subnet the router is attached to first, the node's
// own ranking within each half, each address checked against the
// allowlist.
func candidates(ep *endpoint, subnets []*net.IPNet, allow discovery.Allow) []string {
	if ep == nil {
		return nil
	}
	if !ep.svc.PortForm() {
		return []string{ep.svc.URL("")}
	}
	var on, off []string
	seen := map[string]bool{}
	for _, a := range ep.nodeAddrs {
		a = strings.Trim(strings.TrimSpace(a), "[]")
		if a == "" || seen[a] || !allow.Host(a) {
			continue
		}
		seen[a] = true
		if discovery.OnLink(a, subnets) {
			on = append(on, ep.svc.URL(a))
		} else {
			off = append(off, ep.svc.URL(a))
		}
	}
	return append(on, off...)
}

// announcedText renders a port-form announcement for why_not, e.g.
// "8002/v1 on 10.9.0.1, 10.9.0.2".
func announcedText(ep *endpoint) string {
	s := strconv.Itoa(ep.svc.Port) + ep.svc.Path
	if len(ep.nodeAddrs) > 0 {
		s += " on " + strings.Join(ep.nodeAddrs, ", ")
	}
	return s
}
