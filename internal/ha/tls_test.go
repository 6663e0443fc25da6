package ha

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// loopSniffer records the TCP payload of every loopback packet to or from
// 127.0.81.0/24, as an eavesdropper with a packet socket on the path would
// see it (it needs root, as every test of this package does for etcd's
// address range and the test bed).
type loopSniffer struct {
	mu   sync.Mutex
	data bytes.Buffer
	fd   int
	done chan struct{}
}

func sniffLoopback(t *testing.T) *loopSniffer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a packet socket on lo")
	}
	proto := int(htons(syscall.ETH_P_ALL))
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, proto)
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
		t.Fatalf("bind packet socket to lo: %v", err)
	}
	// A big buffer: on a loaded machine the reader falls behind, and a
	// packet socket drops what does not fit.
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 32<<20)
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	s := &loopSniffer{fd: fd, done: make(chan struct{})}
	stop := make(chan struct{})
	go func() {
		defer close(s.done)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the receive timeout: look at stop again
			}
			s.packet(buf[:n])
		}
	}()
	t.Cleanup(func() { close(stop); <-s.done; syscall.Close(fd) })
	return s
}

// packet keeps the TCP payload of an IPv4 packet (after lo's 14-byte
// Ethernet header) between addresses of the test range.
func (s *loopSniffer) packet(b []byte) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		return
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != syscall.IPPROTO_TCP || len(ip) < ihl+20 {
		return
	}
	src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	rng := netip.MustParsePrefix("127.0.81.0/24")
	if !rng.Contains(src) && !rng.Contains(dst) {
		return
	}
	tcp := ip[ihl:]
	off := int(tcp[12]>>4) * 4
	if len(tcp) < off {
		return
	}
	s.mu.Lock()
	s.data.Write(tcp[off:])
	s.mu.Unlock()
}

func (s *loopSniffer) seen(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.data.Bytes(), b)
}

func (s *loopSniffer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Len()
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
			if sn.len() < 150*eventSize {
				t.Fatalf("the sniffer saw %d bytes on lo", sn.len())
			}
			if got := sn.seen(marker); got != c.insecure {
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
