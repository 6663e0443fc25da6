package testbed

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestECMPResilient measures flow movement through a resilient nexthop
// group: K flows (fixed source ports) from a client through the router to
// three directors; d3 leaves (no flow of d1 or d2 may move) and joins
// again (at most 1/N of the flows may move, all of them to d3). For
// contrast it logs what the plain multipath route (SetECMP) moves.
func TestECMPResilient(t *testing.T) {
	needRoot(t)
	const k = 600
	name := fmt.Sprintf("h10r%d", time.Now().UnixNano()%10000)
	spec := NewSpecOn(name, netip.MustParsePrefix("10.92.0.0/25"), []string{"client", "router", "d1", "d2", "d3"}, "")
	t.Cleanup(func() { Down(name) })
	b, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.92.0.100")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dirs := []string{"d1", "d2", "d3"}
	for _, d := range dirs {
		if err := b.IP(d, "addr", "add", vip.String()+"/32", "dev", "lo"); err != nil {
			t.Fatal(err)
		}
		l, err := b.Listen(ctx, d, "tcp", vip.String()+":80")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for i := 0; i < 8*k; i++ { // bounded: the test makes 5k connections in all
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%s\n", d)
				c.Close() // the director closes first: its side keeps TIME_WAIT, the client can reuse its port
			}
		}()
	}
	if err := b.SetupRouter("router"); err != nil {
		t.Fatal(err)
	}
	if err := b.RouteVia("client", vip, "router"); err != nil {
		t.Fatal(err)
	}
	client, _ := b.Host("client")
	// owners dials the K flows (source ports 20000..20000+K-1) and returns
	// the director each reached.
	owners := func() []string {
		t.Helper()
		got, err := dialFlows(ctx, b.Netns("client"), client.Addr, vip, 20000, k)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	count := func(o []string) map[string]int {
		m := map[string]int{}
		for _, d := range o {
			m[d]++
		}
		return m
	}

	if err := b.SetECMPResilient("router", vip, 0, dirs...); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Route("router", vip); !strings.Contains(r, "nhid") {
		t.Fatalf("router's route to the VIP: %q, want one through a nexthop group", r)
	}
	bk, err := b.ECMPBucketOwners("router", vip)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("buckets over 3: %v", bk)
	o3 := owners()
	t.Logf("%d flows over 3 directors: %v", k, count(o3))

	// d3 leaves.
	if err := b.SetECMPResilient("router", vip, 0, "d1", "d2"); err != nil {
		t.Fatal(err)
	}
	bk, _ = b.ECMPBucketOwners("router", vip)
	o2 := owners()
	movedStaying, fromD3 := 0, map[string]int{}
	for i := range o3 {
		if o3[i] == "d3" {
			fromD3[o2[i]]++
		} else if o2[i] != o3[i] {
			movedStaying++
		}
	}
	t.Logf("leave (d3 out): buckets %v; flows of d1/d2 moved: %d of %d; d3's %d flows went to %v",
		bk, movedStaying, k-count(o3)["d3"], count(o3)["d3"], fromD3)
	if movedStaying != 0 {
		t.Errorf("d3 left: %d flows of d1/d2 moved, want 0", movedStaying)
	}
	if fromD3["d3"] != 0 || fromD3["d1"] == 0 || fromD3["d2"] == 0 {
		t.Errorf("d3 left: its flows went to %v, want spread over d1 and d2", fromD3)
	}

	// d3 joins again.
	if err := b.SetECMPResilient("router", vip, 0, dirs...); err != nil {
		t.Fatal(err)
	}
	bk, _ = b.ECMPBucketOwners("router", vip)
	o3b := owners()
	moved, notToD3 := 0, 0
	for i := range o2 {
		if o3b[i] != o2[i] {
			moved++
			if o3b[i] != "d3" {
				notToD3++
			}
		}
	}
	frac := float64(moved) / k
	// 1/N of the buckets move (within one bucket: 1/128); with K=600 flows
	// hashed onto them the sampling spread is about 0.02, so 0.06 (3
	// sigma, plus the bucket) is the tolerance.
	const tol = 0.06
	t.Logf("join (d3 back): buckets %v; flows moved %d of %d = %.3f (1/N = %.3f, limit %.3f), %d not to d3",
		bk, moved, k, frac, 1.0/3, 1.0/3+tol, notToD3)
	if frac > 1.0/3+tol {
		t.Errorf("d3 joined: %.3f of the flows moved, want <= 1/3 + %.2f", frac, tol)
	}
	if notToD3 != 0 {
		t.Errorf("d3 joined: %d flows moved between d1 and d2, want 0", notToD3)
	}

	// Contrast: the plain hash-threshold multipath route.
	if err := b.SetECMP("router", vip, dirs...); err != nil {
		t.Fatal(err)
	}
	p3 := owners()
	if err := b.SetECMP("router", vip, "d1", "d2"); err != nil {
		t.Fatal(err)
	}
	p2 := owners()
	pStay, pMovedStay := 0, 0
	for i := range p3 {
		if p3[i] != "d3" {
			pStay++
			if p2[i] != p3[i] {
				pMovedStay++
			}
		}
	}
	if err := b.SetECMP("router", vip, dirs...); err != nil {
		t.Fatal(err)
	}
	p3b := owners()
	pMoved := 0
	for i := range p2 {
		if p3b[i] != p2[i] {
			pMoved++
		}
	}
	t.Logf("plain multipath route for contrast: leave moved %d of d1/d2's %d flows; join moved %d of %d = %.3f",
		pMovedStay, pStay, pMoved, k, float64(pMoved)/k)
}

// dialFlows connects from addr (in namespace ns) to vip:80 from source
// ports port..port+n-1, one after the other, and returns the name each
// server answered. All dials run on one thread kept in ns.
func dialFlows(ctx context.Context, ns string, addr, vip netip.Addr, port, n int) ([]string, error) {
	type result struct {
		names []string
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked if switching back fails: the thread then dies with
		// the goroutine instead of serving others in ns.
		orig, err := netns.Get()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{nil, fmt.Errorf("namespace %s: %w", ns, err)}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{nil, err}
			return
		}
		names, err := dialEach(ctx, addr, vip, port, n)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{names, err}
	}()
	r := <-ch
	return r.names, r.err
}

func dialEach(ctx context.Context, addr, vip netip.Addr, port, n int) ([]string, error) {
	names := make([]string, n)
	for i := range n {
		d := net.Dialer{
			LocalAddr: &net.TCPAddr{IP: addr.AsSlice(), Port: port + i},
			Timeout:   5 * time.Second,
			// The port was used by the previous round: allow rebinding it.
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				}); err != nil {
					return err
				}
				return serr
			},
		}
		c, err := d.DialContext(ctx, "tcp", vip.String()+":80")
		if err != nil {
			return nil, fmt.Errorf("flow from port %d: %w", port+i, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("flow from port %d: reading the director's name: %w", port+i, err)
		}
		names[i] = strings.TrimSpace(line)
	}
	return names, nil
}
