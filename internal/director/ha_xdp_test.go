package director

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/lab"
)

// TestHAWiring runs the real XDP plane with an ha block on a veth of its
// own, internal/ha replaced by a fake: the VIPs stay off the interface, the
// group gets the VIP set at start and after a reload, a changed ha block is
// refused, and Close leaves the group.
func TestHAWiring(t *testing.T) {
	lab.Need(t, lab.XDP)
	name := fmt.Sprintf("cxh%d", os.Getpid()%100000)
	la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := netlink.LinkAdd(la); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(la) })
	if err := netlink.LinkSetUp(la); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "ha.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var started ha.Config
	fake := &fakeNode{st: ha.Status{Name: "d1", Group: "web", Mode: ha.ActiveStandby, State: ha.StateStandby}}
	old := startHA
	startHA = func(ctx context.Context, cfg ha.Config, dp ha.Dataplane) (haNode, error) {
		started = cfg
		return fake, nil
	}
	t.Cleanup(func() { startHA = old })

	conf := func(vips ...string) string {
		s := fmt.Sprintf("admin 127.0.82.1:0\ninterface %s\nxdp-mode generic\nha {\n group web\n name d1\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file %s\n}\n", name, key)
		for i, v := range vips {
			s += fmt.Sprintf("service s%d {\n vip %s:80\n dataplane xdp\n scheduler mh\n check none\n server 127.0.82.21:80\n}\n", i, v)
		}
		return s
	}
	d := New(nil)
	defer d.Close()
	cfg, err := config.Parse("director.conf", []byte(conf("127.0.82.100")))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if started.Name != "d1" || started.Interface != name || len(started.MAC) != 6 || string(started.Key) != "0123456789abcdef0123456789abcdef" ||
		!slices.Equal(started.VIPs, []netip.Addr{netip.MustParseAddr("127.0.82.100")}) {
		t.Fatalf("ha.Start got %+v", started)
	}
	if onLink(t, name, "127.0.82.100") {
		t.Fatal("an HA director put the VIP on its interface")
	}
	// A reload adds a VIP: the group hears of it.
	cfg2, _ := config.Parse("director.conf", []byte(conf("127.0.82.100", "127.0.82.101")))
	if err := d.Apply(cfg2); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	vips := fake.vips
	fake.mu.Unlock()
	if !slices.Equal(vips, []netip.Addr{netip.MustParseAddr("127.0.82.100"), netip.MustParseAddr("127.0.82.101")}) {
		t.Fatalf("after the reload the group has VIPs %v", vips)
	}
	if onLink(t, name, "127.0.82.101") {
		t.Fatal("a reload put the VIP on the interface")
	}
	cfg3, _ := config.Parse("director.conf", []byte(strings.Replace(conf("127.0.82.100"), "name d1", "name d9", 1)))
	if err := d.Apply(cfg3); err == nil || !strings.Contains(err.Error(), "changing ha needs a restart") {
		t.Fatalf("a changed ha block: %v", err)
	}
	if st, err := d.HAStatus(); err != nil || st.Name != "d1" {
		t.Fatalf("HAStatus: %+v %v", st, err)
	}
	d.Close()
	fake.mu.Lock()
	closed := fake.closed
	fake.mu.Unlock()
	if !closed {
		t.Fatal("Close did not leave the group")
	}
	if d.xdp.Load() != nil {
		t.Fatal("Close left the XDP plane")
	}
}

func onLink(t *testing.T, ifname, a string) bool {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range addrs {
		if x.IP.String() == a {
			return true
		}
	}
	return false
}
