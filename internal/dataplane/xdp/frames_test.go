package xdp

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// pkt describes a test frame; frame() builds it byte by byte, as the
// kernel would see it on the wire (checksums are not checked by the
// program and are left zero).
type pkt struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.AddrPort
	proto          uint8 // 6 or 17
	flags          uint8 // TCP flags
	payload        int
	ihl            int    // IPv4 header words (default 5)
	fragOff        uint16 // IPv4 flags+offset field
}

const (
	fin = 0x01
	syn = 0x02
	rst = 0x04
	ack = 0x10
)

var (
	clientMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	directorMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

func (p pkt) frame() []byte {
	if p.srcMAC == nil {
		p.srcMAC = clientMAC
	}
	if p.dstMAC == nil {
		p.dstMAC = directorMAC
	}
	if p.proto == 0 {
		p.proto = 6
	}
	l4 := make([]byte, 8)
	if p.proto == 6 {
		l4 = make([]byte, 20)
		l4[12] = 5 << 4
		l4[13] = p.flags
		binary.BigEndian.PutUint16(l4[14:], 65535)
	}
	binary.BigEndian.PutUint16(l4[0:], p.src.Port())
	binary.BigEndian.PutUint16(l4[2:], p.dst.Port())
	l4 = append(l4, make([]byte, p.payload)...)
	if p.proto == 17 {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	}
	b := append([]byte{}, p.dstMAC...)
	b = append(b, p.srcMAC...)
	if p.dst.Addr().Is4() {
		ihl := p.ihl
		if ihl == 0 {
			ihl = 5
		}
		ip := make([]byte, ihl*4)
		ip[0] = 4<<4 | byte(ihl)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], p.fragOff)
		ip[8] = 64
		ip[9] = p.proto
		s, d := p.src.Addr().As4(), p.dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		b = append(b, ip...)
	} else {
		ip := make([]byte, 40)
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6] = p.proto
		ip[7] = 64
		s, d := p.src.Addr().As16(), p.dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
		b = append(b, ip...)
	}
	return append(b, l4...)
}
