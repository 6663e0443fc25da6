package xdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/sched"
)

// XDP actions.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTX   = 3
)

func load(t testing.TB) *Dataplane {
	t.Helper()
	lab.Need(t, lab.XDP)
	d, err := Load(Options{ConnTableSize: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.SetMAC(DirectorMAC); err != nil {
		t.Fatal(err)
	}
	return d
}

func realMAC(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 1, byte(i)} }

func reals(n int, weights ...int) []Real {
	var out []Real
	for i := range n {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		out = append(out, Real{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(21 + i)}), Weight: w, MAC: realMAC(i)})
	}
	return out
}

// run feeds a frame through the kernel's test run.
func run(t testing.TB, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+512)
	opts := ebpf.RunOptions{Data: in, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("test run of a %d-byte frame: %v", len(in), err)
	}
	return ret, opts.DataOut
}

// forward runs a frame that must be sent on, checks that only the MACs
// changed, and returns the real server it went to (by MAC).
func forward(t *testing.T, d *Dataplane, p Frame) int {
	t.Helper()
	in := p.Bytes()
	act, out := run(t, d.Program(), in)
	if act != xdpTX {
		t.Fatalf("%+v: action %d, want XDP_TX", p, act)
	}
	if !bytes.Equal(out[6:12], DirectorMAC) {
		t.Fatalf("source MAC %x, want the director's %x", out[6:12], DirectorMAC)
	}
	if !bytes.Equal(out[12:], in[12:]) {
		t.Fatal("the frame changed beyond its MACs")
	}
	for i := range MaxReals {
		if bytes.Equal(out[:6], realMAC(i)) {
			return i
		}
	}
	t.Fatalf("destination MAC %x is no real server's", out[:6])
	return -1
}

func expectAction(t *testing.T, d *Dataplane, p Frame, want uint32) {
	t.Helper()
	in := p.Bytes()
	act, out := run(t, d.Program(), in)
	if act != want {
		t.Fatalf("%+v: action %d, want %d", p, act, want)
	}
	if act != xdpTX && !bytes.Equal(out, in) {
		t.Fatalf("a frame that was not forwarded changed")
	}
}

var (
	vip    = netip.MustParseAddrPort("10.0.0.100:80")
	vip6   = netip.MustParseAddrPort("[fd00::100]:80")
	client = netip.MustParseAddr("10.0.0.1")
)

func from(port uint16) netip.AddrPort { return netip.AddrPortFrom(client, port) }

func stats(t *testing.T, d *Dataplane, v netip.AddrPort, proto string) ServiceStats {
	t.Helper()
	s, err := d.Stats(v, proto)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSYNEstablishedFIN(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(3)}); err != nil {
		t.Fatal(err)
	}
	// rr: three SYNs go to three servers in order.
	for i := range 3 {
		if got := forward(t, d, Frame{Src: from(uint16(1000 + i)), Dst: vip, Flags: SYN}); got != i {
			t.Fatalf("SYN %d went to %d", i, got)
		}
	}
	// The rest of each flow follows its SYN.
	for round := range 3 {
		for i := range 3 {
			f := uint8(ACK)
			if round == 1 {
				f |= 0x08 // PSH
			}
			if got := forward(t, d, Frame{Src: from(uint16(1000 + i)), Dst: vip, Flags: f, Payload: 100}); got != i {
				t.Fatalf("flow %d went to %d", i, got)
			}
		}
	}
	s := stats(t, d, vip, "tcp")
	if s.Conns != 3 || s.Packets != 12 {
		t.Fatalf("service counters %+v, want 3 connections, 12 packets", s)
	}
	for i, r := range s.Servers {
		if r.Active != 1 || r.Inactive != 0 || r.Conns != 1 || r.Packets != 4 {
			t.Fatalf("server %d: %+v, want 1 active, 1 connection, 4 packets", i, r)
		}
	}
	// FIN from the client: active -> inactive; a repeated FIN counts once.
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: FIN | ACK})
	forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: FIN | ACK})
	// RST likewise.
	forward(t, d, Frame{Src: from(1001), Dst: vip, Flags: RST})
	s = stats(t, d, vip, "tcp")
	for i, want := range [][2]int64{{0, 1}, {0, 1}, {1, 0}} {
		if s.Servers[i].Active != want[0] || s.Servers[i].Inactive != want[1] {
			t.Fatalf("after FIN/RST, server %d: %d active %d inactive, want %v", i, s.Servers[i].Active, s.Servers[i].Inactive, want)
		}
	}
	// The client reuses its port: a SYN on an ended flow is a new
	// connection, scheduled afresh (here away from server 0, now drained),
	// and the old one leaves server 0's counts.
	rs := reals(3)
	rs[0].Weight = 0
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	if got := forward(t, d, Frame{Src: from(1000), Dst: vip, Flags: SYN}); got != 1 {
		t.Fatalf("reused port went to %d, want 1 (rr after 2, 0 drained)", got)
	}
	s = stats(t, d, vip, "tcp")
	if s.Servers[0].Inactive != 0 || s.Servers[1].Active != 1 || s.Servers[1].Conns != 2 {
		t.Fatalf("after reuse: %+v", s.Servers)
	}
}

