package ha

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"golang.org/x/sys/unix"
)

// inNetns runs f on a thread moved into the named namespace.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread stays locked and so dies with the goroutine: it never
		// returns to the runtime in the other namespace.
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("open netns %s: %v", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Errorf("setns %s: %v", ns, err)
			return
		}
		f()
	}()
	<-done
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// TestGARPOnVeth sends the announcements on one end of a veth pair in a
// namespace of its own and reads them back on the other.
func TestGARPOnVeth(t *testing.T) {
	lab.Need(t, lab.Netns)
	ns := fmt.Sprintf("ha-garp-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "add", "hga", "type", "veth", "peer", "name", "hgb")
	run(t, "ip", "-n", ns, "link", "set", "hga", "address", "02:00:00:81:00:0a", "up")
	run(t, "ip", "-n", ns, "link", "set", "hgb", "up")
	mac, _ := net.ParseMAC("02:00:00:81:00:0a")
	v4, v6 := netip.MustParseAddr("127.0.81.100"), netip.MustParseAddr("fd00:81::100")

	var got [][]byte
	inNetns(t, ns, func() {
		rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			t.Errorf("rx socket: %v", err)
			return
		}
		defer unix.Close(rx)
		ifb, err := net.InterfaceByName("hgb")
		if err != nil {
			t.Errorf("hgb: %v", err)
			return
		}
		if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifb.Index}); err != nil {
			t.Errorf("bind: %v", err)
			return
		}
		unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
		// No MAC given: the interface's own (set above) is used.
		if err := SendGARP("hga", nil, []netip.Addr{v4, v6}); err != nil {
			t.Errorf("SendGARP: %v", err)
			return
		}
		end := time.Now().Add(2 * time.Second)
		buf := make([]byte, 2048)
		for len(got) < 2 && time.Now().Before(end) {
			k, _, err := unix.Recvfrom(rx, buf, 0)
			if err != nil {
				continue
			}
			f := append([]byte(nil), buf[:k]...)
			// Only ours: the kernel may send its own IPv6 traffic (DAD, MLD).
			if bytes.Equal(f[6:12], mac) && (binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_ARP || len(f) > 54 && f[54] == 136) {
				got = append(got, f)
			}
		}
	})
	if len(got) != 2 {
		t.Fatalf("read %d announcements back, want 2", len(got))
	}
	arp := got[0]
	if !bytes.Equal(arp, garpFrame(mac, v4)) || len(arp) != 42 {
		t.Errorf("ARP frame % x", arp)
	}
	if op := binary.BigEndian.Uint16(arp[20:]); op != 1 || !bytes.Equal(arp[28:32], arp[38:42]) || !bytes.Equal(arp[28:32], v4.AsSlice()) {
		t.Errorf("not a gratuitous ARP request for %s: % x", v4, arp)
	}
	na := got[1]
	if !bytes.Equal(na[:6], []byte{0x33, 0x33, 0, 0, 0, 1}) || na[54] != 136 || na[58]&0x20 == 0 {
		t.Errorf("not an unsolicited NA with override: % x", na)
	}
	// The checksum over the pseudo-header and the message sums to zero.
	var src, dst [16]byte
	copy(src[:], na[22:38])
	copy(dst[:], na[38:54])
	if c := icmpv6Checksum(src, dst, na[54:]); c != 0 {
		t.Errorf("ICMPv6 checksum does not verify (%#x)", c)
	}
	if !bytes.Equal(na[62:78], v6.AsSlice()) || !bytes.Equal(na[80:86], mac) {
		t.Errorf("NA target or link-layer option wrong: % x", na)
	}
}
