package director

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

// tcpEcho answers each line with the server's address and the line; each
// connection it accepted is counted.
func tcpEcho(t *testing.T) (addr string, accepted func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s %s", l.Addr(), line)
				}
			}()
		}
	}()
	return l.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
	return d.Dial("tcp", addr)
}

// echoes reports whether c still answers a line through the director.
func echoes(c net.Conn) error {
	c.SetDeadline(time.Now().Add(3 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasSuffix(line, " ping\n") {
		return fmt.Errorf("answer %q", line)
	}
	return nil
}

// l4 is the l4 status of the director's only service.
func l4(t *testing.T, d *Director) L4Status {
	t.Helper()
	st := d.Status()
	if len(st) != 1 || st[0].L4 == nil {
		t.Fatalf("status %+v: want one l4 service", st)
	}
	return *st[0].L4
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestL4UDPFloodCapped: datagrams from 300 source addresses, one flow each,
// against a service capped at 20 flows: the flows stay at the cap, the rest
// are dropped and counted (not given a socket: the descriptors stay put),
// the real server sees no more flows than the cap, and a flow established
// before the flood is still served.
func TestL4UDPFloodCapped(t *testing.T) {
	const cap, flood = 20, 300
	// The real server counts the flows (source ports) it sees.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			seen[from.String()] = true
			mu.Unlock()
			pc.WriteTo(buf[:n], from)
		}
	}()
	vip := freeAddr(t, "udp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice dns {\n vip %s\n protocol udp\n max-conns %d\n check none\n server %s\n}\n", vip, cap, pc.LocalAddr()))

	legit, err := net.Dial("udp", vip)
	if err != nil {
		t.Fatal(err)
	}
	defer legit.Close()
	ask := func() error {
		legit.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := legit.Write([]byte("legit")); err != nil {
			return err
		}
		buf := make([]byte, 64)
		n, err := legit.Read(buf)
		if err == nil && string(buf[:n]) != "legit" {
			err = fmt.Errorf("answer %q", buf[:n])
		}
		return err
	}
	if err := ask(); err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)

	for i := 0; i < flood; i++ {
		src := fmt.Sprintf("127.66.%d.%d", i/250, 1+i%250)
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(mustAddrPort(t, vip)))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("flood"))
		c.Close()
		if i%25 == 24 || i == flood-1 {
			// In steps the VIP's socket buffer holds: a datagram it
			// dropped would be no test of the director.
			waitFor(t, "the flood counted", 5*time.Second, func() bool {
				l := l4(t, d)
				return int(l.RefusedService)+l.Flows-1 == i+1
			})
		}
	}
	want := int64(flood - (cap - 1))
	l := l4(t, d)
	if l.Flows != cap || l.MaxConns != cap || l.Sources != cap || l.RefusedSource != 0 {
		t.Fatalf("after the flood: %+v; want %d flows from %d sources", l, cap, cap)
	}
	if n := openFDs(t) - fds; n > cap {
		t.Errorf("%d more descriptors after the flood; want at most %d (one per admitted flow)", n, cap)
	}
	mu.Lock()
	flows := len(seen)
	mu.Unlock()
	if flows > cap {
		t.Errorf("the real server saw %d flows; want at most %d", flows, cap)
	}
	if err := ask(); err != nil {
		t.Fatalf("the established flow during the flood: %v", err)
	}
	// The refusals are in the metrics, by reason, beside the flows.
	m := gather(t, d)
	if v := m[`corral_director_l4_refused_total{reason="service_limit",service="dns"}`]; v != float64(want) {
		t.Errorf("refused service_limit = %v, want %d (all: %v)", v, want, m)
	}
	if v := m[`corral_director_l4_flows{service="dns"}`]; v != cap {
		t.Errorf("l4_flows = %v, want %d", v, cap)
	}
	if v := m[`corral_director_l4_flow_limit{scope="source",service="dns"}`]; v != cap {
		t.Errorf("flow_limit source = %v, want %d (the default, bounded by max-conns)", v, cap)
	}
}