func TestPoolChangesKeepFlows(t *testing.T) {
	d := load(t)
	rs := reals(3)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wlc", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	owner := map[uint16]int{}
	for p := uint16(2000); p < 2030; p++ {
		owner[p] = forward(t, d, Frame{Src: from(p), Dst: vip, Flags: SYN})
	}
	// Drain server 0, remove server 1, add a fourth: every flow stays.
	rs[0].Weight = 0
	next := []Real{rs[0], rs[2], reals(4)[3]}
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "wrr", Servers: next}); err != nil {
		t.Fatal(err)
	}
	for p, want := range owner {
		if got := forward(t, d, Frame{Src: from(p), Dst: vip, Flags: ACK}); got != want {
			t.Fatalf("flow from port %d moved from server %d to %d", p, want, got)
		}
	}
	// New flows go only to servers 2 and 3 (in wrr order).
	for p := uint16(3000); p < 3010; p++ {
		if got := forward(t, d, Frame{Src: from(p), Dst: vip, Flags: SYN}); got != 2 && got != 3 {
			t.Fatalf("new flow went to %d (drained or removed)", got)
		}
	}
	s := stats(t, d, vip, "tcp")
	if len(s.Servers) != 4 || !s.Servers[3].Retired || s.Servers[3].Addr != rs[1].Addr || s.Servers[3].Active != 10 {
		t.Fatalf("the removed server should be listed as retired with its 10 flows: %+v", s.Servers)
	}
	// A SYN on a flow of the drained server (a client reusing its port
	// after, say, a refused connection) is scheduled afresh.
	for p, was := range owner {
		if was != 0 {
			continue
		}
		before := stats(t, d, vip, "tcp").Servers[0].Active
		if got := forward(t, d, Frame{Src: from(p), Dst: vip, Flags: SYN}); got != 2 && got != 3 {
			t.Fatalf("a new SYN followed its old flow to drained server 0 (went to %d)", got)
		}
		if after := stats(t, d, vip, "tcp").Servers[0].Active; after != before-1 {
			t.Fatalf("server 0 active %d -> %d: the old flow should leave its counts", before, after)
		}
		break
	}
}

