package daemon

import (
	"net/netip"
	"reflect"
	"testing"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range s {
		out = append(out, netip.MustParsePrefix(v))
	}
	return out
}

func TestSelect(t *testing.T) {
	lo := Iface{Name: "lo", Index: 1, Up: true, Loopback: true, Prefixes: pfx("127.0.0.1/8", "::1/128")}
	eth0 := Iface{Name: "eth0", Index: 2, Up: true, Broadcast: true, Prefixes: pfx("fe80::1/64", "fd00::2/64", "192.168.1.11/24")}
	fab := Iface{Name: "ib0", Index: 3, Up: true, Broadcast: true, Prefixes: pfx("10.100.0.1/16")}
	down := Iface{Name: "eth1", Index: 4, Up: false, Broadcast: true, Prefixes: pfx("172.16.0.1/24")}
	all := []Iface{lo, eth0, fab, down}
	tests := []struct {
		name   string
		ifaces []Iface
		globs  []string
		addrs  []string
		bcast  []string
	}{
		{"default takes up non-loopback in index order", all, nil,
			[]string{"192.168.1.11", "fd00::2", "10.100.0.1"}, []string{"192.168.1.255", "10.100.255.255"}},
		{"globs rank", all, []string{"ib*", "eth*"},
			[]string{"10.100.0.1", "192.168.1.11", "fd00::2"}, []string{"10.100.255.255", "192.168.1.255"}},
		{"loopback only when named", all, []string{"lo"}, []string{"127.0.0.1", "::1"}, nil},
		{"loopback named after eth", all, []string{"eth0", "lo"}, []string{"192.168.1.11", "fd00::2", "127.0.0.1", "::1"}, []string{"192.168.1.255"}},
		{"loopback when nothing else is up", []Iface{lo, down}, nil, []string{"127.0.0.1", "::1"}, nil},
		{"no match", all, []string{"wlan*"}, nil, nil},
		{"first matching glob wins, index order within a rank", all, []string{"*", "ib0"}, []string{"127.0.0.1", "::1", "192.168.1.11", "fd00::2", "10.100.0.1"}, []string{"192.168.1.255", "10.100.255.255"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sel := Select(tc.ifaces, tc.globs)
			if got := RankedAddrs(sel); !reflect.DeepEqual(got, tc.addrs) {
				t.Errorf("addrs = %v, want %v", got, tc.addrs)
			}
			var bc []string
			for _, s := range sel {
				for _, b := range s.Broadcasts {
					bc = append(bc, b.String())
				}
			}
			if !reflect.DeepEqual(bc, tc.bcast) {
				t.Errorf("broadcasts = %v, want %v", bc, tc.bcast)
			}
		})
	}
}