// TestL4UDPPerSourceCapAndExpiry: one address's flows (many source ports)
// stop at max-conns-per-source while another address gets through; once
// the flows expire after udp-timeout their slots are free again.
func TestL4UDPPerSourceCapAndExpiry(t *testing.T) {
	srv := udpEcho(t)
	vip := freeAddr(t, "udp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice dns {\n vip %s\n protocol udp\n udp-timeout 1s\n max-conns-per-source 3\n check none\n server %s\n}\n", vip, srv))
	wait := 3 * time.Second // for an answer; a refusal is waited for less
	ask := func(src string) error {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(mustAddrPort(t, vip)))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(wait))
		c.Write([]byte("hi"))
		buf := make([]byte, 128)
		_, err = c.Read(buf)
		return err
	}
	for i := 0; i < 3; i++ {
		if err := ask("127.0.0.1"); err != nil {
			t.Fatalf("flow %d from 127.0.0.1: %v", i+1, err)
		}
	}
	wait = 300 * time.Millisecond
	if err := ask("127.0.0.1"); err == nil {
		t.Fatal("a 4th flow from 127.0.0.1 was served past max-conns-per-source 3")
	}
	wait = 3 * time.Second
	if err := ask("127.0.0.2"); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if l := l4(t, d); l.Flows != 4 || l.Busiest != 3 || l.RefusedSource != 1 || l.UDPTimeout != "1s" {
		t.Fatalf("%+v", l)
	}
	// udp-timeout 1s: gone within the timeout and the second sweep after it.
	waitFor(t, "the flows to expire", 4*time.Second, func() bool { return l4(t, d).Flows == 0 })
	if err := ask("127.0.0.1"); err != nil {
		t.Fatalf("after the flows expired: %v", err)
	}
}

// TestL4TCPCaps: the 4th connection from one address is reset under
// max-conns-per-source 3 while another address gets through; at max-conns
// 5 a new address is refused too; the established connections all go on,
// and a slot freed by a closed connection is taken again.
func TestL4TCPCaps(t *testing.T) {
	srv, accepted := tcpEcho(t)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice www {\n vip %s\n max-conns 5\n max-conns-per-source 3\n check none\n server %s\n}\n", vip, srv))
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	connect := func(src string) error {
		c, err := dialFrom(src, vip)
		if err != nil {
			return err
		}
		if err := echoes(c); err != nil {
			c.Close()
			return err
		}
		open = append(open, c)
		return nil
	}
	for i := 0; i < 3; i++ {
		if err := connect("127.0.0.1"); err != nil {
			t.Fatalf("connection %d from 127.0.0.1: %v", i+1, err)
		}
	}
	if err := connect("127.0.0.1"); err == nil {
		t.Fatal("a 4th connection from 127.0.0.1 was served past max-conns-per-source 3")
	}
	for i := 0; i < 2; i++ {
		if err := connect("127.0.0.2"); err != nil {
			t.Fatalf("connection %d from 127.0.0.2: %v", i+1, err)
		}
	}
	if err := connect("127.0.0.3"); err == nil {
		t.Fatal("a 6th connection was served past max-conns 5")
	}
	if n := accepted(); n != 5 {
		t.Errorf("the real server accepted %d connections, want 5", n)
	}
	for i, c := range open {
		if err := echoes(c); err != nil {
			t.Fatalf("established connection %d after the refusals: %v", i, err)
		}
	}
	if l := l4(t, d); l.Flows != 5 || l.Sources != 2 || l.Busiest != 3 || l.RefusedSource != 1 || l.RefusedService != 1 ||
		l.TCPTimeout != "15m0s" || l.TCPFinTimeout != "2m0s" {
		t.Fatalf("%+v", l)
	}
	open[0].Close()
	open = open[1:]
	waitFor(t, "the closed connection's slot", 3*time.Second, func() bool { return l4(t, d).Flows == 4 })
	if err := connect("127.0.0.1"); err != nil {
		t.Fatalf("after a connection from 127.0.0.1 ended: %v", err)
	}
}

// silentServer accepts connections, reads what comes and never answers or
// closes (as a stuck backend, or the far end of an idle session).
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	return l.Addr().String()
}

// TestL4TCPIdleTimeout: a connection that moves no byte for tcp-timeout is
// ended (its slot freed, counted), as is a half-closed one after
// tcp-fin-timeout; a connection that keeps talking outlives both.
func TestL4TCPIdleTimeout(t *testing.T) {
	srv := silentServer(t)
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice www {\n vip %s\n tcp-timeout 1s\n tcp-fin-timeout 1s\n check none\n server %s\n}\n", vip, srv))
	// ended waits for c to be closed by the director; how long it took.
	ended := func(c net.Conn, within time.Duration) (time.Duration, error) {
		t0 := time.Now()
		c.SetReadDeadline(t0.Add(within))
		_, err := c.Read(make([]byte, 1))
		if err == io.EOF {
			return time.Since(t0), nil
		}
		return 0, fmt.Errorf("read: %v, want EOF from the director", err)
	}
	idle, err := net.Dial("tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	stop := make(chan struct{})
	busyErr := make(chan error, 1)
	go func() {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				busyErr <- nil
				return
			case <-tk.C:
			}
			if _, err := busy.Write([]byte("x")); err != nil {
				busyErr <- err
				return
			}
		}
	}()
	idle.Write([]byte("hello"))
	took, err := ended(idle, 5*time.Second)
	if err != nil {
		t.Fatalf("idle connection: %v", err)
	}
	if took < 900*time.Millisecond {
		t.Errorf("idle connection ended after %v, before tcp-timeout 1s", took)
	}
	waitFor(t, "the idle connection counted", 2*time.Second, func() bool { return l4(t, d).IdleClosed == 1 && l4(t, d).Flows == 1 })

	// Half-closed by the client, then silent: tcp-fin-timeout.
	half, err := net.Dial("tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	half.(*net.TCPConn).CloseWrite()
	if _, err := ended(half, 5*time.Second); err != nil {
		t.Fatalf("half-closed connection: %v", err)
	}
	waitFor(t, "the half-closed connection counted", 2*time.Second, func() bool { return l4(t, d).IdleClosed == 2 })

	close(stop)
	if err := <-busyErr; err != nil {
		t.Fatalf("the busy connection broke: %v", err)
	}
	if l := l4(t, d); l.Flows != 1 {
		t.Fatalf("flows %+v: the busy connection should still be there", l)
	}
}