func TestNotForAVIPPasses(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddrPort("10.0.0.7:80")
	expectAction(t, d, Frame{Src: from(1), Dst: other, Flags: SYN}, xdpPass)                               // other address
	expectAction(t, d, Frame{Src: from(1), Dst: netip.AddrPortFrom(vip.Addr(), 22), Flags: SYN}, xdpPass)  // other port
	expectAction(t, d, Frame{Src: from(1), Dst: vip, Proto: 17}, xdpPass)                                  // other protocol
	expectAction(t, d, Frame{Src: from(1), Dst: vip, Flags: SYN, FragOff: 0x2000}, xdpPass)                // a fragment
	expectAction(t, d, Frame{Src: from(1), Dst: vip, Flags: SYN, IHL: 4}, xdpPass)                         // bad header length
	expectAction(t, d, Frame{Src: netip.MustParseAddrPort("[fd00::1]:5"), Dst: vip6, Flags: SYN}, xdpPass) // IPv6, no service
	icmp := Frame{Src: from(1), Dst: vip, Flags: SYN}.Bytes()
	icmp[14+9] = 1 // ICMP to the VIP: the director's own stack answers
	if act, _ := run(t, d.Program(), icmp); act != xdpPass {
		t.Fatalf("ICMP to the VIP: action %d", act)
	}
	arp := append(append(append([]byte{}, DirectorMAC...), ClientMAC...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	if act, _ := run(t, d.Program(), arp); act != xdpPass {
		t.Fatalf("ARP: action %d", act)
	}
	// A service with an IPv4 option header still matches.
	if got := forward(t, d, Frame{Src: from(9), Dst: vip, Flags: SYN, IHL: 6}); got < 0 {
		t.Fatal("options")
	}
	g, err := d.Global()
	if err != nil {
		t.Fatal(err)
	}
	if g.Passed < 5 || g.Fragments != 1 || g.Malformed != 1 {
		t.Fatalf("global counters %+v", g)
	}
}

func TestIPv6(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip6, Protocol: "tcp", Scheduler: "sh", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddrPort("[fd00::1]:4000")
	first := forward(t, d, Frame{Src: src, Dst: vip6, Flags: SYN})
	if got := forward(t, d, Frame{Src: src, Dst: vip6, Flags: ACK, Payload: 1000}); got != first {
		t.Fatal("IPv6 flow moved")
	}
	// sh schedules a mid-flow miss too (the same source hashes the same).
	if got := forward(t, d, Frame{Src: netip.AddrPortFrom(src.Addr(), 4001), Dst: vip6, Flags: ACK}); got != first {
		t.Fatal("sh: the same source went elsewhere")
	}
}

func TestDrops(t *testing.T) {
	d := load(t)
	rs := reals(2)
	rs[1].MAC = nil
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	forward(t, d, Frame{Src: from(1), Dst: vip, Flags: SYN})
	expectAction(t, d, Frame{Src: from(2), Dst: vip, Flags: SYN}, xdpDrop) // MAC unknown
	expectAction(t, d, Frame{Src: from(3), Dst: vip, Flags: ACK}, xdpDrop) // not a SYN, unknown flow
	rs[0].Weight, rs[1].Weight = 0, 0
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: rs}); err != nil {
		t.Fatal(err)
	}
	expectAction(t, d, Frame{Src: from(4), Dst: vip, Flags: SYN}, xdpDrop) // nobody takes flows
	forward(t, d, Frame{Src: from(1), Dst: vip, Flags: ACK})               // the established flow goes on
	s := stats(t, d, vip, "tcp")
	want := map[string]uint64{"no_mac": 1, "no_conn": 1, "no_real": 1, "conn_table": 0}
	for k, v := range want {
		if s.Drops[k] != v {
			t.Fatalf("drops %v, want %v", s.Drops, want)
		}
	}
}

