package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// The connection table in address terms, for high availability
// (internal/ha): a standby or a peer director holds another director's
// flows by client, VIP and real server address, never by local ids (service
// ids and slots differ between directors).

// ConnState is a flow's state as the table keeps it.
type ConnState uint8

const (
	StateEstablished ConnState = 1 // TCP, no FIN or RST seen from the client
	StateFin         ConnState = 2 // TCP after the client's FIN or RST
	StateUDP         ConnState = 3
)

// Conn is one flow in address terms.
type Conn struct {
	Client netip.AddrPort // the client's address and port
	VIP    netip.AddrPort // the service's VIP and port
	Proto  string         // "tcp" or "udp"
	Real   netip.Addr     // the real server the flow goes to
	State  ConnState
	// Idle is the time since the flow's last packet (whole seconds); an
	// imported flow keeps it, so that it expires when it would have on the
	// director it came from.
	Idle time.Duration
}

// EventOp says what happened to a flow.
type EventOp uint8

const (
	OpNew    EventOp = 1 // scheduled (or imported): the flow now goes to Conn.Real
	OpUpdate EventOp = 2 // state changed (the client's FIN or RST)
	OpDelete EventOp = 3 // ended: expired, or replaced by a new flow on the same ports
)

// ConnEvent is one change of the connection table.
type ConnEvent struct {
	Op   EventOp
	Conn Conn
}

// HAMode says when the program forwards VIP traffic.
type HAMode uint32

const (
	// HAOff: always (a single director).
	HAOff HAMode = 0
	// HAFenced: only while the fence is open (CLOCK_MONOTONIC below the
	// deadline given to SetHA), and it answers ARP for the VIPs set with
	// SetARP only then; unknown non-SYN TCP flows are scheduled through
	// the service's Maglev table. A director that stops renewing (frozen,
	// partitioned) stops forwarding in the kernel by itself.
	HAFenced HAMode = 1
	// HAActiveActive: always, without ARP (a router spreads flows over the
	// directors); unknown non-SYN TCP flows go through the Maglev table.
	HAActiveActive HAMode = 2
)

// MonoNow is CLOCK_MONOTONIC, the clock the program's fence compares
// against (bpf_ktime_get_ns).
func MonoNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Limits of the event stream.
const (
	eventBatch     = 256                    // events per batch at most
	eventFlush     = 2 * time.Millisecond   // a batch waits at most this long
	eventQueue     = 64                     // batches waiting for the consumer
	eventSendWait  = 100 * time.Millisecond // then the batch is counted lost
	eventMaxQueued = 1 << 16                // events held before a flush
	maxARPVIPs     = 256                    // bpf/consts.h MAX_ARP_VIPS
	flagMHFallback = 2                      // bpf/consts.h SVC_F_MH_FALLBACK
)

// SetHA sets when the program forwards: mode, and for HAFenced the
// CLOCK_MONOTONIC deadline (0 closes the fence at once). Renewing the
// deadline is one map write; changing between HAOff and the other modes
// also builds (or stops using) every service's Maglev table for the
// fallback of unknown flows.
func (d *Dataplane) SetHA(mode HAMode, until time.Duration) error {
	if mode > HAActiveActive {
		return fmt.Errorf("xdp: HA mode %d: want HAOff, HAFenced or HAActiveActive", mode)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fallback := (mode != HAOff) != (d.haMode != HAOff)
	d.haMode = mode
	d.fence = uint64(max(until, 0))
	if fallback {
		for k, st := range d.services {
			if err := d.writeService(k, st); err != nil {
				return fmt.Errorf("xdp: HA mode %d: service %s: %w", mode, k.vip, err)
			}
		}
	}
	return d.writeConfig()
}

// SetARP names the VIPs the program answers for (HAFenced, fence open),
// with mac as the answer (the attached interface's MAC): ARP requests for
// the IPv4 ones, neighbour solicitations for the IPv6 ones. The set
// replaces the last one.
func (d *Dataplane) SetARP(mac net.HardwareAddr, vips []netip.Addr) error {
	if len(mac) != 6 {
		return fmt.Errorf("xdp: ARP MAC %q: want 6 bytes", mac)
	}
	v4, v6 := map[uint32]bool{}, map[[16]byte]bool{}
	for _, a := range vips {
		a = a.Unmap()
		if a.Is4() {
			b := a.As4()
			v4[binary.NativeEndian.Uint32(b[:])] = true
		} else if a.Is6() {
			v6[a.As16()] = true
		}
	}
	if len(v4) > maxARPVIPs || len(v6) > maxARPVIPs {
		return fmt.Errorf("xdp: %d IPv4 and %d IPv6 VIPs to answer for: at most %d of each", len(v4), len(v6), maxARPVIPs)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := syncSet(d.objs.ArpVips, v4); err != nil {
		return fmt.Errorf("xdp: arp_vips: %w", err)
	}
	if err := syncSet(d.objs.NdVips, v6); err != nil {
		return fmt.Errorf("xdp: nd_vips: %w", err)
	}
	d.arpMAC = append(net.HardwareAddr(nil), mac...)
	return d.writeConfig()
}

// syncSet makes a map of keys -> 1 hold exactly want.
func syncSet[K comparable](m *ebpf.Map, want map[K]bool) error {
	var k K
	var v uint8
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return err
		}
	}
	return nil
}

