package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
)

// This file is the gateway's side of a model rollout. The supervisor starts
// a model's new version on another port, warms it, and then writes the
// routes file (temp file + rename) and sends SIGHUP: from the next request
// on, the model is served by the new instance. Older instances listed as
// draining finish what they have in flight (those requests hold their own
// connections) and keep answering for their async jobs until the
// supervisor stops them.

// EnvRoutesFile names the routes file. Only the supervisor sets it, for the
// gateway it spawns; there is no mortred.toml key.
const EnvRoutesFile = "MORTRED_ROUTES_FILE"

// headerVersion names the version of the model instance that answered,
// when the routes file gives one.
const headerVersion = "X-Mortred-Version"

// maxRoutesFile bounds the routes file read into memory.
const maxRoutesFile = 1 << 20

// maxDraining bounds the draining instances of one model: each is asked in
// turn for a job the active instance does not know.
const maxDraining = 16

// maxVersion bounds a version's length (it is sent as a header value).
const maxVersion = 128

// routesFile is the file's JSON, as the supervisor writes it:
//
//	{"generation":7,"models":{"PPOCR_CLS":{"addr":"127.0.0.1:41234","version":"v2","instance":2,
//	  "draining":[{"addr":"127.0.0.1:9002","version":"v1","instance":1}]}}}
type routesFile struct {
	// Generation is informational: it is logged, never compared.
	Generation int64 `json:"generation"`
	// Models maps catalog ids to their instances. A model not listed is
	// served at its catalog address.
	Models map[string]routeEntry `json:"models"`
}

// routeEntry is one model's instances in the file.
type routeEntry struct {
	instanceEntry
	// Draining are older instances that still hold async jobs, asked in
	// this order.
	Draining []instanceEntry `json:"draining"`
}

// instanceEntry is one model-server process in the file.
type instanceEntry struct {
	Addr     string `json:"addr"`
	Version  string `json:"version"`
	Instance int    `json:"instance"`
}

// parseRoutes reads the routes file's bytes: unknown fields, trailing data
// and invalid entries are errors. It does not know the catalog.
func parseRoutes(data []byte) (*routesFile, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("not a routes object: the file must hold one JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f routesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a routes object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the routes object")
	}
	ids := make([]string, 0, len(f.Models))
	for id := range f.Models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := f.Models[id].check(); err != nil {
			return nil, fmt.Errorf("model %q: %w", id, err)
		}
	}
	return &f, nil
}

// check validates one model's entry: every address host:port and distinct,
// versions fit for a header, instance numbers not negative.
func (e routeEntry) check() error {
	if err := e.instanceEntry.check(); err != nil {
		return err
	}
	if len(e.Draining) > maxDraining {
		return fmt.Errorf("%d draining instances, over the limit of %d", len(e.Draining), maxDraining)
	}
	seen := map[string]bool{e.Addr: true}
	for i, d := range e.Draining {
		if err := d.check(); err != nil {
			return fmt.Errorf("draining[%d]: %w", i, err)
		}
		if seen[d.Addr] {
			return fmt.Errorf("draining[%d]: address %s is listed twice", i, d.Addr)
		}
		seen[d.Addr] = true
	}
	return nil
}

func (e instanceEntry) check() error {
	if err := checkAddr(e.Addr); err != nil {
		return err
	}
	if err := checkVersion(e.Version); err != nil {
		return err
	}
	if e.Instance < 0 {
		return fmt.Errorf("instance %d is negative", e.Instance)
	}
	return nil
}