func TestUDPAndExpiry(t *testing.T) {
	d := load(t)
	to := Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}
	if err := d.SetService(Service{VIP: vip, Protocol: "udp", Scheduler: "rr", Servers: reals(2), Timeouts: to}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: reals(2), Timeouts: to}); err != nil {
		t.Fatal(err)
	}
	u := forward(t, d, Frame{Src: from(53), Dst: vip, Proto: 17, Payload: 10})
	if got := forward(t, d, Frame{Src: from(53), Dst: vip, Proto: 17, Payload: 10}); got != u {
		t.Fatal("UDP flow moved")
	}
	forward(t, d, Frame{Src: from(7000), Dst: vip, Flags: SYN})
	forward(t, d, Frame{Src: from(7001), Dst: vip, Flags: SYN})
	forward(t, d, Frame{Src: from(7001), Dst: vip, Flags: FIN | ACK})
	if s := stats(t, d, vip, "udp"); s.Servers[u].Inactive != 1 {
		t.Fatalf("a UDP flow counts inactive: %+v", s.Servers)
	}
	now := nowSeconds()
	expire := func(after time.Duration, want int) {
		t.Helper()
		n, err := d.expireAt(now + uint64(after/time.Second))
		if err != nil || n != want {
			t.Fatalf("expiry after %v: %d ended (%v), want %d", after, n, err, want)
		}
	}
	expire(60*time.Second, 0)
	expire(121*time.Second, 1) // the FIN-ed TCP flow
	expire(301*time.Second, 1) // the UDP flow
	expire(901*time.Second, 1) // the established TCP flow
	for _, p := range []string{"tcp", "udp"} {
		for _, r := range stats(t, d, vip, p).Servers {
			if r.Active != 0 || r.Inactive != 0 {
				t.Fatalf("%s counts after expiry: %+v", p, r)
			}
		}
	}
	if n, _ := d.Conns(); n != 0 {
		t.Fatalf("%d flows left", n)
	}
	// An expired TCP flow is unknown: a stray segment is dropped, not misrouted.
	expectAction(t, d, Frame{Src: from(7000), Dst: vip, Flags: ACK}, xdpDrop)
}

