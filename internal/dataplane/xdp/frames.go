package xdp

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// Frame describes a test frame for the kernel's test run (fixtures and
// `corral bench director`); Bytes builds it as it would be on the wire.
// Checksums are left zero: the program does not check them.
type Frame struct {
	SrcMAC, DstMAC net.HardwareAddr // default ClientMAC, DirectorMAC
	Src, Dst       netip.AddrPort
	Proto          uint8 // 6 (default) or 17
	Flags          uint8 // TCP flags
	Payload        int
	IHL            int    // IPv4 header words (default 5)
	FragOff        uint16 // IPv4 flags+offset field
}

// TCP flags.
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
	ACK = 0x10
)

// Default MACs of test frames.
var (
	ClientMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	DirectorMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// Bytes builds the frame.
func (p Frame) Bytes() []byte {
	if p.SrcMAC == nil {
		p.SrcMAC = ClientMAC
	}
	if p.DstMAC == nil {
		p.DstMAC = DirectorMAC
	}
	if p.Proto == 0 {
		p.Proto = 6
	}
	l4 := make([]byte, 8)
	if p.Proto == 6 {
		l4 = make([]byte, 20)
		l4[12] = 5 << 4
		l4[13] = p.Flags
		binary.BigEndian.PutUint16(l4[14:], 65535)
	}
	binary.BigEndian.PutUint16(l4[0:], p.Src.Port())
	binary.BigEndian.PutUint16(l4[2:], p.Dst.Port())
	l4 = append(l4, make([]byte, p.Payload)...)
	if p.Proto == 17 {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	}
	b := append([]byte{}, p.DstMAC...)
	b = append(b, p.SrcMAC...)
	if p.Dst.Addr().Is4() {
		ihl := p.IHL
		if ihl == 0 {
			ihl = 5
		}
		ip := make([]byte, ihl*4)
		ip[0] = 4<<4 | byte(ihl)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], p.FragOff)
		ip[8] = 64
		ip[9] = p.Proto
		s, d := p.Src.Addr().As4(), p.Dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		b = append(b, ip...)
	} else {
		ip := make([]byte, 40)
		ip[0] = 6 << 4
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6] = p.Proto
		ip[7] = 64
		s, d := p.Src.Addr().As16(), p.Dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
		b = append(b, ip...)
	}
	return append(b, l4...)
}