// TestL4TCPStalledReader: a client that stops reading while the server
// sends is ended after tcp-timeout too, though the director's write to it
// blocks rather than waits for a read.
func TestL4TCPStalledReader(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 64<<10)
		for {
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	vip := freeAddr(t, "tcp")
	d := start(t, fmt.Sprintf("admin 127.0.0.1:1\nservice www {\n vip %s\n tcp-timeout 1s\n check none\n server %s\n}\n", vip, l.Addr()))
	c, err := net.Dial("tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the stalled connection to end", 6*time.Second, func() bool { return l4(t, d).IdleClosed == 1 && l4(t, d).Flows == 0 })
}

// gather scrapes the director's /metrics: "name{label="v",...}" -> value.
func gather(t *testing.T, d *Director) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// TestL4ReloadAppliesTimeoutAndCaps: a reload's tcp-timeout applies to
// established connections (as the XDP dataplane's timeouts do), and its
// lower cap refuses new connections without cutting the ones over it.
func TestL4ReloadAppliesTimeoutAndCaps(t *testing.T) {
	srv := silentServer(t)
	vip := freeAddr(t, "tcp")
	conf := func(timeout string, maxConns int) string {
		return fmt.Sprintf("admin 127.0.0.1:1\nservice www {\n vip %s\n tcp-timeout %s\n max-conns %d\n check none\n server %s\n}\n", vip, timeout, maxConns, srv)
	}
	d := start(t, conf("4s", 10))
	var cs []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", vip)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	waitFor(t, "three connections", 2*time.Second, func() bool { return l4(t, d).Flows == 3 })
	cfg, err := config.Parse("test.conf", []byte(conf("1s", 2)))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	// Over the new cap: kept, and a new one is refused.
	if l := l4(t, d); l.Flows != 3 || l.MaxConns != 2 {
		t.Fatalf("after the reload: %+v", l)
	}
	extra, err := net.Dial("tcp", vip)
	if err == nil {
		defer extra.Close()
		extra.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := extra.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("a connection past the lowered cap was not refused: %v", err)
		}
	}
	// Idle for the new 1 s (plus a check period of the old 4 s), not 4 s.
	for _, c := range cs {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("established connection: %v, want EOF", err)
		}
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("idle connections ended %v after the reload to tcp-timeout 1s", took)
	}
	if l := l4(t, d); l.RefusedService != 1 {
		t.Errorf("refusals %+v", l)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestSourceKey: max-conns-per-source counts an IPv6 client by its /64, so
// that one host cannot pass the cap by walking its own prefix; IPv4
// clients (mapped or not) by address.
func TestSourceKey(t *testing.T) {
	var l flowLimits
	for i := 0; i < 3; i++ {
		if !l.admit(netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2::%x", i+1)), 100, 3) {
			t.Fatalf("flow %d from 2001:db8:1:2::/64 refused under the cap", i+1)
		}
	}
	if l.admit(netip.MustParseAddr("2001:db8:1:2:ffff::9"), 100, 3) {
		t.Fatal("a 4th flow from the same /64 was admitted")
	}
	if !l.admit(netip.MustParseAddr("2001:db8:1:3::1"), 100, 3) {
		t.Fatal("another /64 refused")
	}
	if !l.admit(netip.MustParseAddr("::ffff:192.0.2.1"), 100, 3) || !l.admit(netip.MustParseAddr("192.0.2.1"), 100, 3) ||
		!l.admit(netip.MustParseAddr("192.0.2.2"), 100, 3) {
		t.Fatal("IPv4 clients refused")
	}
	if n := l.bySrc[netip.MustParseAddr("192.0.2.1")]; n != 2 {
		t.Fatalf("192.0.2.1 and its mapped form: %d flows, want 2 under one key", n)
	}
	l.release(netip.MustParseAddr("2001:db8:1:2::1"))
	if !l.admit(netip.MustParseAddr("2001:db8:1:2::77"), 100, 3) {
		t.Fatal("a released slot of the /64 was not given again")
	}
	if l.n != 7 || l.refusedSource.Load() != 1 {
		t.Fatalf("n %d, refused %d", l.n, l.refusedSource.Load())
	}
}