// TestMalformed feeds truncated and random frames: each must pass or drop,
// or, when forwarded, carry a VIP service's address and port and go to one
// of its servers.
func TestMalformed(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "sh", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetService(Service{VIP: vip6, Protocol: "udp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		t.Fatal(err)
	}
	full := Frame{Src: from(1), Dst: vip, Flags: SYN}.Bytes()
	for n := 14; n < 14+20+20; n++ { // cut inside the IP or TCP header
		if act, _ := run(t, d.Program(), full[:n]); act != xdpPass {
			t.Fatalf("frame cut to %d bytes: action %d, want XDP_PASS", n, act)
		}
	}
	full6 := Frame{Src: netip.MustParseAddrPort("[fd00::1]:5"), Dst: vip6, Proto: 17}.Bytes()
	for n := 14; n < 14+40+8; n++ {
		if act, _ := run(t, d.Program(), full6[:n]); act != xdpPass {
			t.Fatalf("IPv6 frame cut to %d bytes: action %d", n, act)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		var b []byte
		if i%2 == 0 { // mutate a good frame
			b = append([]byte{}, full...)
			if i%4 == 0 {
				b = append([]byte{}, full6...)
			}
			for range 1 + rng.IntN(4) {
				b[rng.IntN(len(b))] = byte(rng.Uint32())
			}
			b = b[:14+rng.IntN(len(b)-13)]
		} else {
			b = make([]byte, 14+rng.IntN(100))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
		}
		checkAny(t, d, b)
	}
}

// checkAny runs any frame: it must pass, drop, or be forwarded correctly.
func checkAny(t *testing.T, d *Dataplane, b []byte) {
	t.Helper()
	act, out := run(t, d.Program(), b)
	switch act {
	case xdpPass, xdpDrop:
	case xdpTX:
		checkForwarded(t, b, out)
	default:
		t.Fatalf("frame %x: action %d", b, act)
	}
}

func checkForwarded(t *testing.T, in, out []byte) {
	t.Helper()
	if !bytes.Equal(out[12:], in[12:]) || !bytes.Equal(out[6:12], DirectorMAC) {
		t.Fatalf("forwarded frame changed beyond its MACs: %x", in)
	}
	if !bytes.Equal(out[:6], realMAC(0)) && !bytes.Equal(out[:6], realMAC(1)) {
		t.Fatalf("forwarded to %x", out[:6])
	}
	switch {
	case in[12] == 0x08 && in[13] == 0x00:
		ihl := int(in[14]&15) * 4
		if !bytes.Equal(in[14+16:14+20], vip.Addr().AsSlice()) || in[14+9] != 6 || int(in[14+ihl+2])<<8|int(in[14+ihl+3]) != 80 {
			t.Fatalf("forwarded a frame not for the TCP VIP: %x", in)
		}
	case in[12] == 0x86 && in[13] == 0xdd:
		if !bytes.Equal(in[14+24:14+40], vip6.Addr().AsSlice()) || in[14+6] != 17 || int(in[14+40+2])<<8|int(in[14+40+3]) != 80 {
			t.Fatalf("forwarded a frame not for the UDP VIP: %x", in)
		}
	default:
		t.Fatalf("forwarded a non-IP frame: %x", in)
	}
}

// TestVectors runs internal/sched's shared vectors through the kernel's
// schedulers: the same pool and counts must give the same picks.
func TestVectors(t *testing.T) {
	d := load(t)
	b, err := os.ReadFile("../../sched/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []sched.Vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for vi, v := range vs {
		if !HasScheduler(v.Scheduler) {
			continue // mwlc needs request sizes: l7 only
		}
		ran++
		svcVIP := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(vi), 1}), 80)
		var rs []Real
		for i, s := range v.Servers {
			ap := netip.MustParseAddrPort(s.Key)
			if ap.Port() != 80 {
				t.Fatalf("%s: vectors' servers listen on the VIP's port (80) in direct routing", v.Name)
			}
			rs = append(rs, Real{Addr: ap.Addr(), Weight: s.Weight, MAC: realMAC(i)})
		}
		if err := d.SetService(Service{VIP: svcVIP, Protocol: "tcp", Scheduler: v.Scheduler, Servers: rs}); err != nil {
			t.Fatal(err)
		}
		st := d.services[svcKey{svcVIP, 6}]
		for i, src := range v.Sources {
			// The vector's counts hold for every pick, as in the Go test.
			for j, s := range v.Servers {
				idx := st.id*MaxReals + st.slots[rs[j].Addr]
				if err := d.objs.RealConns.Put(idx, &balancerRealConns{Active: int64(s.Active), Inactive: int64(s.Inactive)}); err != nil {
					t.Fatal(err)
				}
			}
			p := Frame{Src: netip.AddrPortFrom(netip.MustParseAddr(src), uint16(10000+i)), Dst: svcVIP, Flags: SYN}
			act, out := run(t, d.Program(), p.Bytes())
			got := -1
			if act == xdpTX {
				for j := range rs {
					if bytes.Equal(out[:6], realMAC(j)) {
						got = j
					}
				}
			}
			if got != v.Want[i] {
				t.Fatalf("%s: flow %d from %s: kernel picked %d (action %d), Go picks %d", v.Name, i, src, got, act, v.Want[i])
			}
		}
		if err := d.RemoveService(svcVIP, "tcp"); err != nil {
			t.Fatal(err)
		}
	}
	if ran < 40 {
		t.Fatalf("only %d vectors ran", ran)
	}
	t.Logf("%d vectors agree", ran)
}

func TestLimits(t *testing.T) {
	d := load(t)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "mwlc"}); err == nil {
		t.Fatal("mwlc accepted")
	}
	if err := d.SetService(Service{VIP: vip, Protocol: "sctp", Scheduler: "rr"}); err == nil {
		t.Fatal("sctp accepted")
	}
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr", Servers: make([]Real, MaxReals+1)}); err == nil {
		t.Fatal("too many servers accepted")
	}
	for i := range MaxServices {
		if err := d.SetService(Service{VIP: netip.AddrPortFrom(vip.Addr(), uint16(i+1)), Protocol: "tcp", Scheduler: "rr"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "rr"}); err == nil {
		t.Fatal(fmt.Sprintf("service %d accepted", MaxServices+1))
	}
}

