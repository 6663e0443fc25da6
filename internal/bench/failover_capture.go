package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/corral-cluster/corral/internal/testbed"
)

// Capture records, for each director of a test bed, the frames it forwards
// for a VIP: IPv4 TCP frames to the VIP that the director sends into the
// bridge (a director forwards by rewriting the destination MAC to a real
// server's and sending the frame back out; nothing else it sends carries
// the VIP as destination). One AF_PACKET socket per director, bound to the
// bridge-side end of its link in the machine's namespace, sees exactly what
// the director puts on the wire, with the kernel's receive timestamp, so
// takeover times and overlaps are measured on the wire and not from any
// director's own account.
type Capture struct {
	names []string
	socks []int
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	frames [][]time.Time // per director, in arrival order
	dsts   []map[string]int
	lost   int
}

// maxCapture bounds the frames kept per director (16 bytes... each): past
// it, frames are counted as lost and the figures say so.
const maxCapture = 4 << 20

// StartCapture starts capturing what each named host forwards for vip.
func StartCapture(bed *testbed.Bed, vip netip.Addr, directors ...string) (*Capture, error) {
	c := &Capture{names: directors, stop: make(chan struct{})}
	for _, d := range directors {
		dev, err := bed.Veth(d)
		if err != nil {
			c.Close()
			return nil, err
		}
		fd, err := openCapture(dev, vip)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("capture on %s (director %s): %w", dev, d, err)
		}
		c.socks = append(c.socks, fd)
		c.frames = append(c.frames, nil)
		c.dsts = append(c.dsts, map[string]int{})
	}
	for i, fd := range c.socks {
		c.wg.Add(1)
		go c.read(i, fd)
	}
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openCapture opens a packet socket on dev that keeps the first 64 bytes of
// received (not outgoing) IPv4 TCP frames to vip.
func openCapture(dev string, vip netip.Addr) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, err
	}
	v4 := vip.As4()
	// The filter runs in the kernel: the director's own traffic
	// (election, sync, ARP) and frames towards it never reach us.
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 7},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_IP, SkipTrue: 5},
		bpf.LoadAbsolute{Off: 23, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_TCP, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 30, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(v4[:]), SkipTrue: 1},
		bpf.RetConstant{Val: 64},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, p := range prog {
		filter[i] = unix.SockFilter{Code: p.Op, Jt: p.Jt, Jf: p.Jf, K: p.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	steps := []func() error{
		func() error { return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) },
		// A read wakes at least every 100 ms, so Close is seen.
		func() error {
			return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
		},
		func() error {
			return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
		},
	}
	for _, st := range steps {
		if err := st(); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

func (c *Capture) read(i, fd int) {
	defer c.wg.Done()
	buf := make([]byte, 128)
	oob := make([]byte, 128)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EBADF) {
				return
			}
			// EAGAIN: the read timed out (Close is checked above).
			// ENETDOWN: the link went down (a test pulled it); the
			// socket stays bound and sees frames again once it is up.
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		at := time.Now()
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
					sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
					nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
					at = time.Unix(sec, nsec)
				}
			}
		}
		if n < 14 {
			continue
		}
		dst := net.HardwareAddr(buf[0:6]).String()
		c.mu.Lock()
		if len(c.frames[i]) < maxCapture {
			c.frames[i] = append(c.frames[i], at)
			if len(c.dsts[i]) < 64 || c.dsts[i][dst] > 0 {
				c.dsts[i][dst]++
			}
		} else {
			c.lost++
		}
		c.mu.Unlock()
	}
}

// Close stops the capture; the figures stay readable.
func (c *Capture) Close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	c.wg.Wait()
	for _, fd := range c.socks {
		unix.Close(fd)
	}
}

func (c *Capture) index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Frames is how many frames director name forwarded in [from, to).
func (c *Capture) Frames(name string, from, to time.Time) int {
	i := c.index(name)
	if i < 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frames[i]
	a := sort.Search(len(f), func(k int) bool { return !f[k].Before(from) })
	b := sort.Search(len(f), func(k int) bool { return !f[k].Before(to) })
	return b - a
}

// Destinations counts the destination MACs of a director's forwarded
// frames (the real servers it sent to).
func (c *Capture) Destinations(name string) map[string]int {
	out := map[string]int{}
	if i := c.index(name); i >= 0 {
		c.mu.Lock()
		for k, v := range c.dsts[i] {
			out[k] = v
		}
		c.mu.Unlock()
	}
	return out
}

// First is the first frame any director other than except forwarded at or
// after t, and which one; ok is false if none did.
func (c *Capture) First(t time.Time, except string) (at time.Time, who string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, f := range c.frames {
		if c.names[i] == except {
			continue
		}
		k := sort.Search(len(f), func(k int) bool { return !f[k].Before(t) })
		if k < len(f) && (!ok || f[k].Before(at)) {
			at, who, ok = f[k], c.names[i], true
		}
	}
	return at, who, ok
}

// Last is director name's last frame before t.
func (c *Capture) Last(name string, t time.Time) (time.Time, bool) {
	i := c.index(name)
	if i < 0 {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frames[i]
	k := sort.Search(len(f), func(k int) bool { return !f[k].Before(t) })
	if k == 0 {
		return time.Time{}, false
	}
	return f[k-1], true
}

// Overlap is evidence of two directors forwarding for the VIP at once.
type Overlap struct {
	At    time.Time
	Who   string // the director whose frame fell inside another's run
	Other string
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s forwarded at %s while %s was forwarding", o.Who, o.At.Format("15:04:05.000000"), o.Other)
}

// SplitBrain finds frames of one director that fall inside another's
// forwarding run (two of its frames at most gap apart, one before and one
// after): two directors forwarding at the same moment. A clean change of
// forwarder, however fast, is not one: the old one's frames end before the
// new one's begin. near counts the looser measure: frames of two
// directors within gap of each other (a fast handover shows there too).
func (c *Capture) SplitBrain(from, to time.Time, gap time.Duration) (overlaps []Overlap, near int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for y, fy := range c.frames {
		a := sort.Search(len(fy), func(k int) bool { return !fy[k].Before(from) })
		for _, t := range fy[a:] {
			if !t.Before(to) {
				break
			}
			for x, fx := range c.frames {
				if x == y || len(fx) == 0 {
					continue
				}
				k := sort.Search(len(fx), func(k int) bool { return !fx[k].Before(t) })
				var prev, next time.Time
				if k > 0 {
					prev = fx[k-1]
				}
				if k < len(fx) {
					next = fx[k]
				}
				if !prev.IsZero() && t.Sub(prev) <= gap || !next.IsZero() && next.Sub(t) <= gap {
					near++
				}
				if !prev.IsZero() && !next.IsZero() && next.Sub(prev) <= gap {
					if len(overlaps) < 100 {
						overlaps = append(overlaps, Overlap{At: t, Who: c.names[y], Other: c.names[x]})
					}
				}
			}
		}
	}
	return overlaps, near
}

// Lost is how many frames were not kept (past maxCapture).
func (c *Capture) Lost() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}
