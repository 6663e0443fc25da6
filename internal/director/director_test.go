package director

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func freeAddr(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.%d.%d.%d:0", 1+rand.IntN(250), rand.IntN(256), 1+rand.IntN(250)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	// A random loopback address: nobody else's outgoing connection can take
	// the port between our check and the director's bind.
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), rand.IntN(256), 1+rand.IntN(250))
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func start(t *testing.T, conf string) *Director {
	t.Helper()
	cfg, err := config.Parse("test.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	d := New(quiet)
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// udpEcho answers every datagram with its own address and the payload.
func udpEcho(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(pc.LocalAddr().String()+" "+string(buf[:n])), from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestUDPFlows(t *testing.T) {
	a, b := udpEcho(t), udpEcho(t)
	vip := freeAddr(t, "udp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice dns {\n vip %s\n protocol udp\n scheduler rr\n udp-timeout 1s\n check none\n server %s\n server %s\n}\n", vip, a, b))
	ask := func(c net.Conn, msg string) string {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	c1, _ := net.Dial("udp", vip)
	c2, _ := net.Dial("udp", vip)
	defer c1.Close()
	defer c2.Close()
	r1, r2 := ask(c1, "hello"), ask(c2, "hi")
	s1, s2 := strings.Fields(r1)[0], strings.Fields(r2)[0]
	if s1 == s2 || !strings.HasSuffix(r1, " hello") {
		t.Fatalf("two flows, rr: %q and %q", r1, r2)
	}
	// A flow sticks to its server.
	for i := 0; i < 5; i++ {
		if got := strings.Fields(ask(c1, "again"))[0]; got != s1 {
			t.Fatalf("flow moved from %s to %s", s1, got)
		}
	}
	st := d.Status()[0]
	if st.Servers[0].Active+st.Servers[1].Active != 2 {
		t.Fatalf("active flows %+v", st.Servers)
	}
	if cs := d.Conns(); len(cs) != 2 || cs[0].State != "UDP" || cs[0].Proto != "UDP" || cs[0].Expires <= 0 || cs[0].Expires > time.Second {
		t.Fatalf("connection table %+v", cs)
	}
	// Idle flows end after udp-timeout.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		st = d.Status()[0]
		if st.Servers[0].Active+st.Servers[1].Active == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("flows did not expire: %+v", st.Servers)
}

// tcpName answers each connection with its own address.
func tcpName(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(l.Addr().String() + "\n"))
			c.Close()
		}
	}()
	return l.Addr().String()
}

func TestPersistence(t *testing.T) {
	a, b, c := tcpName(t), tcpName(t), tcpName(t)
	vip := freeAddr(t, "tcp")
	start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice s {\n vip %s\n scheduler rr\n persistence 5s\n check none\n server %s\n server %s\n server %s\n}\n", vip, a, b, c))
	from := func(src string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
		conn, err := d.Dial("tcp", vip)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(line)
	}
	first := from("127.0.0.1")
	for i := 0; i < 5; i++ {
		if got := from("127.0.0.1"); got != first {
			t.Fatalf("persistent client moved from %s to %s", first, got)
		}
	}
	if other := from("127.0.0.2"); other == first {
		t.Fatalf("a second client got the same server %s under rr", other)
	}
}

func TestMWLCPicksLeastPending(t *testing.T) {
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice w {\n vip %s\n dataplane l7\n scheduler mwlc\n check none\n server 127.0.0.1:1 weight=1\n server 127.0.0.1:2 weight=2\n}\n", vip))
	s := (*d.services.Load())["w"]
	s.reals[0].pending.Store(10 << 20)
	s.reals[1].pending.Store(15 << 20) // 7.5 MiB per weight: least
	r, err := s.pick(netip4("10.0.0.1"), 1<<20, nil)
	if err != nil || r != s.reals[1] {
		t.Fatalf("mwlc picked %v %v, want the second server", r, err)
	}
}

func netip4(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestSimultaneousFlowsSpread: flows picked at the same instant count
// against each other (a burst of connections must not all land on the
// server that was idle when the burst began).
func TestSimultaneousFlowsSpread(t *testing.T) {
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice w {\n vip %s\n scheduler wlc\n check none\n server 127.0.0.1:1\n server 127.0.0.1:2\n server 127.0.0.1:3\n}\n", vip))
	s := (*d.services.Load())["w"]
	count := map[*real]int{}
	for i := 0; i < 30; i++ {
		r, err := s.pick(netip4("10.0.0.1"), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		count[r]++
	}
	for _, r := range s.reals {
		if count[r] != 10 {
			t.Fatalf("30 simultaneous flows over 3 servers: %d on %s", count[r], r.addr)
		}
	}
}

// TestPersistentClientCountedAsNewConnection: the service counts each new
// connection once, whether persistence or the scheduler chose its server.
// Before the fix a returning client's connections were not counted in
// new_connections (corral_director_flows_total, the service's Conn/s).
func TestPersistentClientCountedAsNewConnection(t *testing.T) {
	a := tcpName(t)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("service s1 {\n vip %s\n persistence 60s\n check none\n server %s\n}\n", vip, a))
	for i := 0; i < 5; i++ {
		if _, err := ask(vip); err != nil {
			t.Fatal(err)
		}
	}
	st := d.Status()[0]
	if st.NewConns != 5 || st.Servers[0].Connections != 5 {
		t.Fatalf("5 connections of one client: the service counts %d new, its only server %d", st.NewConns, st.Servers[0].Connections)
	}
}
