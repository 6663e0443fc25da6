package xdp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"
)

// arpRequest builds "who has target? tell sender" from the client.
func arpRequest(sender, target netip.Addr, op uint16) []byte {
	b := append([]byte{}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, ClientMAC...)
	b = binary.BigEndian.AppendUint16(b, 0x0806)
	b = binary.BigEndian.AppendUint16(b, 1)      // Ethernet
	b = binary.BigEndian.AppendUint16(b, 0x0800) // IPv4
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	s, t := sender.As4(), target.As4()
	b = append(b, ClientMAC...)
	b = append(b, s[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, t[:]...)
	return append(b, make([]byte, 18)...) // padding to 60 bytes, as on the wire
}

func setHA(t *testing.T, d *Dataplane, mode HAMode, until time.Duration) {
	t.Helper()
	if err := d.SetHA(mode, until); err != nil {
		t.Fatal(err)
	}
}

func global(t *testing.T, d *Dataplane) GlobalStats {
	t.Helper()
	g, err := d.Global()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFence: in HAFenced mode VIP traffic is forwarded only before the
// deadline; a closed fence passes it (and counts it); the other modes
// forward always.
func TestFence(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	setHA(t, d, HAFenced, MonoNow()+time.Minute)
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: SYN})
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK})

	for _, until := range []time.Duration{0, MonoNow() - time.Millisecond} {
		setHA(t, d, HAFenced, until)
		before := global(t, d).Fenced
		expectAction(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK}, xdpPass) // known flow
		expectAction(t, d, Frame{Src: from(1001), Dst: vip, Flags: SYN}, xdpPass) // new flow
		if got := global(t, d).Fenced - before; got != 2 {
			t.Fatalf("deadline %v: %d frames counted fenced, want 2", until, got)
		}
		// Not for a service: passes as always, not counted as fenced.
		expectAction(t, d, Frame{Src: from(1), Dst: netip.MustParseAddrPort("10.0.0.7:80"), Flags: SYN}, xdpPass)
		if got := global(t, d).Fenced - before; got != 2 {
			t.Fatalf("a frame for no service counted as fenced")
		}
	}
	if n, _ := d.Conns(); n != 1 {
		t.Fatalf("a fenced director changed its table: %d flows", n)
	}
	// Tick rewrites the config: the fence must stay closed.
	if err := d.Tick(); err != nil {
		t.Fatal(err)
	}
	expectAction(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK}, xdpPass)

	setHA(t, d, HAActiveActive, 0)
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK})
	setHA(t, d, HAOff, 0)
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK})
	if err := d.SetHA(7, 0); err == nil {
		t.Fatal("mode 7 accepted")
	}
}

// TestARP: an ARP request for a VIP is answered in place only in HAFenced
// mode with the fence open; other addresses and replies pass.
func TestARP(t *testing.T) {
	d := load(t)
	arpMAC := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x09}
	if err := d.SetARP(arpMAC, []netip.Addr{vip.Addr(), vip6.Addr()}); err != nil {
		t.Fatal(err)
	}
	asker := netip.MustParseAddr("10.0.0.1")
	req := arpRequest(asker, vip.Addr(), 1)
	want := func(act uint32) []byte {
		t.Helper()
		got, out := run(t, d.Program(), req)
		if got != act {
			t.Fatalf("ARP request: action %d, want %d", got, act)
		}
		return out
	}
	want(xdpPass) // HAOff: the kernel answers (or not), as ever
	setHA(t, d, HAFenced, MonoNow()+time.Minute)
	out := want(xdpTX)
	if len(out) != len(req) {
		t.Fatalf("reply of %d bytes, want %d", len(out), len(req))
	}
	v := vip.Addr().As4()
	a := asker.As4()
	reply := append([]byte{}, ClientMAC...)
	reply = append(reply, arpMAC...)
	reply = append(reply, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2)
	reply = append(reply, arpMAC...)
	reply = append(reply, v[:]...)
	reply = append(reply, ClientMAC...)
	reply = append(reply, a[:]...)
	if !bytes.Equal(out[:42], reply) {
		t.Fatalf("ARP reply\n%x, want\n%x", out[:42], reply)
	}
	if g := global(t, d); g.ARPReplies != 1 {
		t.Fatalf("%d ARP replies counted", g.ARPReplies)
	}
	for _, other := range [][]byte{
		arpRequest(asker, netip.MustParseAddr("10.0.0.7"), 1), // not a VIP
		arpRequest(asker, vip.Addr(), 2),                      // a reply
		req[:30],                                              // truncated
	} {
		if act, _ := run(t, d.Program(), other); act != xdpPass {
			t.Fatalf("%x: action %d, want pass", other, act)
		}
	}
	setHA(t, d, HAFenced, 0)
	want(xdpPass)
	setHA(t, d, HAActiveActive, 0)
	want(xdpPass)
	// The set replaces the last one.
	setHA(t, d, HAFenced, MonoNow()+time.Minute)
	if err := d.SetARP(arpMAC, []netip.Addr{netip.MustParseAddr("10.0.0.7")}); err != nil {
		t.Fatal(err)
	}
	want(xdpPass)
	if err := d.SetARP(net.HardwareAddr{1, 2}, nil); err == nil {
		t.Fatal("a 2-byte MAC accepted")
	}
}

