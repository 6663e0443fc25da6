package director

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// xdpPlane is the director's one XDP program, shared by its dataplane-xdp
// services. A loop copies the services' pools (weights after health checks
// and ctl) into the kernel, learns real servers' MACs from the neighbour
// table, reads the counters back and expires idle flows.
type xdpPlane struct {
	d       *Director
	dp      *xdp.Dataplane
	ifname  string
	ifindex int
	mode    string

	mu    sync.Mutex
	svcs  map[*service]bool
	added map[netip.Addr]bool // VIPs this plane put on the interface

	// HA (ha.go): with an ha block the VIPs stay off the interface and
	// the program answers ARP for them (haVIPs, as last set) with mac0,
	// the interface's MAC, while internal/ha (node) keeps its fence open.
	ha       bool
	mac0     net.HardwareAddr
	haVIPs   []netip.Addr
	node     haNode
	events   *xdp.Events
	haCancel context.CancelFunc // ends the node's context, after Close

	macMu  sync.Mutex
	macs   map[netip.Addr]net.HardwareAddr
	nudged map[netip.Addr]time.Time

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// syncEvery bounds how long a health or weight change takes to reach the
// kernel when nothing kicks the loop; expireEvery paces the connection
// table's walk.
const (
	syncEvery   = 250 * time.Millisecond
	expireEvery = 2 * time.Second
)

func startXDPPlane(d *Director, cfg *config.Director) (*xdpPlane, error) {
	ifc, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q (for dataplane xdp): %w", cfg.Interface, err)
	}
	dp, err := xdp.Load(xdp.Options{ConnTableSize: cfg.XDPConns}, d.log)
	if err != nil {
		return nil, err
	}
	if cfg.HA != nil {
		// Fenced before it is attached: the program forwards nothing for
		// the VIPs until internal/ha opens the fence (active-active:
		// forwards, without answering ARP).
		if err := dp.SetHA(haMode(cfg.HA), 0); err != nil {
			dp.Close()
			return nil, fmt.Errorf("ha: setting the XDP program's HA mode: %w", err)
		}
		if err := dp.SetARP(ifc.HardwareAddr, nil); err != nil {
			dp.Close()
			return nil, fmt.Errorf("ha: ARP answers on %s: %w", cfg.Interface, err)
		}
	}
	mode, err := dp.Attach(cfg.Interface, cfg.XDPMode)
	if err != nil {
		dp.Close()
		return nil, err
	}
	d.log.Info("XDP dataplane attached", "interface", cfg.Interface, "mode", mode, "ha", cfg.HA != nil)
	p := &xdpPlane{d: d, dp: dp, ifname: cfg.Interface, ifindex: ifc.Index, mode: mode,
		svcs: map[*service]bool{}, added: map[netip.Addr]bool{},
		ha: cfg.HA != nil, mac0: ifc.HardwareAddr,
		macs: map[netip.Addr]net.HardwareAddr{}, nudged: map[netip.Addr]time.Time{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// close detaches the program; flows through it stop. With HA the group is
// left first (a handover, if this director is active).
func (p *xdpPlane) close() {
	p.closeHA()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	for a := range p.added {
		p.delVIP(a)
	}
	p.mu.Unlock()
	if err := p.dp.Close(); err != nil {
		p.d.log.Warn("closing the XDP dataplane", "err", err)
	}
}

func (p *xdpPlane) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// xdpService is one service's handle on the plane.
type xdpService struct {
	p *xdpPlane
	s *service
}

// add starts carrying a service: its VIP goes on the interface (so the
// director answers ARP for it) and into the kernel's tables. With HA the
// VIP stays off the interface: the program answers ARP for it while its
// fence is open.
func (p *xdpPlane) add(s *service) (dataplane, error) {
	cfg := s.cfg.Load()
	if err := p.push(s); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ha {
		p.svcs[s] = true
		if err := p.haVIPsLocked(); err != nil {
			delete(p.svcs, s)
			p.dp.RemoveService(cfg.VIP, cfg.Protocol)
			return nil, err
		}
		p.poke()
		return &xdpService{p, s}, nil
	}
	if err := p.addVIP(cfg.VIP.Addr()); err != nil {
		p.dp.RemoveService(cfg.VIP, cfg.Protocol)
		return nil, err
	}
	p.svcs[s] = true
	p.poke()
	return &xdpService{p, s}, nil
}

func (x *xdpService) close() {
	p, cfg := x.p, x.s.cfg.Load()
	p.mu.Lock()
	delete(p.svcs, x.s)
	still := false
	for o := range p.svcs {
		still = still || o.cfg.Load().VIP.Addr() == cfg.VIP.Addr()
	}
	if !still && p.added[cfg.VIP.Addr()] {
		p.delVIP(cfg.VIP.Addr())
	}
	if p.ha {
		if err := p.haVIPsLocked(); err != nil {
			p.d.log.Warn("ha: removing a VIP", "service", cfg.Name, "err", err)
		}
	}
	p.mu.Unlock()
	if err := p.dp.RemoveService(cfg.VIP, cfg.Protocol); err != nil {
		p.d.log.Warn("removing an XDP service", "service", cfg.Name, "err", err)
	}
}

func hostPrefix(a netip.Addr) *net.IPNet {
	bits := 32
	if a.Is6() {
		bits = 128
	}
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}
}

// addVIP puts the VIP on the interface unless it is there already.
func (p *xdpPlane) addVIP(a netip.Addr) error {
	if p.added[a] {
		return nil
	}
	l, err := netlink.LinkByIndex(p.ifindex)
	if err != nil {
		return err
	}
	have, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, h := range have {
		if ip, ok := netip.AddrFromSlice(h.IP); ok && ip.Unmap() == a {
			return nil // the operator's: leave it
		}
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: hostPrefix(a)}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding VIP %s to %s: %w", a, p.ifname, err)
	}
	p.added[a] = true
	return nil
}

func (p *xdpPlane) delVIP(a netip.Addr) {
	delete(p.added, a)
	if l, err := netlink.LinkByIndex(p.ifindex); err == nil {
		netlink.AddrDel(l, &netlink.Addr{IPNet: hostPrefix(a)})
	}
}

func (p *xdpPlane) loop() {
	defer close(p.done)
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	lastExpire := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		case <-p.kick:
		}
		if err := p.dp.Tick(); err != nil {
			p.d.log.Warn("XDP: clock", "err", err)
		}
		p.learnMACs()
		p.mu.Lock()
		svcs := make([]*service, 0, len(p.svcs))
		for s := range p.svcs {
			svcs = append(svcs, s)
		}
		p.mu.Unlock()
		for _, s := range svcs {
			if err := p.push(s); err != nil {
				p.d.log.Warn("XDP: programming a service", "service", s.cfg.Load().Name, "err", err)
			}
			p.pull(s)
		}
		if time.Since(lastExpire) >= expireEvery {
			lastExpire = time.Now()
			if _, err := p.dp.Expire(); err != nil {
				p.d.log.Warn("XDP: expiring connections", "err", err)
			}
		}
	}
}