// FuzzFrames feeds arbitrary frames to the program: each must pass, drop,
// or be forwarded, and a forwarded frame must be for a service and leave
// with only its MACs changed.
func FuzzFrames(f *testing.F) {
	f.Add(Frame{Src: from(1), Dst: vip, Flags: SYN}.Bytes())
	f.Add(Frame{Src: from(2), Dst: vip, Flags: ACK, Payload: 40}.Bytes())
	f.Add(Frame{Src: netip.MustParseAddrPort("[fd00::1]:5"), Dst: vip6, Proto: 17, Payload: 8}.Bytes())
	f.Add(Frame{Src: from(3), Dst: vip, Flags: SYN, IHL: 7}.Bytes())
	d := load(f)
	if err := d.SetService(Service{VIP: vip, Protocol: "tcp", Scheduler: "sh", Servers: reals(2)}); err != nil {
		f.Fatal(err)
	}
	if err := d.SetService(Service{VIP: vip6, Protocol: "udp", Scheduler: "rr", Servers: reals(2)}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 14 || len(b) > 1500 {
			return // the test run refuses frames shorter than Ethernet's header
		}
		checkAny(t, d, b)
	})
}

// TestAttach attaches to a veth made for the test, in both modes, and
// checks the kernel sees the program come and go.
func TestAttach(t *testing.T) {
	load(t) // skips unless root
	name := fmt.Sprintf("cxa%d", os.Getpid()%100000)
	la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(la); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(la) })
	if err := netlink.LinkSetUp(la); err != nil {
		t.Fatal(err)
	}
	attached := func() (bool, uint32) {
		l, err := netlink.LinkByName(name)
		if err != nil || l.Attrs().Xdp == nil {
			return false, 0
		}
		return l.Attrs().Xdp.Attached, l.Attrs().Xdp.AttachMode
	}
	for _, mode := range []string{"auto", "native", "generic"} {
		d, err := Load(Options{ConnTableSize: 1024}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Attach(name, mode)
		if err != nil {
			d.Close()
			t.Fatalf("attach %s: %v", mode, err)
		}
		want := map[string]string{"auto": "native", "native": "native", "generic": "generic"}[mode]
		if got != want {
			t.Errorf("attach %s: got mode %s, want %s", mode, got, want)
		}
		if _, err := d.Attach(name, mode); err == nil {
			t.Error("a second attach succeeded")
		}
		if ok, _ := attached(); !ok {
			t.Errorf("attach %s: the kernel shows no XDP program on %s", mode, name)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if ok, _ := attached(); ok {
			t.Errorf("after close (%s) the program is still attached", mode)
		}
	}
	// A bridge has no native XDP: auto falls back to generic.
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("cxb%d", os.Getpid()%100000)}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(br) })
	d := load(t)
	if got, err := d.Attach(br.Name, "auto"); err != nil || got != "generic" {
		t.Errorf("auto on a bridge: mode %q, %v; want the generic fallback", got, err)
	}
	d.Close()
	d = load(t)
	if _, err := d.Attach(name, "turbo"); err == nil || !strings.Contains(err.Error(), "want auto, native or generic") {
		t.Errorf("bad mode: %v", err)
	}
	if _, err := d.Attach("nosuch0", "auto"); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("missing interface: %v", err)
	}
	// The veth peer's pass program (the test bed's PrepareDR) stays after
	// its loader is gone, until detached.
	if err := AttachPass(name + "p"); err != nil {
		t.Fatal(err)
	}
	if l, _ := netlink.LinkByName(name + "p"); l == nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		t.Fatal("pass program not attached")
	}
	if err := DetachPass(name + "p"); err != nil {
		t.Fatal(err)
	}
}

// TestConfigAgrees checks that the configuration accepts for dataplane xdp
// exactly the schedulers the kernel has.
func TestConfigAgrees(t *testing.T) {
	for name := range sched.Names {
		conf := fmt.Sprintf("interface eth0\nservice s {\n vip 10.0.0.1:80\n dataplane xdp\n scheduler %s\n}\n", name)
		_, err := config.Parse("c", []byte(conf))
		if (err == nil) != HasScheduler(name) {
			t.Errorf("scheduler %s: config says %v, the kernel has it: %v", name, err, HasScheduler(name))
		}
	}
}