// next waits for the next batch of events.
func next(t *testing.T, e *Events) []ConnEvent {
	t.Helper()
	select {
	case b, ok := <-e.C:
		if !ok {
			t.Fatal("event stream closed")
		}
		return b
	case <-time.After(2 * time.Second):
		t.Fatal("no event batch in 2 s")
	}
	return nil
}

// TestEvents: the program reports new flows and FINs, Expire reports
// deletions, in address terms.
func TestEvents(t *testing.T) {
	d := load(t)
	rs := reals(2)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	forward(t, d, Frame{Src: from(999), Dst: vip, Flags: SYN}) // before the stream: not reported
	e, err := d.StartEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := d.StartEvents(); err == nil {
		t.Fatal("a second stream started")
	}
	got := forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: SYN})
	want := Conn{Client: from(1000), VIP: vip, Proto: "tcp", Real: rs[got].Addr, State: StateEstablished}
	if b := next(t, e); len(b) != 1 || b[0].Op != OpNew || b[0].Conn != want {
		t.Fatalf("after a SYN: %+v, want one OpNew of %+v", b, want)
	}
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: ACK}) // no change: no event
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: FIN | ACK})
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: FIN | ACK}) // once
	want.State = StateFin
	if b := next(t, e); len(b) != 1 || b[0].Op != OpUpdate || b[0].Conn != want {
		t.Fatalf("after a FIN: %+v, want one OpUpdate of %+v", b, want)
	}
	if n, err := d.expireAt(nowSeconds() + 200); err != nil || n != 1 {
		t.Fatalf("expired %d (%v), want the FIN-ed flow", n, err)
	}
	if b := next(t, e); len(b) != 1 || b[0].Op != OpDelete || b[0].Conn.Client != want.Client || b[0].Conn.Real != want.Real {
		t.Fatalf("after expiry: %+v, want one OpDelete of %+v", b, want)
	}
	// Many new flows come in batches of at most 256, none lost.
	n := 0
	for p := range 600 {
		forward(t, d, Frame{Src: from(uint16(2000 + p)), Dst: vip, Flags: SYN})
	}
	for n < 600 {
		b := next(t, e)
		if len(b) > 256 {
			t.Fatalf("batch of %d", len(b))
		}
		n += len(b)
	}
	if e.Lost() != 0 {
		t.Fatalf("%d lost", e.Lost())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-e.C; ok {
		t.Fatal("C not closed")
	}
	// Closed: the program stops reporting; a new stream can start.
	forward(t, d, Frame{Src: from(5000), Dst: vip, Flags: SYN})
	e2, err := d.StartEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	select {
	case b := <-e2.C:
		t.Fatalf("events from before the stream: %+v", b)
	case <-time.After(50 * time.Millisecond):
	}
}