// push writes a service's pool as it stands (health, drains, weights).
func (p *xdpPlane) push(s *service) error {
	cfg := s.cfg.Load()
	xs := xdp.Service{VIP: cfg.VIP, Protocol: cfg.Protocol, Scheduler: cfg.Scheduler,
		Timeouts: xdp.Timeouts{TCP: cfg.TCPTimeout, TCPFin: cfg.TCPFinTimeout, UDP: cfg.UDPTimeout}}
	s.mu.Lock()
	for _, r := range s.reals {
		ap, err := netip.ParseAddrPort(r.addr)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		xs.Servers = append(xs.Servers, xdp.Real{Addr: ap.Addr(), Weight: r.weight(), MAC: p.mac(ap.Addr())})
	}
	s.mu.Unlock()
	return p.dp.SetService(xs)
}

// pull copies the kernel's counters into the service's real servers, where
// the admin API and /metrics read them.
func (p *xdpPlane) pull(s *service) {
	cfg := s.cfg.Load()
	st, err := p.dp.Stats(cfg.VIP, cfg.Protocol)
	if err != nil {
		return
	}
	s.newConns.Store(int64(st.Conns))
	var drops uint64
	for _, n := range st.Drops {
		drops += n
	}
	s.drops.Store(int64(drops))
	s.xdp.Store(&XDPCounters{Packets: st.Packets, Bytes: st.Bytes, Drops: maps.Clone(st.Drops), Mode: p.mode, Interface: p.ifname})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range st.Servers {
		for _, r := range s.reals {
			if ap, err := netip.ParseAddrPort(r.addr); err == nil && ap.Addr() == ss.Addr && !ss.Retired {
				r.active.Store(ss.Active)
				r.inactive.Store(ss.Inactive)
				r.conns.Store(int64(ss.Conns))
				r.bytesIn.Store(int64(ss.Bytes))
				r.packets.Store(int64(ss.Packets))
			}
		}
	}
}

// XDPCounters are a service's kernel counters (dataplane xdp), as last read.
type XDPCounters struct {
	Mode      string            `json:"mode"`
	Interface string            `json:"interface"`
	Packets   uint64            `json:"packets"`
	Bytes     uint64            `json:"bytes"`
	Drops     map[string]uint64 `json:"drops"`
}

// mac is a real server's MAC as last learnt; nil (its flows wait) when the
// neighbour table has none yet.
func (p *xdpPlane) mac(a netip.Addr) net.HardwareAddr {
	p.macMu.Lock()
	defer p.macMu.Unlock()
	m := p.macs[a]
	if m == nil && time.Since(p.nudged[a]) > time.Second {
		p.nudged[a] = time.Now()
		go nudge(a)
	}
	return m
}

// learnMACs reads the interface's neighbour table.
func (p *xdpPlane) learnMACs() {
	ns, err := netlink.NeighList(p.ifindex, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	next := map[netip.Addr]net.HardwareAddr{}
	for _, n := range ns {
		if len(n.HardwareAddr) != 6 || n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED|netlink.NUD_NOARP) != 0 {
			continue
		}
		if a, ok := netip.AddrFromSlice(n.IP); ok {
			next[a.Unmap()] = n.HardwareAddr
		}
	}
	p.macMu.Lock()
	p.macs = next
	p.macMu.Unlock()
}

// nudge makes the kernel resolve a neighbour (ARP, or neighbour discovery
// for IPv6) by sending it one datagram to the discard port.
func nudge(a netip.Addr) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 9)))
	if err != nil {
		return
	}
	c.Write([]byte{0})
	c.Close()
}
