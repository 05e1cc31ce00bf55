package daemon

import (
	"net"
	"net/netip"
	"path"
	"sort"
)

// Iface is what address ranking needs to know about one network interface.
type Iface struct {
	Name     string
	Index    int
	Up       bool
	Loopback bool
	// Broadcast reports whether the interface can send IPv4 broadcasts.
	Broadcast bool
	// Prefixes are the interface's addresses with their prefix lengths.
	Prefixes []netip.Prefix
}

// Selected is one interface chosen for announcing, with its rank-ordered
// addresses and the IPv4 broadcast addresses to send to.
type Selected struct {
	Name       string
	Addrs      []netip.Addr
	Broadcasts []netip.Addr
}

// SystemIfaces lists the machine's interfaces.
func SystemIfaces() ([]Iface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]Iface, 0, len(list))
	for _, ni := range list {
		ifc := Iface{Name: ni.Name, Index: ni.Index,
			Up:        ni.Flags&net.FlagUp != 0,
			Loopback:  ni.Flags&net.FlagLoopback != 0,
			Broadcast: ni.Flags&net.FlagBroadcast != 0}
		addrs, err := ni.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			ifc.Prefixes = append(ifc.Prefixes, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, ifc)
	}
	return out, nil
}

// Select picks and ranks interfaces. With globs, an up interface matching
// glob i gets rank i (the first matching glob counts) and loopback is
// included only when a glob names it; without globs every up non-loopback
// interface is taken in index order, and loopback only when nothing else is
// up. Link-local addresses are left out: they mean nothing off the link and
// need a zone a URL cannot carry.
func Select(ifaces []Iface, globs []string) []Selected {
	type ranked struct {
		rank int
		ifc  Iface
	}
	var picked []ranked
	for _, ifc := range ifaces {
		if !ifc.Up || len(usable(ifc.Prefixes)) == 0 {
			continue
		}
		if len(globs) == 0 {
			if !ifc.Loopback {
				picked = append(picked, ranked{0, ifc})
			}
			continue
		}
		for i, g := range globs {
			if ok, _ := path.Match(g, ifc.Name); ok {
				picked = append(picked, ranked{i, ifc})
				break
			}
		}
	}
	if len(picked) == 0 && len(globs) == 0 {
		for _, ifc := range ifaces {
			if ifc.Up && ifc.Loopback && len(usable(ifc.Prefixes)) > 0 {
				picked = append(picked, ranked{0, ifc})
			}
		}
	}
	sort.SliceStable(picked, func(i, j int) bool {
		if picked[i].rank != picked[j].rank {
			return picked[i].rank < picked[j].rank
		}
		return picked[i].ifc.Index < picked[j].ifc.Index
	})
	out := make([]Selected, 0, len(picked))
	for _, p := range picked {
		s := Selected{Name: p.ifc.Name}
		prefixes := usable(p.ifc.Prefixes)
		// IPv4 first: it is what most routers share a subnet on.
		sort.SliceStable(prefixes, func(i, j int) bool { return prefixes[i].Addr().Is4() && !prefixes[j].Addr().Is4() })
		for _, pf := range prefixes {
			s.Addrs = append(s.Addrs, pf.Addr())
			if p.ifc.Broadcast && !p.ifc.Loopback && pf.Addr().Is4() && pf.Bits() < 31 {
				s.Broadcasts = append(s.Broadcasts, broadcastOf(pf))
			}
		}
		out = append(out, s)
	}
	return out
}

// RankedAddrs flattens the selection into the node's address ranking,
// without duplicates.
func RankedAddrs(sel []Selected) []string {
	seen := map[netip.Addr]bool{}
	var out []string
	for _, s := range sel {
		for _, a := range s.Addrs {
			if !seen[a] {
				seen[a] = true
				out = append(out, a.String())
			}
		}
	}
	return out
}

func usable(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		a := p.Addr()
		if a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() {
			continue
		}
		out = append(out, p)
	}
	return out
}

func broadcastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