// checkAddr accepts host:port where host is an IP address (no zone) or a
// DNS name, and port a decimal number from 1 to 65535: nothing a URL
// would read as more than a host and port.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port: %v", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
		return fmt.Errorf("address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return fmt.Errorf("address %q: an IPv6 zone is not supported", addr)
		}
		return nil
	}
	if !dnsName(host) {
		return fmt.Errorf("address %q: host %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// dnsName reports whether s is a host name: dot-separated labels of
// letters, digits and '-', none empty or starting or ending with '-'.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			label++
		case c == '-':
			if label == 0 || i+1 == len(s) || s[i+1] == '.' {
				return false
			}
			label++
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
		default:
			return false
		}
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// checkVersion accepts "" (no version) or up to maxVersion printable ASCII
// characters without surrounding spaces: the value goes out as a header.
func checkVersion(v string) error {
	if len(v) > maxVersion {
		return fmt.Errorf("version of %d bytes is over the limit of %d", len(v), maxVersion)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ' ' && (i == 0 || i == len(v)-1) {
			return fmt.Errorf("version %q may hold only printable ASCII, without leading or trailing spaces", v)
		}
	}
	return nil
}

// instance is one model-server process the gateway sends requests to.
// Immutable once built.
type instance struct {
	addr string
	// version and number are the routes file's; "" and 0 for a catalog
	// address.
	version string
	number  int
	// versionHeader is the X-Mortred-Version value of its answers (shared:
	// net/http only reads header values); nil without a version.
	versionHeader []string
}

func newInstance(e instanceEntry) instance {
	in := instance{addr: e.Addr, version: e.Version, number: e.Instance}
	if e.Version != "" {
		in.versionHeader = []string{e.Version}
	}
	return in
}

// route is where a model's requests go: the active instance, and the
// draining ones asked for jobs the active one does not know. A request
// loads its model's route once and uses it throughout; a reload publishes
// a new route, never changes one.
type route struct {
	active   instance
	draining []instance
	// fromFile: the routes file lists the model (else active is the
	// catalog address).
	fromFile bool
}

// catalogRoute is a model's route without a routes file entry.
func catalogRoute(u *Upstream) *route {
	return &route{active: instance{addr: u.Addr}}
}

func newRoute(e routeEntry) *route {
	rt := &route{active: newInstance(e.instanceEntry), fromFile: true}
	for _, d := range e.Draining {
		rt.draining = append(rt.draining, newInstance(d))
	}
	return rt
}

// ReloadRoutes reads the routes file again (SIGHUP calls it) and switches
// the models it lists to their new instances; models it no longer lists
// go back to their catalog addresses. A missing file means no routes, as
// at start. On failure the routes in force stay, gateway_routes_reload_failed
// is logged with the reason, and mortred_gateway_routes_reloads_total
// counts each outcome. Without Config.RoutesFile it does nothing.
func (g *Gateway) ReloadRoutes() error {
	if g.cfg.RoutesFile == "" {
		return nil
	}
	err := g.loadRoutes()
	if err != nil {
		g.metrics.routesReloads.WithLabelValues("error").Inc()
		g.log.Error("gateway_routes_reload_failed", "file", g.cfg.RoutesFile, "err", err.Error(),
			"kept_generation", g.routesGeneration.Load())
		return err
	}
	g.metrics.routesReloads.WithLabelValues("ok").Inc()
	return nil
}

// loadRoutes reads, checks and publishes the routes file. Loads are
// serialized, so an older read never replaces a newer one.
func (g *Gateway) loadRoutes() error {
	g.routesMu.Lock()
	defer g.routesMu.Unlock()
	f, err := readRoutes(g.cfg.RoutesFile)
	if err != nil {
		return err
	}
	routes := make(map[*Upstream]*route, len(f.Models))
	ids := make([]string, 0, len(f.Models))
	for id := range f.Models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		u := g.byID[id]
		if u == nil {
			g.log.Warn("gateway_routes_unknown_model", "file", g.cfg.RoutesFile, "model", id,
				"effect", "ignored: the id is not in this gateway's catalog")
			continue
		}
		routes[u] = newRoute(f.Models[id])
	}
	for u, st := range g.up {
		rt := routes[u]
		if rt == nil {
			rt = catalogRoute(u)
		}
		st.route.Store(rt)
	}
	g.routesGeneration.Store(f.Generation)
	g.log.Info("gateway_routes_loaded", "file", g.cfg.RoutesFile, "generation", f.Generation, "models", len(routes))
	return nil
}

// readRoutes reads and parses the file at path; a file that does not exist
// is an empty set of routes. Errors name the file.
func readRoutes(path string) (*routesFile, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &routesFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("routes file %s: %w", path, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxRoutesFile+1))
	if err != nil {
		return nil, fmt.Errorf("routes file %s: %w", path, err)
	}
	if len(data) > maxRoutesFile {
		return nil, fmt.Errorf("routes file %s: over %d bytes", path, maxRoutesFile)
	}
	f, err := parseRoutes(data)
	if err != nil {
		return nil, fmt.Errorf("routes file %s: %w", path, err)
	}
	return f, nil
}