// flowKey is a flow's key in the connection table.
func flowKey(client, vip netip.AddrPort, proto uint8) balancerFlowKey {
	var k balancerFlowKey
	s, t := client.Addr().Unmap().As16(), vip.Addr().Unmap().As16()
	for i := range k.Src {
		k.Src[i] = binary.NativeEndian.Uint32(s[i*4:])
		k.Dst[i] = binary.NativeEndian.Uint32(t[i*4:])
	}
	k.Sport, k.Dport = netPort(client.Port()), netPort(vip.Port())
	k.Proto = proto
	return k
}

// netPort is a port as the program keeps it: network order in memory.
func netPort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func hostPort(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

func keyAddr(w [4]uint32) netip.Addr {
	var b [16]byte
	for i := range w {
		binary.NativeEndian.PutUint32(b[i*4:], w[i])
	}
	return netip.AddrFrom16(b).Unmap()
}

func protoName(p uint8) string {
	if p == unix.IPPROTO_UDP {
		return "udp"
	}
	return "tcp"
}

// byID finds a service by its id. Callers hold d.mu.
func (d *Dataplane) byID(id uint32) (svcKey, *svcState) {
	for k, st := range d.services {
		if st.id == id {
			return k, st
		}
	}
	return svcKey{}, nil
}

// slotAddr is the real server in a slot, in the pool or retired.
func (st *svcState) slotAddr(slot uint32) (netip.Addr, bool) {
	for a, s := range st.slots {
		if s == slot {
			return a, true
		}
	}
	for a, s := range st.retired {
		if s == slot {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// slotOf is a real server's slot, in the pool or retired.
func (st *svcState) slotOf(a netip.Addr) (uint32, bool) {
	a = a.Unmap()
	if s, ok := st.slots[a]; ok {
		return s, true
	}
	s, ok := st.retired[a]
	return s, ok
}

// toConn turns a table entry into address terms; false when its service
// or slot is unknown. Callers hold d.mu.
func (d *Dataplane) toConn(k *balancerFlowKey, svc, slot, state uint32, now, seen uint64) (Conn, bool) {
	_, st := d.byID(svc)
	if st == nil {
		return Conn{}, false
	}
	real, ok := st.slotAddr(slot)
	if !ok {
		return Conn{}, false
	}
	c := Conn{
		Client: netip.AddrPortFrom(keyAddr(k.Src), hostPort(k.Sport)),
		VIP:    netip.AddrPortFrom(keyAddr(k.Dst), hostPort(k.Dport)),
		Proto:  protoName(k.Proto),
		Real:   real,
		State:  ConnState(state),
	}
	if now > seen {
		c.Idle = time.Duration(now-seen) * time.Second
	}
	return c, true
}

// ExportConns returns every flow of the table in address terms (flows of
// services or servers the table no longer has are left out).
func (d *Dataplane) ExportConns() ([]Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := nowSeconds()
	var out []Conn
	var k balancerFlowKey
	var c balancerConn
	it := d.objs.Conns.Iterate()
	for it.Next(&k, &c) {
		if conn, ok := d.toConn(&k, c.Svc, c.Slot, c.State, now, c.Seen); ok {
			out = append(out, conn)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("xdp: reading the connection table: %w", err)
	}
	return out, nil
}

// ApplyConns applies changes another director made: OpNew and OpUpdate
// insert or overwrite the flow (the servers' connection counts follow),
// OpDelete removes it. A change naming a service or real server this
// director does not have (or an unknown op or state) is skipped and
// counted.
func (d *Dataplane) ApplyConns(evs []ConnEvent) (applied, skipped int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := nowSeconds()
	for i := range evs {
		ok, err := d.applyConn(&evs[i], now)
		if err != nil {
			return applied, skipped, fmt.Errorf("xdp: applying %v of %s -> %s: %w", evs[i].Op, evs[i].Conn.Client, evs[i].Conn.VIP, err)
		}
		if ok {
			applied++
		} else {
			skipped++
		}
	}
	return applied, skipped, nil
}

// applyConn applies one change. Counts: a slot's count is real_conns minus
// real_expired and only this side writes real_expired, so a flow added
// here lowers real_expired and a flow removed here raises it, as Expire's
// do. Callers hold d.mu.
func (d *Dataplane) applyConn(ev *ConnEvent, now uint64) (bool, error) {
	c := &ev.Conn
	proto, err := protoNum(c.Proto)
	if err != nil || c.Proto == "" {
		return false, nil
	}
	st := d.services[svcKey{netip.AddrPortFrom(c.VIP.Addr().Unmap(), c.VIP.Port()), proto}]
	if st == nil || !c.Client.IsValid() {
		return false, nil
	}
	key := flowKey(c.Client, c.VIP, proto)
	var old balancerConn
	switch ev.Op {
	case OpDelete:
		if err := d.objs.Conns.LookupAndDelete(&key, &old); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return true, nil // gone already: the same end state
			}
			return false, err
		}
		d.uncount(&old)
		return true, nil
	case OpNew, OpUpdate:
	default:
		return false, nil
	}
	slot, ok := st.slotOf(c.Real)
	if !ok {
		return false, nil
	}
	switch {
	case proto == unix.IPPROTO_UDP && c.State != StateUDP,
		proto == unix.IPPROTO_TCP && c.State != StateEstablished && c.State != StateFin:
		return false, nil
	}
	idle := uint64(max(c.Idle, 0) / time.Second)
	nc := balancerConn{Svc: st.id, Slot: slot, State: uint32(c.State)}
	if idle < now {
		nc.Seen = now - idle
	}
	// Take the old entry out (accounting for it) and insert only where
	// none is: the program may insert the same flow in between (active-
	// active, or a fallback), and an overwrite would lose its count.
	for range 4 {
		if d.objs.Conns.LookupAndDelete(&key, &old) == nil {
			d.uncount(&old)
		}
		err := d.objs.Conns.Update(&key, &nc, ebpf.UpdateNoExist)
		if err == nil {
			d.count(&nc, -1)
			return true, nil
		}
		if !errors.Is(err, ebpf.ErrKeyExist) {
			return false, err
		}
	}
	return false, errors.New("the program keeps inserting the flow")
}

// uncount takes a removed entry off its slot's counts.
func (d *Dataplane) uncount(c *balancerConn) { d.count(c, 1) }

// count moves a slot's counts by way of real_expired: +1 takes the flow
// off, -1 puts it on. Callers hold d.mu.
func (d *Dataplane) count(c *balancerConn, by int64) {
	if _, st := d.byID(c.Svc); st == nil || c.Slot >= MaxReals {
		return
	}
	idx := c.Svc*MaxReals + c.Slot
	if c.State == connEstablished {
		d.expired(idx, by, 0)
	} else {
		d.expired(idx, 0, by)
	}
}

// Events streams the changes this director's program makes (new flows,
// FIN/RST, and the expiries and reuses the Go side does), in batches.
// Changes written by ApplyConns are not repeated here.
type Events struct {
	// C carries batches of at most 256 changes, each sent within a few
	// milliseconds; it is closed by Close.
	C <-chan []ConnEvent

	c    chan []ConnEvent
	d    *Dataplane
	rd   *ringbuf.Reader
	lost atomic.Uint64 // batches the consumer did not take in time
	done chan struct{}
	once sync.Once

	mu    sync.Mutex
	batch []ConnEvent
	first time.Time // when the oldest event of batch came
}

// Lost counts changes that were not delivered: the kernel could not queue
// them (ring buffer full) or the consumer did not take them in time. A
// peer that missed them needs a full resync.
func (e *Events) Lost() uint64 {
	g, _ := e.d.Global()
	return g.EventsLost + e.lost.Load()
}

// Close stops the stream and closes C.
func (e *Events) Close() error {
	var err error
	e.once.Do(func() {
		e.d.mu.Lock()
		e.d.events = nil
		err = e.d.writeConfig()
		e.d.mu.Unlock()
		err = errors.Join(err, e.rd.Close())
		<-e.done
	})
	return err
}

// StartEvents starts the stream; there is one per dataplane.
func (d *Dataplane) StartEvents() (*Events, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.events != nil {
		return nil, errors.New("xdp: the event stream is already started")
	}
	rd, err := ringbuf.NewReader(d.objs.Events)
	if err != nil {
		return nil, fmt.Errorf("xdp: reading the event ring buffer: %w", err)
	}
	e := &Events{d: d, rd: rd, c: make(chan []ConnEvent, eventQueue), done: make(chan struct{})}
	e.C = e.c
	d.events = e
	if err := d.writeConfig(); err != nil {
		d.events = nil
		rd.Close()
		return nil, err
	}
	go e.run()
	return e, nil
}

// push queues a change. Callers hold d.mu (so that it is ordered with the
// kernel's changes, which the reader translates under d.mu).
func (e *Events) push(ev ConnEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.batch) >= eventMaxQueued {
		e.lost.Add(1)
		return
	}
	if len(e.batch) == 0 {
		e.first = time.Now()
	}
	e.batch = append(e.batch, ev)
}

// take returns the batch when it is due (full, or old enough, or all).
func (e *Events) take(all bool) []ConnEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.batch) == 0 || !all && len(e.batch) < eventBatch && time.Since(e.first) < eventFlush {
		return nil
	}
	n := min(len(e.batch), eventBatch)
	out := append([]ConnEvent(nil), e.batch[:n]...)
	e.batch = append(e.batch[:0], e.batch[n:]...)
	e.first = time.Now()
	return out
}