// countsMatch checks that every server's active and inactive counts equal
// the flows the table holds for it, and are not negative.
func countsMatch(t *testing.T, d *Dataplane, v netip.AddrPort, proto string) {
	t.Helper()
	conns, err := d.ExportConns()
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr][2]int64{}
	for _, c := range conns {
		if c.VIP != v || c.Proto != proto {
			continue
		}
		w := want[c.Real]
		if c.State == StateEstablished {
			w[0]++
		} else {
			w[1]++
		}
		want[c.Real] = w
	}
	s := stats(t, d, v, proto)
	for _, r := range s.Servers {
		active, inactive, err := d.slotConns(d.slotIdx(t, v, proto, r.Addr))
		if err != nil {
			t.Fatal(err)
		}
		if active < 0 || inactive < 0 {
			t.Fatalf("%s: negative counts %d/%d", r.Addr, active, inactive)
		}
		if w := want[r.Addr]; w != [2]int64{active, inactive} {
			t.Fatalf("%s: counts %d active %d inactive, the table has %v", r.Addr, active, inactive, w)
		}
		delete(want, r.Addr)
	}
	if len(want) > 0 {
		t.Fatalf("flows to servers the stats do not list: %v", want)
	}
}

// slotIdx is a server's index into the per-slot maps (for tests).
func (d *Dataplane) slotIdx(t *testing.T, v netip.AddrPort, proto string, a netip.Addr) uint32 {
	t.Helper()
	p, _ := protoNum(proto)
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.services[svcKey{v, p}]
	slot, ok := st.slotOf(a)
	if !ok {
		t.Fatalf("%s has no slot", a)
	}
	return st.id*MaxReals + slot
}

// TestExportApply: a second director that applies the first's table
// forwards the first's flows to the same servers and counts them alike,
// though its slots differ.
func TestExportApply(t *testing.T) {
	d1, d2 := load(t), load(t)
	rs := reals(3)
	if err := d1.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	if err := d1.SetService(Service{VIP: vip, Protocol: "udp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	// d2 lists the servers the other way round, with a fourth first: its
	// positions and slots differ from d1's.
	rev := append([]Real{reals(4)[3]}, rs[2], rs[1], rs[0])
	if err := d2.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: rev}); err != nil {
		t.Fatal(err)
	}
	owner := map[uint16]int{}
	for p := uint16(3000); p < 3012; p++ {
		owner[p] = forward(t, d1, Frame{Src: from(p), Dst: vip, Flags: SYN})
	}
	forward(t, d1, Frame{Src: from(3000), Dst: vip, Flags: FIN | ACK})
	forward(t, d1, Frame{Src: from(53), Dst: vip, Proto: 17}) // no UDP service on d2: skipped
	conns, err := d1.ExportConns()
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 13 {
		t.Fatalf("exported %d flows, want 13", len(conns))
	}
	var evs []ConnEvent
	for _, c := range conns {
		if c.Idle < 0 || c.Idle > 2*time.Second {
			t.Fatalf("%+v: idle %v", c, c.Idle)
		}
		evs = append(evs, ConnEvent{Op: OpNew, Conn: c})
	}
	// And changes d2 cannot place: an unknown VIP, an unknown server.
	bad := conns[0]
	bad.VIP = netip.MustParseAddrPort("10.0.0.99:80")
	evs = append(evs, ConnEvent{Op: OpNew, Conn: bad})
	bad = conns[0]
	bad.Real = netip.MustParseAddr("10.0.0.99")
	evs = append(evs, ConnEvent{Op: OpNew, Conn: bad})
	applied, skipped, err := d2.ApplyConns(evs)
	if err != nil || applied != 12 || skipped != 3 {
		t.Fatalf("applied %d, skipped %d (%v): want 12, 3", applied, skipped, err)
	}
	// Applying again changes nothing (an overwrite accounts for the old entry).
	if _, _, err := d2.ApplyConns(evs); err != nil {
		t.Fatal(err)
	}
	for p, want := range owner {
		if got := forward(t, d2, Frame{Src: from(p), Dst: vip, Flags: ACK}); got != want {
			t.Fatalf("flow from port %d: d1 sent it to server %d, d2 to %d", p, want, got)
		}
	}
	s1, s2 := stats(t, d1, vip, "tcp"), stats(t, d2, vip, "tcp")
	byAddr := map[netip.Addr]ServerStats{}
	for _, r := range s2.Servers {
		byAddr[r.Addr] = r
	}
	for _, r := range s1.Servers {
		if o := byAddr[r.Addr]; o.Active != r.Active || o.Inactive != r.Inactive {
			t.Fatalf("%s: d1 counts %d/%d, d2 %d/%d", r.Addr, r.Active, r.Inactive, o.Active, o.Inactive)
		}
	}
	countsMatch(t, d2, vip, "tcp")
	// A delete takes the flow off its server; a repeated one is a no-op.
	tcp := conns[0]
	if tcp.Proto != "tcp" {
		tcp = conns[1]
	}
	del := []ConnEvent{{Op: OpDelete, Conn: tcp}, {Op: OpDelete, Conn: tcp}}
	if a, s, err := d2.ApplyConns(del); err != nil || a != 2 || s != 0 {
		t.Fatalf("deletes: %d applied %d skipped (%v)", a, s, err)
	}
	countsMatch(t, d2, vip, "tcp")
}

