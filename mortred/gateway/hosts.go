package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
)

// This file is what the gateway does when several hosts, each with its own
// supervisor, gateway and model servers, stand behind one edge: job ids
// name the host that holds the job, a job request that lands on another
// host is forwarded to the holder's gateway, and /readyz tells the edge
// and orchestrators what this host can serve.

// EnvHostID overrides [gateway] host_id, so that hosts can share one
// mortred.toml.
const EnvHostID = "MORTRED_HOST_ID"

// headerVia marks a job request one gateway forwarded to another. A
// gateway never forwards such a request again: peers tables that disagree
// would otherwise bounce it between hosts.
const headerVia = "X-Mortred-Via"

// headerHost names the host whose gateway answered.
const headerHost = "X-Mortred-Host"

// peer is another host's gateway.
type peer struct {
	id, addr string
}

// checkHostID refuses a host id that could not be the first dot-separated
// part of a job id in a URL path segment.
func checkHostID(id string) error {
	if id == "" || len(id) > 32 {
		return fmt.Errorf("host id %q must be 1 to 32 characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("host id %q may hold only lower-case letters, digits and '-'", id)
		}
	}
	return nil
}

// checkHosts validates HostID and Peers.
func (c *Config) checkHosts() error {
	if c.HostID == "" {
		if len(c.Peers) > 0 {
			return errors.New("[gateway] peers needs this host's own id: set [gateway] host_id or " + EnvHostID)
		}
		return nil
	}
	if err := checkHostID(c.HostID); err != nil {
		return fmt.Errorf("[gateway] host_id: %w", err)
	}
	ids := make([]string, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := checkHostID(id); err != nil {
			return fmt.Errorf("[gateway] peers: %w", err)
		}
		if _, _, err := net.SplitHostPort(c.Peers[id]); err != nil {
			return fmt.Errorf("[gateway] peers: host %s: address %q is not host:port: %v", id, c.Peers[id], err)
		}
	}
	return nil
}

// newPeers returns the peers other than this host, and the addresses of
// their gateways that are IPs: requests from those are trusted with their
// X-Forwarded-For, as the loopback edge is.
func newPeers(self string, all map[string]string) (map[string]*peer, map[netip.Addr]bool) {
	peers, ips := map[string]*peer{}, map[netip.Addr]bool{}
	for id, addr := range all {
		if id == self {
			continue
		}
		peers[id] = &peer{id: id, addr: addr}
		host, _, _ := net.SplitHostPort(addr)
		if ip, err := netip.ParseAddr(host); err == nil {
			ips[ip.Unmap()] = true
		}
	}
	return peers, ips
}

// jobHost splits a job id of the gateway's form, HOST.ID, into the host
// and the model server's id. Ids without a host (this gateway runs without
// host_id, or the job was submitted before it had one) are local.
func (g *Gateway) jobHost(job string) (host, local string) {
	if g.cfg.HostID == "" {
		return "", job
	}
	if h, id, ok := strings.Cut(job, "."); ok {
		return h, id
	}
	return "", job
}

// jobRoute serves GET /v1/models/{id}/jobs/{job}+suffix: here when this
// host holds the job, through the holder's gateway when a peer does.
func (g *Gateway) jobRoute(suffix string, answer jobAnswer) http.Handler {
	local := g.model(http.MethodGet, g.jobPath(suffix), answer)
	if len(g.peers) == 0 {
		return local
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _ := g.jobHost(r.PathValue("job"))
		p := g.peers[host]
		u := g.byID[r.PathValue("id")]
		if p == nil || u == nil || r.Method != http.MethodGet {
			local.ServeHTTP(w, r)
			return
		}
		if k := keys.FromContext(r.Context()); k != nil {
			// The scope is checked here so that a key that may not use
			// the model learns it without a hop; its limits are charged
			// by the holder, which serves the request.
			if rej := k.Scope(u.ID); rej != nil {
				g.keyRefusal(w, rej)
				g.up[u].request(rej.Status)
				return
			}
		}
		g.viaPeer(w, r, u, p)
	})
}

