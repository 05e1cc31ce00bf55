package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// announcer refreshes the node's address ranking and sends one signed (when
// keyed) announcement per interval to the broadcast address of every
// selected interface and to every MENTAT_ANNOUNCE_ADDR.
type announcer struct {
	d      *Daemon
	ifaces func() ([]Iface, error)
	udp4   *net.UDPConn
	udp6   *net.UDPConn // nil when the host has no IPv6
	seq    int64
	once   logx.Once
}

func newAnnouncer(d *Daemon, ifaces func() ([]Iface, error)) (*announcer, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", ":0")
	if err != nil {
		return nil, err
	}
	a := &announcer{d: d, ifaces: ifaces, udp4: pc.(*net.UDPConn)}
	if pc6, err := net.ListenPacket("udp6", "[::]:0"); err == nil {
		a.udp6 = pc6.(*net.UDPConn)
	}
	return a, nil
}

func (a *announcer) close() {
	a.udp4.Close()
	if a.udp6 != nil {
		a.udp6.Close()
	}
}

// run refreshes and announces at once, then every interval, until ctx ends.
func (a *announcer) run(ctx context.Context) {
	t := time.NewTicker(a.d.cfg.AnnounceInterval)
	defer t.Stop()
	for {
		a.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *announcer) tick(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			a.d.log.Error("announce_panic", "panic", p)
		}
	}()
	list, err := a.ifaces()
	if err != nil {
		a.once.Log(a.d.log, slog.LevelWarn, "ifaces", "interfaces_unreadable", "error", err)
		return
	}
	sel := Select(list, a.d.cfg.AnnounceIfaces)
	addrs := RankedAddrs(sel)
	if len(addrs) == 0 {
		a.once.Log(a.d.log, slog.LevelWarn, "noaddrs", "announce_no_addresses",
			"ifaces", a.d.cfg.AnnounceIfaces, "hint", "no up interface matches MENTAT_ANNOUNCE_IFACES")
	}
	a.d.reg.setAddrs(addrs)
	a.send(ctx, sel)
}

// payload builds the next announcement; the http host is the bind host when
// that is a specific address, else node_ip.
func (a *announcer) payload() wire.Announcement {
	nodeID, nodeIP, addrs, _ := a.d.reg.node()
	host := nodeIP
	if ip, err := netip.ParseAddr(a.d.cfg.HTTPHost); err == nil && !ip.IsUnspecified() {
		host = ip.String()
	}
	a.seq++
	return wire.Announcement{Proto: wire.Proto, NodeID: nodeID, Universe: a.d.cfg.Universe,
		HTTP: net.JoinHostPort(host, strconv.Itoa(a.d.httpPort())), Addrs: addrs,
		BootID: a.d.bootID, Seq: a.seq, T: time.Now().Unix()}
}

func (a *announcer) send(ctx context.Context, sel []Selected) {
	var dests []*net.UDPAddr
	if a.d.cfg.AnnouncePort != 0 {
		for _, s := range sel {
			for _, b := range s.Broadcasts {
				dests = append(dests, net.UDPAddrFromAddrPort(netip.AddrPortFrom(b, uint16(a.d.cfg.AnnouncePort))))
			}
		}
	}
	for _, hp := range a.d.cfg.AnnounceAddrs {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ua, err := resolveUDP(rctx, hp)
		cancel()
		if err != nil {
			a.once.Log(a.d.log, slog.LevelWarn, "resolve "+hp, "announce_addr_unresolved", "addr", hp, "error", err)
			continue
		}
		dests = append(dests, ua)
	}
	if len(dests) == 0 {
		return
	}
	p := a.payload()
	var b []byte
	for {
		var err error
		if b, err = wire.EncodeDatagram(p, a.d.cfg.Secret); err == nil {
			break
		}
		if len(p.Addrs) == 0 {
			a.once.Log(a.d.log, slog.LevelError, "encode", "announce_encode_failed", "error", err)
			return
		}
		// Too big: the lowest-ranked addresses go first.
		a.once.Log(a.d.log, slog.LevelWarn, "truncate", "announce_addrs_truncated", "error", err)
		p.Addrs = p.Addrs[:len(p.Addrs)-1]
	}
	for _, dst := range dests {
		conn := a.udp4
		if dst.IP.To4() == nil {
			conn = a.udp6
		}
		if conn == nil {
			continue
		}
		if _, err := conn.WriteToUDP(b, dst); err != nil {
			a.once.Log(a.d.log, slog.LevelWarn, "send "+dst.String(), "announce_send_failed", "dest", dst.String(), "error", err)
		}
	}
}

func resolveUDP(ctx context.Context, hostport string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip.Unmap(), uint16(n))), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ips[0].Unmap(), uint16(n))), nil
}
