package xdp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/testbed"
)

// TestNeighboursOnTheWire: a real kernel (the client's, in a namespace of
// a test bed) resolves the VIPs, IPv4 and IPv6, to the director's MAC from
// the program's answers while the fence is open, and gets no answer once
// it is closed. The IPv6 advertisement must pass the kernel's checks
// (checksum, hop limit, option) to make a neighbour entry.
func TestNeighboursOnTheWire(t *testing.T) {
	lab.Need(t, lab.Netns, lab.XDP)
	name := fmt.Sprintf("h1n%d", os.Getpid()%10000)
	bed, err := testbed.Up(testbed.NewSpecOn(name, netip.MustParsePrefix("10.81.0.0/24"), []string{"client", "director"}, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Down(name) })
	if err := bed.PrepareDR(AttachPass, "director", "client"); err != nil {
		t.Fatal(err)
	}
	in := func(h string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd, err := bed.Command(ctx, h, args...)
		if err != nil {
			return "", err
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := in("client", "ip", "-6", "addr", "add", "fd81::10/64", "dev", "eth0", "nodad"); err != nil {
		t.Fatalf("client IPv6 address: %v: %s", err, out)
	}

	d, err := Load(Options{ConnTableSize: 1024}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// Attach from a thread inside the director's namespace, then switch
	// it back: a thread left there (the main one is not ended with its
	// goroutine) would make the test bed's teardown kill this process.
	mac := make(chan net.HardwareAddr, 1)
	attachErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			attachErr <- err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromPath("/run/netns/" + bed.Netns("director"))
		if err != nil {
			attachErr <- err
			return
		}
		defer ns.Close()
		if err = netns.Set(ns); err == nil {
			if _, err = d.Attach("eth0", "native"); err == nil {
				var ifc *net.Interface
				if ifc, err = net.InterfaceByName("eth0"); err == nil {
					mac <- ifc.HardwareAddr
				}
			}
		}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread() // else the thread ends with the goroutine
		}
		attachErr <- err
	}()
	if err := <-attachErr; err != nil {
		t.Fatalf("attaching in the director's namespace: %v", err)
	}
	dirMAC := <-mac
	vip4, vip6 := netip.MustParseAddr("10.81.0.100"), netip.MustParseAddr("fd81::100")
	if err := d.SetARP(dirMAC, []netip.Addr{vip4, vip6}); err != nil {
		t.Fatal(err)
	}

	// resolve makes the client's kernel look the VIP up (a datagram to
	// its discard port) and returns the MAC it learnt within wait, "" if
	// none.
	dial := bed.DialContext("client")
	resolve := func(a netip.Addr, wait time.Duration) string {
		t.Helper()
		in("client", "ip", "neigh", "flush", "to", a.String(), "dev", "eth0")
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			c, err := dial(context.Background(), "udp", netip.AddrPortFrom(a, 9).String())
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("x"))
			c.Close()
			time.Sleep(100 * time.Millisecond)
			out, _ := in("client", "ip", "neigh", "show", "to", a.String(), "dev", "eth0")
			if i := strings.Index(out, "lladdr "); i >= 0 {
				return strings.Fields(out[i+len("lladdr "):])[0]
			}
		}
		return ""
	}
	for _, a := range []netip.Addr{vip4, vip6} {
		if got := resolve(a, time.Second); got != "" {
			t.Fatalf("%s resolved to %s with HA off", a, got)
		}
	}
	setHA(t, d, HAFenced, MonoNow()+time.Minute)
	for _, a := range []netip.Addr{vip4, vip6} {
		if got := resolve(a, 3*time.Second); got != dirMAC.String() {
			t.Fatalf("fence open: %s resolved to %q, want the director's %s", a, got, dirMAC)
		}
	}
	setHA(t, d, HAFenced, 0)
	for _, a := range []netip.Addr{vip4, vip6} {
		if got := resolve(a, time.Second); got != "" {
			t.Fatalf("fence closed: %s still resolved, to %s", a, got)
		}
	}
}
