// Package xdp is the director's dataplane in the kernel: LVS direct routing
// (VS/DR) as an XDP program (bpf/balancer.c). This side loads the program,
// attaches it to an interface, writes services, pools, weights, scheduler
// tables and real servers' MACs into its maps, expires idle connections with
// IPVS's timeouts and reads its counters.
//
// A real server has a slot in its service; the connection table names slots,
// not pool positions, so pool and weight changes never move an established
// flow. A server removed from the pool keeps its slot (and its MAC) until its
// last connection has ended or expired.
package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/corral-cluster/corral/internal/sched"
)

// Sizes from bpf/consts.h.
const (
	MaxServices = 64
	MaxReals    = 64
	mhSize      = 65537
	posNone     = 0xff
)

const (
	connEstablished = 1
	connFin         = 2
	connUDP         = 3
	flagSchedNonSYN = 1
	realAvailable   = 1
)

// DropReasons names the drop counters, in bpf/consts.h's order.
var DropReasons = []string{"no_real", "no_conn", "no_mac", "conn_table"}

var schedKinds = map[string]uint32{"rr": 1, "wrr": 2, "lc": 3, "wlc": 4, "sed": 5, "nq": 6, "sh": 7, "mh": 8}

// HasScheduler reports whether the kernel dataplane has the named scheduler
// (config keeps the same list, to stay free of BPF dependencies).
func HasScheduler(name string) bool { _, ok := schedKinds[name]; return ok }

// Timeouts end idle connections, as IPVS's defaults (ipvsadm --set).
type Timeouts struct {
	TCP    time.Duration // established
	TCPFin time.Duration // after the client's FIN or RST
	UDP    time.Duration
}

// DefaultTimeouts are IPVS's: 900 s, 120 s, 300 s.
var DefaultTimeouts = Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}

// Service is one virtual service as the kernel dataplane carries it.
type Service struct {
	VIP       netip.AddrPort
	Protocol  string // tcp or udp
	Scheduler string
	Timeouts  Timeouts
	Servers   []Real // in configuration order: the schedulers' positions
}

// Real is one real server. Direct routing keeps the VIP's port, so a real
// server is an address (on the director's link) and a MAC.
type Real struct {
	Addr   netip.Addr
	Weight int              // 0: no new flows (down or draining)
	MAC    net.HardwareAddr // nil: not known yet (its flows are dropped)
}

// Options tune Load.
type Options struct {
	// ConnTableSize is the connection table's size (default 262144).
	ConnTableSize int
}

// Dataplane is the loaded program and its maps.
type Dataplane struct {
	objs balancerObjects
	log  *slog.Logger

	mu       sync.Mutex
	services map[svcKey]*svcState
	ids      [MaxServices]bool
	link     link.Link
	ifname   string
	mode     string
	ports    [65536 / 64]uint64 // vip_ports as last written
	mac      net.HardwareAddr   // config.mac

	// High availability (sync.go), kept here so that every rewrite of
	// the config (Tick) keeps them.
	haMode HAMode
	fence  uint64           // CLOCK_MONOTONIC ns
	arpMAC net.HardwareAddr // config.arp_mac
	events *Events          // the event stream, when started
}

type svcKey struct {
	vip   netip.AddrPort
	proto uint8
}

type svcState struct {
	id      uint32
	cfg     Service
	kind    uint32
	slots   map[netip.Addr]uint32 // servers in the pool
	retired map[netip.Addr]uint32 // removed, with connections left
	mhBuf   uint32
	mhFor   string // the pool the live Maglev table was built for
}

// Load loads the program and its maps into the kernel (needs root or
// CAP_BPF+CAP_NET_ADMIN). Nothing is attached yet.
func Load(opts Options, log *slog.Logger) (*Dataplane, error) {
	if log == nil {
		log = slog.Default()
	}
	spec, err := loadBalancer()
	if err != nil {
		return nil, err
	}
	if opts.ConnTableSize > 0 {
		spec.Maps["conns"].MaxEntries = uint32(opts.ConnTableSize)
	}
	d := &Dataplane{log: log, services: map[svcKey]*svcState{}}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading the XDP program: %+v", ve)
		}
		return nil, fmt.Errorf("loading the XDP program: %w", err)
	}
	if err := d.Tick(); err != nil {
		d.objs.Close()
		return nil, err
	}
	return d, nil
}