// connEventSize is sizeof(struct conn_event).
const connEventSize = 56

// decodeEvent reads one ring-buffer record (struct conn_event); false when
// it is not one.
func decodeEvent(b []byte) (k balancerFlowKey, svc, slot, state, op uint32, ok bool) {
	if len(b) < connEventSize {
		return k, 0, 0, 0, 0, false
	}
	ne := binary.NativeEndian
	for i := range 4 {
		k.Src[i] = ne.Uint32(b[i*4:])
		k.Dst[i] = ne.Uint32(b[16+i*4:])
	}
	k.Sport, k.Dport, k.Proto = ne.Uint16(b[32:]), ne.Uint16(b[34:]), b[36]
	return k, ne.Uint32(b[40:]), ne.Uint32(b[44:]), ne.Uint32(b[48:]), ne.Uint32(b[52:]), true
}

// run reads the ring buffer, translates each change under d.mu and hands
// batches to C. The reader wakes at least every eventFlush, so changes the
// Go side queued go out in time too.
func (e *Events) run() {
	defer close(e.done)
	defer close(e.c)
	var rec ringbuf.Record
	for {
		e.rd.SetDeadline(time.Now().Add(eventFlush))
		err := e.rd.ReadInto(&rec)
		switch {
		case err == nil:
			e.kernelEvent(rec.RawSample)
		case errors.Is(err, os.ErrDeadlineExceeded):
		default: // closed, or the ring buffer failed: stop
			if b := e.take(true); b != nil {
				e.send(b)
			}
			if !errors.Is(err, ringbuf.ErrClosed) {
				e.d.log.Error("xdp: reading connection events stopped", "err", err)
			}
			return
		}
		for b := e.take(false); b != nil; b = e.take(false) {
			e.send(b)
		}
	}
}

func (e *Events) kernelEvent(raw []byte) {
	k, svc, slot, state, op, ok := decodeEvent(raw)
	if !ok {
		return
	}
	d := e.d
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.toConn(&k, svc, slot, state, 0, 0)
	if !ok {
		return // its service or server is gone already
	}
	e.push(ConnEvent{Op: EventOp(op), Conn: c})
}

// send hands a batch over, or counts it lost when the consumer does not
// take it in time: the kernel's reader must not stall behind it.
func (e *Events) send(b []ConnEvent) {
	select {
	case e.c <- b:
		return
	default:
	}
	t := time.NewTimer(eventSendWait)
	defer t.Stop()
	select {
	case e.c <- b:
	case <-t.C:
		e.lost.Add(uint64(len(b)))
	}
}