// jobPath is the model server's path of a job route: /jobs/{job}+suffix,
// {job} without this host's id. {job} arrives decoded, so an id that is
// not plain unreserved characters (an escaped "/", "?", "#", a dot
// segment, a NUL) would become another path on the model port, with the
// model's token: "" refuses it, and so does an id naming a host that is
// neither this one nor a peer.
func (g *Gateway) jobPath(suffix string) func(*Upstream, *http.Request) string {
	return func(_ *Upstream, r *http.Request) string {
		host, id := g.jobHost(r.PathValue("job"))
		if host != "" && host != g.cfg.HostID || !httpx.PlainSegment(id) {
			return ""
		}
		return "/jobs/" + id + suffix
	}
}

// viaPeer relays a job request to the gateway of the host that holds the
// job, with the client's own Authorization: that gateway authenticates
// the client again and its model server checks the job's tenant, so a
// job id reaches only what its holder would serve.
func (g *Gateway) viaPeer(w http.ResponseWriter, r *http.Request, u *Upstream, p *peer) {
	st := g.up[u]
	if via := r.Header.Get(headerVia); via != "" {
		g.refuse(w, st, http.StatusBadGateway, statusServerError,
			fmt.Sprintf("job %s names host %s, and host %s forwarded it here: the gateways' [gateway] peers tables disagree", quote(r.PathValue("job")), p.id, quote(via)))
		return
	}
	if !httpx.PlainSegment(r.PathValue("job")) {
		writeEnvelope(w, http.StatusNotFound, statusNotFound, "no job with id "+quote(r.PathValue("job"))+"; job ids are the ones POST /v1/models/{id}/jobs returned", "")
		st.request(http.StatusNotFound)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "", nil)
	if err != nil {
		g.refuse(w, st, http.StatusBadGateway, statusServerError, "cannot build the request to host "+p.id+": "+err.Error())
		return
	}
	*out.URL = url.URL{Scheme: "http", Host: p.addr, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Host = p.addr
	httpx.ForwardHeader(out.Header, r.Header, peerRequestHeaders)
	if xff := g.forwardedFor(r); xff != "" {
		out.Header["X-Forwarded-For"] = []string{xff}
	}
	out.Header[headerVia] = []string{g.cfg.HostID}
	resp, err := httpx.RoundTrip(g.peerTransport, out)
	if err != nil {
		g.cfg.Edge.WriteDeadline(w)
		if r.Context().Err() != nil {
			g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
			panic(http.ErrAbortHandler)
		}
		g.log.Warn("gateway_peer_failed", "model", u.ID, "host", p.id, "addr", p.addr, "err", err)
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "peer").Inc()
		w.Header().Set("Retry-After", "1")
		g.refuse(w, st, http.StatusServiceUnavailable, statusNotReady,
			fmt.Sprintf("job %s is held by host %s (gateway %s), which cannot be reached: %v; the job is not lost while that host runs: retry after Retry-After", quote(r.PathValue("job")), p.id, p.addr, trimErr(err)))
		return
	}
	defer resp.Body.Close()
	httpx.CopyResponseHeader(w.Header(), resp.Header)
	g.cfg.Edge.WriteDeadline(w)
	w.WriteHeader(resp.StatusCode)
	if readErr, writeErr := httpx.Relay(w, nil, resp.Body, nil, nil); writeErr != nil {
		g.abortMidResponse(r, u, fmt.Errorf("%w: %w", errClientWrite, writeErr))
	} else if readErr != nil {
		g.abortMidResponse(r, u, readErr)
	}
	st.request(resp.StatusCode)
}

// peerRequestHeaders are the client's headers a peer gateway sees: it
// authenticates the client itself.
var peerRequestHeaders = []string{"Authorization", "Accept", "X-Request-Id"}

// trustedProxy reports whether a request from ip may name the real client
// in X-Forwarded-For: a loopback proxy (the TLS edge on this host) or a
// peer's gateway.
func (g *Gateway) trustedProxy(ip netip.Addr) bool {
	return ip.IsLoopback() || g.peerIPs[ip]
}
