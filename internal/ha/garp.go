package ha

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Gratuitous ARP and unsolicited neighbour advertisements: after a takeover
// the switches and the hosts on the link learn that the VIPs' MAC moved.

// garpFrame is an ARP request announcing vip at mac (RFC 5227 announcement
// form: sender = target = VIP, broadcast), as keepalived sends it.
func garpFrame(mac net.HardwareAddr, vip netip.Addr) []byte {
	b := make([]byte, 0, 42)
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, mac[:6]...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = binary.BigEndian.AppendUint16(b, 1)      // Ethernet
	b = binary.BigEndian.AppendUint16(b, 0x0800) // IPv4
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, 1) // request
	ip := vip.As4()
	b = append(b, mac[:6]...)
	b = append(b, ip[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return append(b, ip[:]...)
}

// unaFrame is an unsolicited neighbour advertisement (ICMPv6 136, override
// flag, target link-layer address option) for vip at mac to ff02::1.
func unaFrame(mac net.HardwareAddr, vip netip.Addr) []byte {
	all := netip.MustParseAddr("ff02::1").As16()
	src := vip.As16()
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 136, 0, 0, 0)                      // type, code, checksum
	icmp = binary.BigEndian.AppendUint32(icmp, 0x20000000) // O (override)
	icmp = append(icmp, src[:]...)                         // target
	icmp = append(icmp, 2, 1)                              // target link-layer address, 8 bytes
	icmp = append(icmp, mac[:6]...)
	binary.BigEndian.PutUint16(icmp[2:], icmpv6Checksum(src, all, icmp))

	b := make([]byte, 0, 14+40+len(icmp))
	b = append(b, 0x33, 0x33, 0, 0, 0, 1)
	b = append(b, mac[:6]...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, 255) // hop limit 255: RFC 4861 requires it
	b = append(b, src[:]...)
	b = append(b, all[:]...)
	return append(b, icmp...)
}

// icmpv6Checksum is the Internet checksum over the IPv6 pseudo-header and
// the message (whose checksum field is zero).
func icmpv6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	add := func(p []byte) {
		for i := 0; i+1 < len(p); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(p[i:]))
		}
		if len(p)%2 == 1 {
			sum += uint32(p[len(p)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	var ph [8]byte
	binary.BigEndian.PutUint32(ph[:], uint32(len(msg)))
	ph[7] = unix.IPPROTO_ICMPV6
	add(ph[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// SendGARP sends one gratuitous ARP (IPv4 VIPs) or unsolicited neighbour
// advertisement (IPv6 VIPs) for every VIP out of ifname, from mac.
// An empty mac means the interface's own.
func SendGARP(ifname string, mac net.HardwareAddr, vips []netip.Addr) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("ha: gratuitous ARP: interface %q: %w", ifname, err)
	}
	if len(mac) == 0 {
		mac = ifi.HardwareAddr
	}
	if len(mac) != 6 {
		return fmt.Errorf("ha: gratuitous ARP on %s: MAC %q is not Ethernet", ifname, mac)
	}
	// Protocol 0: this socket only sends, it receives nothing.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ha: gratuitous ARP on %s: AF_PACKET socket: %w", ifname, err)
	}
	defer unix.Close(fd)
	var first error
	for _, vip := range vips {
		var frame []byte
		var proto uint16
		if vip.Is4() || vip.Is4In6() {
			frame, proto = garpFrame(mac, vip.Unmap()), unix.ETH_P_ARP
		} else {
			frame, proto = unaFrame(mac, vip), unix.ETH_P_IPV6
		}
		sa := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(proto), Halen: 6}
		copy(sa.Addr[:], frame[:6])
		if err := unix.Sendto(fd, frame, 0, sa); err != nil && first == nil {
			first = fmt.Errorf("ha: gratuitous ARP for %s on %s: %w", vip, ifname, err)
		}
	}
	return first
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
