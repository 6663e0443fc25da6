package ha

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/loopsniff"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// sniffLoopback keeps the TCP payload of every loopback packet to or
// from the test's address range (127.0.81.0/24): what an eavesdropper
// with a packet socket sees.
func sniffLoopback(t *testing.T) *loopsniff.Sniffer {
	t.Helper()
	lab.Need(t, lab.Root) // a packet socket on lo
	rng := netip.MustParsePrefix("127.0.81.0/24")
	s, err := loopsniff.Start(func(src, dst netip.AddrPort) bool { return rng.Contains(src.Addr()) || rng.Contains(dst.Addr()) })
	if err != nil {
		t.Fatalf("packet socket on lo: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestSyncEncryptedByDefault: the flows an active streams to its standby
// never cross the wire in clear with default settings; with Insecure on
// both (the test's control) they do.
func TestSyncEncryptedByDefault(t *testing.T) {
	real := netip.MustParseAddr("198.51.100.77") // the flows' real server: 16 bytes in every event
	marker := appendAddr(nil, real)
	for _, c := range []struct {
		desc     string
		insecure bool
	}{{"default", false}, {"insecure", true}} {
		t.Run(c.desc, func(t *testing.T) {
			sn := sniffLoopback(t)
			g := newGroup(t)
			opt := func(cfg *Config, _ *fakeDP) { cfg.Insecure = c.insecure }
			g.start("a", 100, opt)
			if act := g.waitActive(5 * time.Second); act != "a" {
				t.Fatalf("active %s", act)
			}
			g.start("b", 100, opt)
			fs := flows(300, 0)
			for i := range fs {
				fs[i].Real = real
			}
			g.nodes["a"].dp.forward(fs...)
			waitFor(t, 5*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
			// Most of the stream, not every byte: a loaded machine's
			// packet socket may still drop some.
			if sn.Len() < 150*eventSize {
				t.Fatalf("the sniffer saw %d bytes on lo", sn.Len())
			}
			if got := sn.Seen(marker); got != c.insecure {
				t.Errorf("flow addresses in clear on the wire: %v, want %v", got, c.insecure)
			}
		})
	}
}

// TestSyncInsecureMismatch: a director given Insecure cannot stream to one
// that requires TLS (which says why); liveness probes still get answers.
func TestSyncInsecureMismatch(t *testing.T) {
	g := newGroup(t)
	a := g.start("a", 100)
	b := g.start("b", 100, func(c *Config, _ *fakeDP) { c.Insecure = true })
	waitFor(t, 3*time.Second, "a refuses b's plain stream", func() bool { return a.n.Status().SyncErrors > 0 })
	for _, p := range a.n.Status().Peers {
		if p.Name == "b" && p.InConnected {
			t.Errorf("a took b's plain-text stream: %+v", p)
		}
	}
	// b's TLS-less listener still takes a's TLS stream.
	waitFor(t, 3*time.Second, "a's stream to b", func() bool {
		for _, p := range b.n.Status().Peers {
			if p.Name == "a" && p.InConnected {
				return true
			}
		}
		return false
	})
	if dead, sure := b.n.probeOnce(a.n.ln.Addr().String()); dead || !sure {
		t.Errorf("a plain probe of a live TLS director: dead %v sure %v", dead, sure)
	}
}

// TestSyncRelayInTheMiddle: a relay that terminates TLS on both sides of a
// sync stream (nothing stops it: certificates are not checked) cannot pass
// the handshake, though both ends hold the key: the Auth MACs cover each
// TLS session's exported value and the relay holds two sessions.
func TestSyncRelayInTheMiddle(t *testing.T) {
	g := newGroup(t)
	a := g.start("a", 100)
	b := g.start("b", 100)
	cfg, err := proto.EphemeralServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		raw, err := net.Dial("tcp", a.n.ln.Addr().String())
		if err != nil {
			return
		}
		up := tls.Client(raw, proto.BoundClientTLS())
		defer up.Close()
		down := tls.Server(nc, cfg)
		go func() { io.Copy(down, up); nc.Close() }()
		io.Copy(up, down)
	}()
	before := a.n.Status().SyncErrors
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, bind, err := b.n.secureDial(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.n.handshake(conn, true, "a", bind, false); err == nil {
		t.Fatal("handshake through a TLS-terminating relay succeeded")
	}
	// a refused b's proof, made on the other TLS session.
	waitFor(t, 3*time.Second, "a counts the refused stream", func() bool { return a.n.Status().SyncErrors > before })
}

// TestSyncStrangersBounded: connections that never complete the handshake
// hold at most maxPreauth slots (each was a goroutine and a TLS handshake
// with no bound), and a peer still gets its stream in sync.
func TestSyncStrangersBounded(t *testing.T) {
	g := newGroup(t)
	a := g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	base := runtime.NumGoroutine()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 256 {
		c, err := net.Dial("tcp", a.n.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(500 * time.Millisecond)
	// maxPreauth (64) slots and some slack.
	if grown := runtime.NumGoroutine() - base; grown > 80 {
		t.Errorf("%d idle strangers grew the goroutines by %d, want at most 80", len(held), grown)
	}
	// The strangers go; a real peer gets in.
	for _, c := range held {
		c.Close()
	}
	held = nil
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(20, 0)...)
	waitFor(t, 10*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
}