// TestMHFallback: with HA on, a TCP segment of a flow this director never
// saw goes where a director with scheduler mh would send it, whatever this
// one's scheduler; without HA it is dropped as before.
func TestMHFallback(t *testing.T) {
	ha, mh := load(t), load(t)
	rs := reals(5, 1, 2, 1, 3, 1)
	if err := ha.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	if err := mh.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "mh", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	expectAction(t, ha, Frame{Src: from(4000), Dst: vip, Flags: ACK}, xdpDrop)
	setHA(t, ha, HAActiveActive, 0)
	e, err := ha.StartEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(16, 1))
	for i := range 200 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 81, byte(rng.IntN(256)), byte(rng.IntN(256))}), uint16(1024+i))
		f := Frame{Src: src, Dst: vip, Flags: ACK}
		if a, b := forward(t, ha, f), forward(t, mh, f); a != b {
			t.Fatalf("%s: the fallback sent it to %d, mh to %d", src, a, b)
		}
	}
	n := 0
	for n < 200 {
		for _, ev := range next(t, e) {
			if ev.Op != OpNew {
				t.Fatalf("%+v", ev)
			}
			n++
		}
	}
	countsMatch(t, ha, vip, "tcp")
	// Pool changes rebuild the table; HA off stops the fallback.
	if err := ha.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: rs[:3]}); err != nil {
		t.Fatal(err)
	}
	if err := mh.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "mh", Servers: rs[:3]}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		f := Frame{Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 82, 0, byte(i)}), 999), Dst: vip, Flags: ACK}
		if a, b := forward(t, ha, f), forward(t, mh, f); a != b {
			t.Fatalf("after a pool change: the fallback sent it to %d, mh to %d", a, b)
		}
	}
	setHA(t, ha, HAOff, 0)
	expectAction(t, ha, Frame{Src: from(4001), Dst: vip, Flags: ACK}, xdpDrop)
}

// TestApplyRandom applies random changes, some to unknown services and
// servers, and checks after each batch that the counts are not negative and
// agree with the table.
func TestApplyRandom(t *testing.T) {
	d := load(t)
	rs := reals(4)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetService(Service{VIP: vip, Protocol: "udp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	addrs := []netip.Addr{rs[0].Addr, rs[1].Addr, rs[2].Addr, rs[3].Addr, netip.MustParseAddr("10.0.0.99")}
	vips := []netip.AddrPort{vip, vip, vip, netip.MustParseAddrPort("10.0.0.100:81")}
	rng := rand.New(rand.NewPCG(16, 2))
	applied := 0
	for round := range 40 {
		var evs []ConnEvent
		for range 1 + rng.IntN(60) {
			c := Conn{
				Client: from(uint16(100 + rng.IntN(40))),
				VIP:    vips[rng.IntN(len(vips))],
				Proto:  []string{"tcp", "tcp", "udp", "sctp"}[rng.IntN(4)],
				Real:   addrs[rng.IntN(len(addrs))],
				State:  ConnState(rng.IntN(5)),
				Idle:   time.Duration(rng.IntN(100)-5) * time.Second,
			}
			evs = append(evs, ConnEvent{Op: EventOp(rng.IntN(5)), Conn: c})
		}
		a, _, err := d.ApplyConns(evs)
		if err != nil {
			t.Fatal(err)
		}
		applied += a
		// The program works on the same table meanwhile.
		for range 5 {
			f := Frame{Src: from(uint16(100 + rng.IntN(40))), Dst: vip, Flags: []uint8{SYN, ACK, FIN | ACK, RST}[rng.IntN(4)]}
			run(t, d.Program(), f.Bytes())
		}
		if round%10 == 9 {
			if _, err := d.expireAt(nowSeconds() + uint64(rng.IntN(1000))); err != nil {
				t.Fatal(err)
			}
		}
		countsMatch(t, d, vip, "tcp")
		countsMatch(t, d, vip, "udp")
	}
	if applied < 100 {
		t.Fatalf("only %d changes applied: the test exercises little", applied)
	}
}

// solicitation builds a neighbour solicitation for target from the
// client's fd00::1, with the source link-layer address option or without.
func solicitation(src, target netip.Addr, withOpt bool) []byte {
	t := target.As16()
	b := append([]byte{0x33, 0x33, 0xff, t[13], t[14], t[15]}, ClientMAC...)
	b = binary.BigEndian.AppendUint16(b, 0x86dd)
	msg := []byte{135, 0, 0, 0, 0, 0, 0, 0}
	msg = append(msg, t[:]...)
	if withOpt {
		msg = append(append(msg, 1, 1), ClientMAC...)
	}
	ip := make([]byte, 40)
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:], uint16(len(msg)))
	ip[6], ip[7] = 58, 255
	s := src.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], []byte{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15]})
	return append(append(b, ip...), msg...)
}

