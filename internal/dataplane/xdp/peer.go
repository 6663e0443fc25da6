package xdp

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AttachPass attaches a program that passes every frame to ifname, the far
// end of a veth whose near end runs the balancer: without an XDP program
// there, the veth silently drops the frames XDP_TX sends it. The program is
// attached through netlink, not a BPF link, so it stays after this process
// exits, until the interface goes or DetachPass.
func AttachPass(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %q: %w", ifname, err)
	}
	var objs passObjects
	if err := loadPassObjects(&objs, nil); err != nil {
		return err
	}
	defer objs.Close() // the attachment keeps its own reference
	if err := netlink.LinkSetXdpFdWithFlags(l, objs.Pass.FD(), unix.XDP_FLAGS_DRV_MODE); err != nil {
		return fmt.Errorf("attaching the pass program to %s: %w", ifname, err)
	}
	return nil
}

// DetachPass removes what AttachPass attached.
func DetachPass(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.LinkSetXdpFdWithFlags(l, -1, unix.XDP_FLAGS_DRV_MODE)
}

// LoadFloor loads the least an XDP forwarder can do (swap the MACs, send
// the frame back): the floor `corral bench director` compares against.
func LoadFloor() (*ebpf.Program, error) {
	var objs floorObjects
	if err := loadFloorObjects(&objs, nil); err != nil {
		return nil, err
	}
	return objs.FloorSwap, nil
}
