package testbed

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// Active-active directors sit behind a router host: clients route the VIP
// through it and it spreads flows over the directors with a Linux ECMP
// (multipath) route hashed on the 4-tuple, as a data-centre router would.
// The bed is one L2 segment, so the router, the clients and the directors
// are neighbours: ICMP redirects must be off both ways, or the router would
// tell clients to go straight to a director and the spreading would end.

// Sysctl sets key=value in host h's network namespace (net.* keys are per
// namespace).
func (b *Bed) Sysctl(h, key, value string) error {
	if _, err := b.Host(h); err != nil {
		return err
	}
	return run("ip", "netns", "exec", b.Netns(h), "sysctl", "-q", "-w", key+"="+value)
}

// IP runs `ip ARGS...` in host h.
func (b *Bed) IP(h string, args ...string) error {
	if _, err := b.Host(h); err != nil {
		return err
	}
	return run(append([]string{"ip", "netns", "exec", b.Netns(h), "ip"}, args...)...)
}

// SetupRouter makes host router forward between the bed's hosts with an L4
// multipath hash (fib_multipath_hash_policy=1: addresses and ports, so the
// flows of one client spread too) and without ICMP redirects.
func (b *Bed) SetupRouter(router string) error {
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv4.fib_multipath_hash_policy", "1"},
		{"net.ipv4.conf.all.send_redirects", "0"},
		{"net.ipv4.conf.default.send_redirects", "0"},
		{"net.ipv4.conf.eth0.send_redirects", "0"},
		// The router hands packets back out of the interface they came
		// in on: reverse-path filtering must not drop them.
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.eth0.rp_filter", "0"},
	} {
		if err := b.Sysctl(router, kv[0], kv[1]); err != nil {
			return fmt.Errorf("router %s: %w", router, err)
		}
	}
	return nil
}

// RouteVia makes client reach dst (a /32) through host via, and refuse the
// redirects that would shortcut it.
func (b *Bed) RouteVia(client string, dst netip.Addr, via string) error {
	v, err := b.Host(via)
	if err != nil {
		return err
	}
	for _, k := range []string{"net.ipv4.conf.all.accept_redirects", "net.ipv4.conf.eth0.accept_redirects"} {
		if err := b.Sysctl(client, k, "0"); err != nil {
			return err
		}
	}
	return b.IP(client, "route", "replace", dst.String()+"/32", "via", v.Addr.String(), "dev", "eth0")
}

// SetECMP routes dst (a /32) on host router over the named next hops,
// equal weights; one next hop is a plain route. Replacing the route moves
// flows at once (the next packet of each flow takes the new route): tests
// use it to move a flow to another director mid-connection.
func (b *Bed) SetECMP(router string, dst netip.Addr, nexthops ...string) error {
	if len(nexthops) == 0 {
		return fmt.Errorf("route %s on %s: no next hop", dst, router)
	}
	args := []string{"route", "replace", dst.String() + "/32"}
	for _, n := range nexthops {
		h, err := b.Host(n)
		if err != nil {
			return err
		}
		if len(nexthops) == 1 {
			args = append(args, "via", h.Addr.String(), "dev", "eth0")
		} else {
			args = append(args, "nexthop", "via", h.Addr.String(), "dev", "eth0", "weight", "1")
		}
	}
	return b.IP(router, args...)
}

// Route returns host h's route to dst as `ip route get` prints it.
func (b *Bed) Route(h string, dst netip.Addr) (string, error) {
	if _, err := b.Host(h); err != nil {
		return "", err
	}
	out, err := exec.Command("ip", "netns", "exec", b.Netns(h), "ip", "route", "show", dst.String()+"/32").CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// LinkDown and LinkUp take host h's link to the bridge down or up from the
// bridge side (a cable pulled): h keeps its configuration, and its eth0
// loses carrier.
func (b *Bed) LinkDown(h string) error { return b.setLink(h, "down") }

// LinkUp puts back what LinkDown took away.
func (b *Bed) LinkUp(h string) error { return b.setLink(h, "up") }

func (b *Bed) setLink(h, state string) error {
	for i, x := range b.Hosts {
		if x.Name == h {
			return run("ip", "link", "set", b.veth(i), state)
		}
	}
	_, err := b.Host(h)
	return err
}

// Veth is the bridge-side end of host h's link (captures on it see what h
// sends as received frames).
func (b *Bed) Veth(h string) (string, error) {
	for i, x := range b.Hosts {
		if x.Name == h {
			return b.veth(i), nil
		}
	}
	_, err := b.Host(h)
	return "", err
}

// MAC is the hardware address of host h's eth0.
func (b *Bed) MAC(h string) (net.HardwareAddr, error) {
	if _, err := b.Host(h); err != nil {
		return nil, err
	}
	out, err := exec.Command("ip", "netns", "exec", b.Netns(h), "cat", "/sys/class/net/eth0/address").Output()
	if err != nil {
		return nil, fmt.Errorf("host %s: MAC of eth0: %v", h, err)
	}
	return net.ParseMAC(strings.TrimSpace(string(out)))
}

// Listen opens a listener inside host h (tests' servers): the socket is
// made in h's namespace and keeps it for its life.
func (b *Bed) Listen(ctx context.Context, h, network, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked if switching back fails: the thread then dies
		// with the goroutine instead of serving others in h.
		orig, err := netns.Get()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(b.Netns(h))
		if err != nil {
			ch <- result{nil, fmt.Errorf("host %s: %w", h, err)}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{nil, err}
			return
		}
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, network, addr)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}