// Tick writes the current second into the program's clock, which stamps
// flows as they pass; the director calls it several times a second.
func (d *Dataplane) Tick() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writeConfig()
}

func (d *Dataplane) writeConfig() error {
	var c balancerDpConfig
	copy(c.Mac[:], d.mac)
	c.Now = nowSeconds()
	c.HaMode = uint32(d.haMode)
	c.Fence = d.fence
	copy(c.ArpMac[:], d.arpMAC)
	if d.events != nil {
		c.Events = 1
	}
	return d.objs.Config.Put(uint32(0), &c)
}

// Program is the balancer program (for test runs and benchmarks).
func (d *Dataplane) Program() *ebpf.Program { return d.objs.Balancer }

// Attach attaches the program to an interface: mode "native" (driver),
// "generic" (skb) or "auto" (native, else generic with a warning). It
// returns the mode it got.
func (d *Dataplane) Attach(ifname, mode string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.link != nil {
		return "", fmt.Errorf("already attached to %s", d.ifname)
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return "", fmt.Errorf("interface %q: %w", ifname, err)
	}
	try := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: d.objs.Balancer, Interface: ifc.Index, Flags: flags})
	}
	var l link.Link
	switch mode {
	case "native":
		l, err = try(link.XDPDriverMode)
	case "generic":
		l, err = try(link.XDPGenericMode)
	case "", "auto":
		mode = "native"
		if l, err = try(link.XDPDriverMode); err != nil {
			d.log.Warn("native XDP refused; falling back to generic (slower: it runs after the skb is built)", "interface", ifname, "err", err)
			mode = "generic"
			l, err = try(link.XDPGenericMode)
		}
	default:
		return "", fmt.Errorf("xdp mode %q: want auto, native or generic", mode)
	}
	if err != nil {
		return "", fmt.Errorf("attaching XDP (%s) to %s: %w", mode, ifname, err)
	}
	d.link, d.ifname, d.mode = l, ifname, mode
	if len(ifc.HardwareAddr) == 6 {
		d.setMAC(ifc.HardwareAddr)
	}
	return mode, nil
}

// SetMAC sets the source MAC of forwarded frames (Attach sets the
// interface's own).
func (d *Dataplane) SetMAC(mac net.HardwareAddr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.setMAC(mac)
}

func (d *Dataplane) setMAC(mac net.HardwareAddr) error {
	d.mac = append(net.HardwareAddr(nil), mac...)
	return d.writeConfig()
}

// Close detaches the program and frees the maps.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	e := d.events
	d.mu.Unlock()
	if e != nil {
		e.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if d.link != nil {
		err = d.link.Close()
		d.link = nil
	}
	return errors.Join(err, d.objs.Close())
}

func protoNum(p string) (uint8, error) {
	switch p {
	case "tcp", "":
		return unix.IPPROTO_TCP, nil
	case "udp":
		return unix.IPPROTO_UDP, nil
	}
	return 0, fmt.Errorf("protocol %q: want tcp or udp", p)
}

func vipKey(k svcKey) balancerVipKey {
	var v balancerVipKey
	a := k.vip.Addr().Unmap().As16()
	for i := range v.Addr {
		v.Addr[i] = binary.NativeEndian.Uint32(a[i*4:])
	}
	var port [2]byte // network order in memory
	binary.BigEndian.PutUint16(port[:], k.vip.Port())
	v.Port = binary.NativeEndian.Uint16(port[:])
	v.Proto = k.proto
	return v
}

