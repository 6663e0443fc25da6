// Package loopsniff keeps the TCP payload that crosses the loopback
// interface, as an eavesdropper with a packet socket sees it: tests use it
// to check that what must be encrypted is (file data, HA sync flows).
// Linux only; it needs CAP_NET_RAW (root).
package loopsniff

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Sniffer captures IPv4 TCP payload on lo for the packets keep accepts.
type Sniffer struct {
	fd   int
	keep func(src, dst netip.AddrPort) bool
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	data bytes.Buffer
}

const ethPAll = 0x0300 // htons(ETH_P_ALL)

// Start opens a packet socket on lo; keep chooses the packets (by source
// and destination) whose TCP payload is kept. Close it when done.
func Start(keep func(src, dst netip.AddrPort) bool) (*Sniffer, error) {
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, ethPAll)
	if err != nil {
		return nil, err
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: ethPAll, Ifindex: lo.Index}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	// A big buffer: on a loaded machine the reader falls behind, and a
	// packet socket drops what does not fit.
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 32<<20)
	tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	s := &Sniffer{fd: fd, keep: keep, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

func (s *Sniffer) run() {
	defer close(s.done)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		// The receive timeout wakes the loop to look at stop.
		if n, _, err := syscall.Recvfrom(s.fd, buf, 0); err == nil {
			s.packet(buf[:n])
		}
	}
}

// packet keeps the TCP payload of an IPv4 packet (after lo's 14-byte
// Ethernet header) when keep accepts its addresses.
func (s *Sniffer) packet(b []byte) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
		return
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != syscall.IPPROTO_TCP || ihl < 20 || len(ip) < ihl+20 {
		return
	}
	tcp := ip[ihl:]
	off := int(tcp[12]>>4) * 4
	if len(tcp) < off {
		return
	}
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(tcp))
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(tcp[2:]))
	if !s.keep(src, dst) {
		return
	}
	s.mu.Lock()
	s.data.Write(tcp[off:])
	s.mu.Unlock()
}

// Seen says whether b appeared in the kept payload.
func (s *Sniffer) Seen(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.data.Bytes(), b)
}

// Len is how many payload bytes were kept.
func (s *Sniffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Len()
}

// Close stops the capture.
func (s *Sniffer) Close() {
	close(s.stop)
	<-s.done
	syscall.Close(s.fd)
}
