package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
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
// multipath hash (addresses, protocol and ports, so the flows of one client
// spread too; fib_multipath_hash_policy=3 with those fields, which a real
// router would get from policy 1, see below) and without ICMP redirects.
func (b *Bed) SetupRouter(router string) error {
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		// Policy 3 (custom fields) over the 5-tuple: the L4 policy 1
		// would take skb->hash as it comes, and on a bed that is the
		// client socket's random txhash, carried across the veth into
		// the router's namespace: every connection, even from the same
		// ports, would land at random. A separate router box never sees
		// it; policy 3 hashes the headers as that box would.
		{"net.ipv4.fib_multipath_hash_policy", "3"},
		// src ip 0x01, dst ip 0x02, ip proto 0x04, src port 0x10,
		// dst port 0x20.
		{"net.ipv4.fib_multipath_hash_fields", "0x0037"},
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

// Resilient ECMP. A plain multipath route (SetECMP) maps each flow's hash
// onto the next hops by hash-threshold: the hash space is cut into N equal
// ranges, so adding or removing one next hop shifts every range boundary
// and moves flows between directors that stayed. A resilient nexthop group
// (Linux >= 5.13) instead maps the hash onto a fixed table of buckets, each
// owned by one next hop; a change only reassigns buckets:
//   - a next hop that leaves: only its buckets go to the others (its flows
//     spread; nobody else's move);
//   - a next hop that joins: just enough buckets (about 1/N) move to it to
//     balance the table.
// The kernel moves a bucket only when it is idle (no packet for idle_timer
// seconds) or when the group has been unbalanced for unbalanced_timer
// seconds; a leaving next hop's buckets move at once regardless. We set
// idle_timer 0, under which every bucket counts as idle, so a join
// rebalances at once and unbalanced_timer (left at its default 0, "never
// force"; `ip -d nexthop show` confirms both) never matters. The price: a join moves the flows of the buckets
// it takes even if they are mid-connection, which the directors' connection
// sync is there to absorb.

// ECMPBuckets is the bucket count SetECMPResilient uses when given 0. 128
// does not divide by every N, so shares are balanced to within one bucket
// (1/128 of the flows); more buckets cost only router memory.
const ECMPBuckets = 128

// nexthop object ids on the router: host i of the bed is id 1+i; the
// group for a destination is ecmpGroupBase plus its last two bytes, so
// several VIPs can have groups side by side.
const ecmpGroupBase = 0x10000

func (b *Bed) ecmpGroup(dst netip.Addr) int {
	a := dst.As16()
	return ecmpGroupBase + int(a[14])<<8 + int(a[15])
}

func (b *Bed) nexthopID(h string) (int, Host, error) {
	for i, x := range b.Hosts {
		if x.Name == h {
			return 1 + i, x, nil
		}
	}
	_, err := b.Host(h)
	if err == nil {
		err = fmt.Errorf("host %s: not in bed %s", h, b.Name)
	}
	return 0, Host{}, err
}

// SetECMPResilient routes dst (a /32) on host router through a resilient
// nexthop group over the named next hops, equal weights, buckets buckets
// (0: ECMPBuckets), idle_timer 0. Called again with another set it
// replaces the group's members in place (the route and the bucket table
// stay; only buckets of leaving next hops, and those needed to balance
// joining ones, move). The bucket count of an existing group cannot be
// changed: pass the same one (or 0).
func (b *Bed) SetECMPResilient(router string, dst netip.Addr, buckets int, nexthops ...string) error {
	if len(nexthops) == 0 {
		return fmt.Errorf("resilient route %s on %s: no next hop", dst, router)
	}
	if buckets <= 0 {
		buckets = ECMPBuckets
	}
	var members []string
	for _, n := range nexthops {
		id, h, err := b.nexthopID(n)
		if err != nil {
			return err
		}
		// replace: idempotent, and keeps the id (groups refer to it).
		if err := b.IP(router, "nexthop", "replace", "id", strconv.Itoa(id), "via", h.Addr.String(), "dev", "eth0"); err != nil {
			return fmt.Errorf("router %s: next hop %s: %w", router, n, err)
		}
		members = append(members, strconv.Itoa(id))
	}
	g := strconv.Itoa(b.ecmpGroup(dst))
	group := strings.Join(members, "/")
	if b.nexthopExists(router, g) {
		// In place: the bucket count is fixed at creation and may not
		// be given again with another value.
		if err := b.IP(router, "nexthop", "replace", "id", g, "group", group, "type", "resilient", "idle_timer", "0"); err != nil {
			return fmt.Errorf("router %s: replacing group %s for %s with %v: %w", router, g, dst, nexthops, err)
		}
	} else if err := b.IP(router, "nexthop", "add", "id", g, "group", group, "type", "resilient",
		"buckets", strconv.Itoa(buckets), "idle_timer", "0"); err != nil {
		return fmt.Errorf("router %s: resilient group %s for %s over %v: %w", router, g, dst, nexthops, err)
	}
	return b.IP(router, "route", "replace", dst.String()+"/32", "nhid", g)
}

func (b *Bed) nexthopExists(router, id string) bool {
	return exec.Command("ip", "netns", "exec", b.Netns(router), "ip", "nexthop", "show", "id", id).Run() == nil
}

// ECMPBucketOwners counts the buckets of dst's resilient group on router
// per next-hop host (what share of new flows each gets).
func (b *Bed) ECMPBucketOwners(router string, dst netip.Addr) (map[string]int, error) {
	if _, err := b.Host(router); err != nil {
		return nil, err
	}
	g := strconv.Itoa(b.ecmpGroup(dst))
	out, err := exec.Command("ip", "netns", "exec", b.Netns(router), "ip", "-j", "nexthop", "bucket", "show", "id", g).Output()
	if err != nil {
		return nil, fmt.Errorf("router %s: buckets of group %s (%s): %v", router, g, dst, err)
	}
	var rows []struct {
		Bucket struct {
			NHID int `json:"nhid"`
		} `json:"bucket"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("router %s: buckets of group %s: %v", router, g, err)
	}
	m := map[string]int{}
	for _, r := range rows {
		name := fmt.Sprintf("nhid%d", r.Bucket.NHID)
		if i := r.Bucket.NHID - 1; i >= 0 && i < len(b.Hosts) {
			name = b.Hosts[i].Name
		}
		m[name]++
	}
	return m, nil
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
	return inHost(b, h, func() (net.Listener, error) {
		var lc net.ListenConfig
		return lc.Listen(ctx, network, addr)
	})
}

// ECMPMovement is what one leave and one join of a director did to a fixed
// set of flows through the router's route to the VIP.
type ECMPMovement struct {
	// Resilient: a resilient nexthop group; otherwise the plain
	// hash-threshold multipath route.
	Resilient bool `json:"resilient"`
	Directors int  `json:"directors"`
	Flows     int  `json:"flows"`
	// Leaving is the director that left and joined again.
	Leaving string `json:"leaving"`
	// Others is how many flows were on the directors that stayed;
	// OthersMoved how many of those moved when Leaving left (want 0).
	Others      int `json:"others"`
	OthersMoved int `json:"others_moved"`
	// Spread is where Leaving's flows went when it left.
	Spread map[string]int `json:"leaving_flows_to"`
	// JoinMoved is how many flows moved when Leaving joined again (want
	// about Flows/Directors); JoinMovedElsewhere those of them that did
	// not go to Leaving (want 0).
	JoinMoved          int `json:"join_moved"`
	JoinMovedElsewhere int `json:"join_moved_elsewhere"`
}

// MeasureECMPMovement puts vip on lo of each of dirs (plain hosts), serves
// vip:80 there with a server that answers its host's name, routes it from
// client through router (SetupRouter, RouteVia), and dials flows
// connections from fixed source ports 20000.. three times: over all dirs,
// after the last of dirs left, after it joined again. resilient selects
// SetECMPResilient or SetECMP. Connections are made one at a time, each at
// most 5 s; the servers close when it returns.
func (b *Bed) MeasureECMPMovement(ctx context.Context, router, client string, vip netip.Addr, dirs []string, flows int, resilient bool) (ECMPMovement, error) {
	m := ECMPMovement{Resilient: resilient, Directors: len(dirs), Flows: flows}
	if len(dirs) < 2 || flows < 1 || flows > 20000 {
		return m, fmt.Errorf("ECMP movement: %d directors and %d flows, want >= 2 and 1..20000", len(dirs), flows)
	}
	m.Leaving = dirs[len(dirs)-1]
	for _, d := range dirs {
		if err := b.IP(d, "addr", "replace", vip.String()+"/32", "dev", "lo"); err != nil {
			return m, err
		}
		l, err := b.Listen(ctx, d, "tcp", vip.String()+":80")
		if err != nil {
			return m, fmt.Errorf("host %s: %w", d, err)
		}
		defer l.Close()
		go func() {
			for i := 0; i < 4*flows; i++ { // bounded: three rounds of flows
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%s\n", d)
				// The server closes first: its side keeps TIME_WAIT,
				// so the client can reuse its port next round.
				c.Close()
			}
		}()
	}
	if err := b.SetupRouter(router); err != nil {
		return m, err
	}
	if err := b.RouteVia(client, vip, router); err != nil {
		return m, err
	}
	c, err := b.Host(client)
	if err != nil {
		return m, err
	}
	set := func(hops []string) error {
		if resilient {
			return b.SetECMPResilient(router, vip, 0, hops...)
		}
		return b.SetECMP(router, vip, hops...)
	}
	round := func(hops []string) ([]string, error) {
		if err := set(hops); err != nil {
			return nil, err
		}
		return dialFlows(ctx, b.Netns(client), c.Addr, vip, 20000, flows)
	}
	all, err := round(dirs)
	if err != nil {
		return m, err
	}
	less, err := round(dirs[:len(dirs)-1])
	if err != nil {
		return m, err
	}
	back, err := round(dirs)
	if err != nil {
		return m, err
	}
	m.Spread = map[string]int{}
	for i := range all {
		if all[i] == m.Leaving {
			m.Spread[less[i]]++
		} else {
			m.Others++
			if less[i] != all[i] {
				m.OthersMoved++
			}
		}
		if back[i] != less[i] {
			m.JoinMoved++
			if back[i] != m.Leaving {
				m.JoinMovedElsewhere++
			}
		}
	}
	return m, nil
}

// dialFlows connects from addr (in namespace ns) to vip:80 from source
// ports port..port+n-1, one after the other, and returns the name each
// server answered. All dials run on one thread kept in ns.
func dialFlows(ctx context.Context, ns string, addr, vip netip.Addr, port, n int) ([]string, error) {
	return inNetns(ns, func() ([]string, error) { return dialEach(ctx, addr, vip, port, n) })
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
			return nil, fmt.Errorf("flow from port %d to %s: %w", port+i, vip, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("flow from port %d to %s: reading the server's name: %w", port+i, vip, err)
		}
		names[i] = strings.TrimSpace(line)
	}
	return names, nil
}