// SetService adds a service or changes its pool, weights and scheduler.
// Established flows stay on their servers.
func (d *Dataplane) SetService(s Service) error {
	proto, err := protoNum(s.Protocol)
	if err != nil {
		return err
	}
	kind, ok := schedKinds[s.Scheduler]
	if !ok {
		return fmt.Errorf("scheduler %q is not in the XDP dataplane (it has rr, wrr, lc, wlc, sed, nq, sh, mh)", s.Scheduler)
	}
	if len(s.Servers) > MaxReals {
		return fmt.Errorf("%d real servers: the XDP dataplane takes at most %d per service", len(s.Servers), MaxReals)
	}
	if s.Timeouts == (Timeouts{}) {
		s.Timeouts = DefaultTimeouts
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := svcKey{netip.AddrPortFrom(s.VIP.Addr().Unmap(), s.VIP.Port()), proto}
	st := d.services[k]
	if st != nil && reflect.DeepEqual(st.cfg, s) {
		return nil // the director pushes its pools several times a second
	}
	if st == nil {
		id := -1
		for i, used := range d.ids {
			if !used {
				id = i
				break
			}
		}
		if id < 0 {
			return fmt.Errorf("the XDP dataplane carries at most %d services", MaxServices)
		}
		st = &svcState{id: uint32(id), slots: map[netip.Addr]uint32{}, retired: map[netip.Addr]uint32{}}
		if err := d.resetService(st.id); err != nil {
			return err
		}
		d.ids[id] = true
		d.services[k] = st
	}
	if st.kind != kind {
		if err := d.objs.SchedStates.Put(st.id, &balancerSchedState{Last: -1}); err != nil {
			return err
		}
		st.kind = kind
	}
	// A copy: the next call is compared with it, and the caller may reuse
	// its slices.
	s.Servers = slices.Clone(s.Servers)
	for i := range s.Servers {
		s.Servers[i].MAC = slices.Clone(s.Servers[i].MAC)
	}
	st.cfg = s
	if err := d.assignSlots(st); err != nil {
		return err
	}
	if err := d.writeService(k, st); err != nil {
		return err
	}
	return d.writePorts()
}

// writePorts updates the bitmap of ports some service listens on.
func (d *Dataplane) writePorts() error {
	var next [len(d.ports)]uint64
	for k := range d.services {
		p := k.vip.Port()
		next[p/64] |= 1 << (p % 64)
	}
	for i := range next {
		if next[i] != d.ports[i] {
			if err := d.objs.VipPorts.Put(uint32(i), next[i]); err != nil {
				return err
			}
			d.ports[i] = next[i]
		}
	}
	return nil
}

// resetService clears a service id's per-slot state before (re)use.
func (d *Dataplane) resetService(id uint32) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zeroStats := make([]balancerRealStats, ncpu)
	for slot := uint32(0); slot < MaxReals; slot++ {
		if err := d.clearSlot(id, slot, zeroStats); err != nil {
			return err
		}
	}
	return d.objs.SvcStats.Put(id, make([]balancerSvcStats, ncpu))
}

func (d *Dataplane) clearSlot(id, slot uint32, zeroStats []balancerRealStats) error {
	idx := id*MaxReals + slot
	return errors.Join(
		d.objs.Reals.Put(idx, &balancerReal{}),
		d.objs.RealConns.Put(idx, &balancerRealConns{}),
		d.objs.RealExpired.Put(idx, &balancerRealConns{}),
		d.objs.RealStats.Put(idx, zeroStats))
}