// icmp6Sum is the ones'-complement sum of an IPv6 frame's ICMPv6 message
// and pseudo-header: 0xffff when the checksum is right.
func icmp6Sum(f []byte) uint16 {
	ip := f[14:54]
	n := int(binary.BigEndian.Uint16(ip[4:]))
	var sum uint32 = uint32(n) + 58
	words := append(append([]byte{}, ip[8:40]...), f[54:54+n]...)
	for i := 0; i+1 < len(words); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(words[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// TestND: a neighbour solicitation for an IPv6 VIP is answered with an
// advertisement (right checksum, the MAC as target link-layer address),
// only in HAFenced mode with the fence open.
func TestND(t *testing.T) {
	d := load(t)
	mac := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x09}
	if err := d.SetARP(mac, []netip.Addr{vip.Addr(), vip6.Addr()}); err != nil {
		t.Fatal(err)
	}
	asker := netip.MustParseAddr("fd00::1")
	ns := solicitation(asker, vip6.Addr(), true)
	if act, _ := run(t, d.Program(), ns); act != xdpPass {
		t.Fatalf("HAOff: action %d", act)
	}
	setHA(t, d, HAFenced, MonoNow()+time.Minute)
	for _, withOpt := range []bool{true, false} {
		act, out := run(t, d.Program(), solicitation(asker, vip6.Addr(), withOpt))
		if act != xdpTX {
			t.Fatalf("option %v: action %d, want XDP_TX", withOpt, act)
		}
		if len(out) != 86 {
			t.Fatalf("option %v: %d bytes, want 86", withOpt, len(out))
		}
		v, a := vip6.Addr().As16(), asker.As16()
		switch {
		case !bytes.Equal(out[:6], ClientMAC) || !bytes.Equal(out[6:12], mac):
			t.Fatalf("MACs %x", out[:12])
		case binary.BigEndian.Uint16(out[18:]) != 32 || out[20] != 58 || out[21] != 255:
			t.Fatalf("IPv6 header %x", out[14:22])
		case !bytes.Equal(out[22:38], v[:]) || !bytes.Equal(out[38:54], a[:]):
			t.Fatalf("addresses %x", out[22:54])
		case out[54] != 136 || out[55] != 0 || out[58] != 0x60:
			t.Fatalf("not a solicited, overriding advertisement: %x", out[54:62])
		case !bytes.Equal(out[62:78], v[:]) || out[78] != 2 || out[79] != 1 || !bytes.Equal(out[80:86], mac):
			t.Fatalf("target and option %x", out[62:86])
		case icmp6Sum(out) != 0xffff:
			t.Fatalf("bad checksum: sum %#x", icmp6Sum(out))
		}
	}
	dad := solicitation(netip.IPv6Unspecified(), vip6.Addr(), false)
	for _, f := range [][]byte{
		solicitation(asker, netip.MustParseAddr("fd00::7"), true), // not a VIP
		dad,     // duplicate address detection
		ns[:70], // truncated
	} {
		if act, _ := run(t, d.Program(), f); act != xdpPass {
			t.Fatalf("%x: action %d, want pass", f, act)
		}
	}
	setHA(t, d, HAFenced, 0)
	if act, _ := run(t, d.Program(), ns); act != xdpPass {
		t.Fatalf("fence closed: action %d", act)
	}
}

// TestEventsSlowConsumer: a consumer that does not read loses batches
// (counted) instead of stalling the reader; it gets the queued ones later.
func TestEventsSlowConsumer(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	e, err := d.StartEvents()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const flows = (eventQueue + 8) * eventBatch
	for i := range flows {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 81, 0, byte(i >> 16)}), uint16(i))
		forward(t, d, Frame{Src: src, Dst: vip, Flags: SYN})
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.Lost() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e.Lost() == 0 {
		t.Fatal("nothing counted lost with the consumer away")
	}
	got := 0
	for got+int(e.Lost()) < flows && time.Now().Before(deadline) {
		select {
		case b := <-e.C:
			got += len(b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got+int(e.Lost()) != flows || got < eventQueue*eventBatch/2 {
		t.Fatalf("%d delivered + %d lost, want %d in all, most delivered", got, e.Lost(), flows)
	}
}

// FuzzNeighbours feeds arbitrary frames to a fenced director with the fence
// open and VIPs to answer for: each must pass, drop, be forwarded as
// FuzzFrames checks, or be an ARP reply or neighbour advertisement for a
// VIP, from the director's MAC, well formed.
func FuzzNeighbours(f *testing.F) {
	f.Add(arpRequest(client, vip.Addr(), 1))
	f.Add(solicitation(netip.MustParseAddr("fd00::1"), vip6.Addr(), true))
	f.Add(solicitation(netip.MustParseAddr("fd00::1"), vip6.Addr(), false))
	f.Add(Frame{Src: from(2), Dst: vip, Flags: ACK, Payload: 40}.Bytes())
	d := load(f)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		f.Fatal(err)
	}
	if err := d.SetService(Service{VIP: vip6, Protocol: "udp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		f.Fatal(err)
	}
	mac := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 0x09}
	if err := d.SetARP(mac, []netip.Addr{vip.Addr(), vip6.Addr()}); err != nil {
		f.Fatal(err)
	}
	if err := d.SetHA(HAFenced, MonoNow()+24*time.Hour); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 14 || len(b) > 1500 {
			return
		}
		act, out := run(t, d.Program(), b)
		switch {
		case act == xdpPass || act == xdpDrop:
		case act != xdpTX:
			t.Fatalf("frame %x: action %d", b, act)
		case !bytes.Equal(out[6:12], mac):
			checkForwarded(t, b, out)
		case out[12] == 0x08 && out[13] == 0x06:
			v := vip.Addr().As4()
			if len(out) != len(b) || binary.BigEndian.Uint16(out[20:]) != 2 || !bytes.Equal(out[22:28], mac) || !bytes.Equal(out[28:32], v[:]) {
				t.Fatalf("bad ARP reply %x to %x", out, b)
			}
		case out[12] == 0x86 && out[13] == 0xdd:
			v := vip6.Addr().As16()
			if len(out) < 86 || out[54] != 136 || !bytes.Equal(out[22:38], v[:]) || !bytes.Equal(out[80:86], mac) || icmp6Sum(out) != 0xffff {
				t.Fatalf("bad advertisement %x to %x", out, b)
			}
		default:
			t.Fatalf("sent %x from the ARP MAC for %x", out, b)
		}
	})
}

// TestFloodedFrameNotMine: in a group a frame addressed to another MAC (a
// bridge flooding unknown unicast to every port) is left alone, so two
// directors never both forward it; the director's own frames are
// forwarded, and without HA every frame is taken as before.
func TestFloodedFrameNotMine(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetARP(DirectorMAC, []netip.Addr{vip.Addr()}); err != nil {
		t.Fatal(err)
	}
	other := net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 0x42}
	for _, mode := range []HAMode{HAFenced, HAActiveActive} {
		setHA(t, d, mode, MonoNow()+time.Minute)
		expectAction(t, d, Frame{Src: from(2000), Dst: vip, Flags: SYN, DstMAC: other}, xdpPass)
		forward(t, d, Frame{Src: from(2001), Dst: vip, Flags: SYN})
	}
	setHA(t, d, HAOff, 0)
	forward(t, d, Frame{Src: from(2002), Dst: vip, Flags: SYN, DstMAC: other})
}
