package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestECMP: a client reaches a VIP through a router whose multipath route
// spreads its connections over two hosts holding the VIP; replacing the
// route with one next hop moves every new connection there.
func TestECMP(t *testing.T) {
	needRoot(t)
	name := fmt.Sprintf("h4e%d", time.Now().UnixNano()%10000)
	spec := NewSpecOn(name, netip.MustParsePrefix("10.84.0.0/25"), []string{"client", "router", "d1", "d2"}, "")
	t.Cleanup(func() { Down(name) })
	b, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.84.0.100")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{"d1", "d2"} {
		if err := b.IP(d, "addr", "add", vip.String()+"/32", "dev", "lo"); err != nil {
			t.Fatal(err)
		}
		l, err := b.Listen(ctx, d, "tcp", vip.String()+":80")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for i := 0; i < 1000; i++ { // bounded: the test makes 64 connections
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%s\n", d)
				c.Close()
			}
		}()
	}
	if err := b.SetupRouter("router"); err != nil {
		t.Fatal(err)
	}
	if err := b.RouteVia("client", vip, "router"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetECMP("router", vip, "d1", "d2"); err != nil {
		t.Fatal(err)
	}
	r, _ := b.Route("router", vip)
	if !strings.Contains(r, "nexthop") {
		t.Fatalf("router's route to the VIP: %q, want a multipath route", r)
	}
	dial := b.DialContext("client")
	who := func() string {
		c, err := dial(ctx, "tcp", vip.String()+":80")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(line)
	}
	seen := map[string]int{}
	for range 32 {
		seen[who()]++
	}
	if seen["d1"] == 0 || seen["d2"] == 0 {
		t.Fatalf("32 connections through the multipath route: %v, want both directors", seen)
	}
	t.Logf("32 connections spread %v", seen)
	if err := b.SetECMP("router", vip, "d2"); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		if w := who(); w != "d2" {
			t.Fatalf("after the route moved to d2 a connection reached %s", w)
		}
	}
	mac, err := b.MAC("d1")
	if err != nil || len(mac) != 6 {
		t.Fatalf("MAC of d1: %v %v", mac, err)
	}
	// A pulled cable: the client cannot reach d1 until it is back.
	if err := b.LinkDown("d1"); err != nil {
		t.Fatal(err)
	}
	d1, _ := b.Host("d1")
	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	// Nothing listens on d1's own address: a refusal would mean d1 answered.
	if c, err := dial(dctx, "tcp", d1.Addr.String()+":80"); !isTimeout(err) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling d1 through a link that is down: %v, want a timeout", err)
	}
	dcancel()
	if err := b.LinkUp("d1"); err != nil {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