// assignSlots gives new servers free slots and retires removed ones.
func (d *Dataplane) assignSlots(st *svcState) error {
	in := map[netip.Addr]bool{}
	for _, r := range st.cfg.Servers {
		in[r.Addr.Unmap()] = true
	}
	for a, slot := range st.slots {
		if !in[a] {
			delete(st.slots, a)
			st.retired[a] = slot
		}
	}
	used := map[uint32]bool{}
	for _, s := range st.slots {
		used[s] = true
	}
	for _, s := range st.retired {
		used[s] = true
	}
	for _, r := range st.cfg.Servers {
		a := r.Addr.Unmap()
		if _, ok := st.slots[a]; ok {
			continue
		}
		if s, ok := st.retired[a]; ok { // back before its old flows ended
			delete(st.retired, a)
			st.slots[a] = s
			continue
		}
		if err := d.reapRetired(st, used); err != nil {
			return err
		}
		free := -1
		for s := 0; s < MaxReals; s++ {
			if !used[uint32(s)] {
				free = s
				break
			}
		}
		if free < 0 {
			return fmt.Errorf("no free real-server slot: %d slots hold servers removed with connections still open", len(st.retired))
		}
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			return err
		}
		if err := d.clearSlot(st.id, uint32(free), make([]balancerRealStats, ncpu)); err != nil {
			return err
		}
		used[uint32(free)] = true
		st.slots[a] = uint32(free)
	}
	// MACs: pool members; retired slots keep theirs (their flows still
	// go) but are no longer available for new connections.
	for _, r := range st.cfg.Servers {
		var rl balancerReal
		copy(rl.Mac[:], r.MAC)
		if r.Weight > 0 {
			rl.Flags = realAvailable
		}
		if err := d.objs.Reals.Put(st.id*MaxReals+st.slots[r.Addr.Unmap()], &rl); err != nil {
			return err
		}
	}
	for _, slot := range st.retired {
		var rl balancerReal
		idx := st.id*MaxReals + slot
		if err := d.objs.Reals.Lookup(idx, &rl); err != nil {
			return err
		}
		if rl.Flags != 0 {
			rl.Flags = 0
			if err := d.objs.Reals.Put(idx, &rl); err != nil {
				return err
			}
		}
	}
	return nil
}

// reapRetired frees the slots of removed servers with no connection left.
func (d *Dataplane) reapRetired(st *svcState, used map[uint32]bool) error {
	for a, slot := range st.retired {
		active, inactive, err := d.slotConns(st.id*MaxReals + slot)
		if err != nil {
			return err
		}
		if active <= 0 && inactive <= 0 {
			delete(st.retired, a)
			delete(used, slot)
		}
	}
	return nil
}

func (d *Dataplane) writeService(k svcKey, st *svcState) error {
	srv := st.cfg.Servers
	v := balancerService{Id: st.id, Sched: st.kind, N: uint32(len(srv)), MhBuf: st.mhBuf}
	if st.kind == schedKinds["sh"] || st.kind == schedKinds["mh"] {
		v.Flags |= flagSchedNonSYN
	}
	view := make([]sched.Server, len(srv))
	g := 0
	for i, r := range srv {
		w := max(r.Weight, 0)
		v.Weight[i] = uint32(w)
		v.Pool[i] = uint8(st.slots[r.Addr.Unmap()])
		view[i] = sched.Server{Key: netip.AddrPortFrom(r.Addr, st.cfg.VIP.Port()).String(), Weight: w}
		if w > 0 {
			v.MaxWeight = max(v.MaxWeight, uint32(w))
			g = gcd(g, w)
		}
	}
	v.GcdWeight = uint32(g)
	for i, p := range sched.SHTable(view) {
		v.Sh[i] = posByte(p)
	}
	// HA builds every service's Maglev table: it places flows this
	// director has not seen (see the program's fallback).
	if st.kind == schedKinds["mh"] || d.haMode != HAOff {
		key := fmt.Sprint(view)
		if key != st.mhFor {
			var t balancerMhTable
			tab := sched.MHTable(view)
			for i := range t.Pos {
				t.Pos[i] = posNone
				if tab != nil {
					t.Pos[i] = posByte(tab[i])
				}
			}
			next := st.mhBuf ^ 1
			if err := d.objs.MhTables.Put(st.id*2+next, &t); err != nil {
				return err
			}
			st.mhBuf, st.mhFor = next, key
			v.MhBuf = next
		}
		if d.haMode != HAOff {
			v.Flags |= flagMHFallback
		}
	}
	vk := vipKey(k)
	return d.objs.Services.Put(&vk, &v)
}

