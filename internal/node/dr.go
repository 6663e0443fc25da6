package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetupDR makes this host a real server for LVS direct routing (VS/DR): the
// VIP goes on the loopback, so the host accepts packets the director sent
// on unchanged, and the host stops answering ARP for it (arp_ignore=1: only
// for addresses on the asking interface; arp_announce=2: never announce
// the VIP as a source), so the director alone owns the VIP on the link.
// The returned undo puts everything back. IPv6 needs no sysctl: neighbour
// discovery answers only for addresses on the asking interface.
func SetupDR(vip netip.Addr) (undo func(), err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	if vip.Is4() {
		for _, s := range []struct{ name, val string }{
			{"net/ipv4/conf/all/arp_ignore", "1"},
			{"net/ipv4/conf/all/arp_announce", "2"},
		} {
			restore, err := setSysctl(s.name, s.val)
			if err != nil {
				return nil, err
			}
			undos = append(undos, restore)
		}
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	bits := 32
	if vip.Is6() {
		bits = 128
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: vip.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if vip.Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	switch err := netlink.AddrAdd(lo, a); {
	case errors.Is(err, unix.EEXIST): // already there: the operator's, leave it
	case err != nil:
		return nil, fmt.Errorf("adding VIP %s to lo: %w", vip, err)
	default:
		undos = append(undos, func() { netlink.AddrDel(lo, a) })
	}
	return undo, nil
}

// setSysctl writes /proc/sys/NAME unless it holds VAL already, and returns
// what restores the old value.
func setSysctl(name, val string) (func(), error) {
	p := "/proc/sys/" + name
	old, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("sysctl %s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	if strings.TrimSpace(string(old)) == val {
		return func() {}, nil
	}
	if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
		return nil, fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(name, "/", "."), val, err)
	}
	return func() { os.WriteFile(p, old, 0o644) }, nil
}
