package agent

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Listener is one LISTEN socket from /proc/net/tcp or /proc/net/tcp6.
type Listener struct {
	Addr netip.Addr
	Port int
}

// stateListen is TCP_LISTEN in the st column.
const stateListen = "0A"

// maxProcNetLines bounds how much of one file is read; a host with more
// sockets than this is not one a bind check should stall on.
const maxProcNetLines = 1 << 20

// ParseProcNet reads the text of /proc/net/tcp or /proc/net/tcp6 and returns
// its LISTEN rows. Addresses are hex, each 32-bit word little-endian: 8 hex
// digits for IPv4, 32 for IPv6; IPv4-mapped IPv6 addresses come back as
// IPv4. The header line and malformed rows are skipped; an error means the
// text could not be read at all.
func ParseProcNet(r io.Reader) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 0; sc.Scan(); n++ {
		if n >= maxProcNetLines {
			return out, fmt.Errorf("more than %d lines", maxProcNetLines)
		}
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st ...
		if len(f) < 4 || f[3] != stateListen || !strings.HasSuffix(f[0], ":") {
			continue
		}
		l, ok := parseLocal(f[1])
		if ok {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// parseLocal reads "0100007F:1F90" or the 32-digit IPv6 form.
func parseLocal(s string) (Listener, bool) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok || len(hexPort) != 4 {
		return Listener{}, false
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return Listener{}, false
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return Listener{}, false
	}
	// Each 32-bit word is in host (little-endian) order.
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return Listener{Addr: addr.Unmap(), Port: int(port)}, true
}

// BindFinding is what the bind check concludes about one port.
type BindFinding struct {
	// Listening: some socket listens on the port.
	Listening bool
	// Wide: one of them binds the wildcard address (0.0.0.0 or ::).
	Wide bool
	// Addrs are the specific addresses bound, sorted, when not Wide.
	Addrs []string
}

// Note is the service note for the finding: empty when wide (or not
// listening), else "bound to <addrs> only".
func (f BindFinding) Note() string {
	if !f.Listening || f.Wide {
		return ""
	}
	return "bound to " + strings.Join(f.Addrs, ",") + " only"
}

// Find reduces listeners to the finding for port.
func Find(ls []Listener, port int) BindFinding {
	var f BindFinding
	set := map[netip.Addr]bool{}
	for _, l := range ls {
		if l.Port != port {
			continue
		}
		f.Listening = true
		if l.Addr.IsUnspecified() {
			f.Wide = true
		}
		set[l.Addr] = true
	}
	if f.Wide {
		return f
	}
	addrs := make([]netip.Addr, 0, len(set))
	for a := range set {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range addrs {
		f.Addrs = append(f.Addrs, a.String())
	}
	return f
}