func posByte(p int) uint8 {
	if p < 0 || p >= MaxReals {
		return posNone
	}
	return uint8(p)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// RemoveService stops a service: new packets for it pass to the kernel;
// its connections are forgotten.
func (d *Dataplane) RemoveService(vip netip.AddrPort, protocol string) error {
	proto, err := protoNum(protocol)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := svcKey{netip.AddrPortFrom(vip.Addr().Unmap(), vip.Port()), proto}
	st := d.services[k]
	if st == nil {
		return nil
	}
	vk := vipKey(k)
	if err := d.objs.Services.Delete(&vk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	delete(d.services, k)
	d.ids[st.id] = false
	if err := d.writePorts(); err != nil {
		return err
	}
	var fk balancerFlowKey
	var c balancerConn
	var dead []balancerFlowKey
	it := d.objs.Conns.Iterate()
	for it.Next(&fk, &c) {
		if c.Svc == st.id {
			dead = append(dead, fk)
		}
	}
	for i := range dead {
		d.objs.Conns.Delete(&dead[i]) // gone already is fine
	}
	return it.Err()
}

// ServerStats are one real server's counters.
type ServerStats struct {
	Addr     netip.Addr
	Active   int64
	Inactive int64
	Packets  uint64
	Bytes    uint64
	Conns    uint64
	Retired  bool // removed from the pool, connections left
}

// ServiceStats are one service's counters.
type ServiceStats struct {
	Packets, Bytes, Conns uint64
	Drops                 map[string]uint64 // by reason (DropReasons)
	Servers               []ServerStats     // pool order, then retired ones
}

// Stats reads a service's counters, summed over CPUs.
func (d *Dataplane) Stats(vip netip.AddrPort, protocol string) (ServiceStats, error) {
	proto, err := protoNum(protocol)
	if err != nil {
		return ServiceStats{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.services[svcKey{netip.AddrPortFrom(vip.Addr().Unmap(), vip.Port()), proto}]
	if st == nil {
		return ServiceStats{}, fmt.Errorf("no XDP service %s/%s", vip, protocol)
	}
	var out ServiceStats
	var per []balancerSvcStats
	if err := d.objs.SvcStats.Lookup(st.id, &per); err != nil {
		return out, err
	}
	out.Drops = map[string]uint64{}
	for _, p := range per {
		out.Packets += p.Packets
		out.Bytes += p.Bytes
		out.Conns += p.NewConns
		for i, n := range p.Drops {
			out.Drops[DropReasons[i]] += n
		}
	}
	one := func(a netip.Addr, slot uint32, retired bool) error {
		idx := st.id*MaxReals + slot
		s := ServerStats{Addr: a, Retired: retired}
		active, inactive, err := d.slotConns(idx)
		if err != nil {
			return err
		}
		s.Active, s.Inactive = max(active, 0), max(inactive, 0)
		var rs []balancerRealStats
		if err := d.objs.RealStats.Lookup(idx, &rs); err != nil {
			return err
		}
		for _, p := range rs {
			s.Packets += p.Packets
			s.Bytes += p.Bytes
			s.Conns += p.NewConns
		}
		out.Servers = append(out.Servers, s)
		return nil
	}
	for _, r := range st.cfg.Servers {
		if err := one(r.Addr, st.slots[r.Addr.Unmap()], false); err != nil {
			return out, err
		}
	}
	for a, slot := range st.retired {
		if err := one(a, slot, true); err != nil {
			return out, err
		}
	}
	return out, nil
}

// GlobalStats counts frames that were not for a service, and the HA
// counters.
type GlobalStats struct {
	Passed, Malformed, Fragments uint64
	Fenced                       uint64 // VIP frames passed by a closed HA fence
	ARPReplies                   uint64 // ARP requests for a VIP answered
	EventsLost                   uint64 // connection events the ring buffer had no room for
}

// Global reads the counters of frames passed to the kernel.
func (d *Dataplane) Global() (GlobalStats, error) {
	var per []balancerGlobalStats
	var g GlobalStats
	if err := d.objs.GlobalStats.Lookup(uint32(0), &per); err != nil {
		return g, err
	}
	for _, p := range per {
		g.Passed += p.Passed
		g.Malformed += p.Malformed
		g.Fragments += p.Fragments
		g.Fenced += p.Fenced
		g.ARPReplies += p.ArpReplies
		g.EventsLost += p.EventsLost
	}
	return g, nil
}

// nowSeconds is the program's clock: monotonic seconds.
func nowSeconds() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)
}

// seconds is a timeout in the program's clock, at least 1.
func seconds(t time.Duration) uint64 { return max(1, uint64((t+time.Second-1)/time.Second)) }

// Expire ends connections idle past their service's timeouts and takes them
// off their server's active or inactive count, as IPVS's connection timers
// do. It returns how many it ended.
func (d *Dataplane) Expire() (int, error) {
	return d.expireAt(nowSeconds())
}

// expireAt expires as of now, in the program's clock (seconds).
func (d *Dataplane) expireAt(now uint64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	byID := map[uint32]*svcState{}
	for _, st := range d.services {
		byID[st.id] = st
	}
	idle := func(c *balancerConn) bool {
		st := byID[c.Svc]
		if st == nil {
			return true // its service is gone
		}
		t := st.cfg.Timeouts.TCP
		switch c.State {
		case connFin:
			t = st.cfg.Timeouts.TCPFin
		case connUDP:
			t = st.cfg.Timeouts.UDP
		}
		return c.Seen+seconds(t) < now
	}
	var fk balancerFlowKey
	var c balancerConn
	var cand []balancerFlowKey
	it := d.objs.Conns.Iterate()
	for it.Next(&fk, &c) {
		if idle(&c) {
			cand = append(cand, fk)
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	n := 0
	for i := range cand {
		// Take the entry out and look at it as it was when removed: a
		// packet may have refreshed it since the walk.
		if err := d.objs.Conns.LookupAndDelete(&cand[i], &c); err != nil {
			continue
		}
		if !idle(&c) {
			d.objs.Conns.Update(&cand[i], &c, ebpf.UpdateNoExist)
			continue
		}
		n++
		if byID[c.Svc] == nil {
			continue
		}
		if d.events != nil {
			if conn, ok := d.toConn(&cand[i], c.Svc, c.Slot, c.State, 0, 0); ok {
				d.events.push(ConnEvent{Op: OpDelete, Conn: conn})
			}
		}
		idx := c.Svc*MaxReals + c.Slot
		switch c.State {
		case connEstablished:
			d.expired(idx, 1, 0)
		default:
			d.expired(idx, 0, 1)
		}
	}
	return n, nil
}

// expired counts connections ended here in real_expired, which only this
// side writes (the program changes real_conns with atomic adds, which a map
// update from here could undo). Callers hold d.mu.
func (d *Dataplane) expired(idx uint32, active, inactive int64) {
	var ex balancerRealConns
	if d.objs.RealExpired.Lookup(idx, &ex) != nil {
		return
	}
	ex.Active += active
	ex.Inactive += inactive
	d.objs.RealExpired.Put(idx, &ex)
}

// slotConns is a slot's active and inactive counts.
func (d *Dataplane) slotConns(idx uint32) (active, inactive int64, err error) {
	var rc, ex balancerRealConns
	if err := errors.Join(d.objs.RealConns.Lookup(idx, &rc), d.objs.RealExpired.Lookup(idx, &ex)); err != nil {
		return 0, 0, err
	}
	return rc.Active - ex.Active, rc.Inactive - ex.Inactive, nil
}

// Conns counts the flows in the connection table (for tests).
func (d *Dataplane) Conns() (int, error) {
	var fk balancerFlowKey
	var c balancerConn
	n := 0
	it := d.objs.Conns.Iterate()
	for it.Next(&fk, &c) {
		n++
	}
	return n, it.Err()
}
