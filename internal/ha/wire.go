package ha

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// The sync wire: frames of u32 length (of type and payload), u8 type,
// payload. Every integer is big-endian.

// Frame types.
const (
	frameHello         = 1 // group, name (u16-prefixed strings), nonce [32]
	frameAuth          = 2 // HMAC-SHA256 [32]
	frameSnapshotBegin = 3 // empty
	frameBatch         = 4 // seq u64, count u32, events
	frameSnapshotEnd   = 5 // seq u64: the snapshot's last batch
	frameAck           = 6 // seq u64: every batch up to it is applied
	frameHeartbeat     = 7 // empty
	frameBye           = 8 // reason (u16-prefixed string)
)

const (
	// maxFrame bounds what a peer can make us allocate.
	maxFrame = 1 << 20
	// eventSize is one encoded xdp.ConnEvent: op, proto, state, idle
	// seconds u32, client 16+2, VIP 16+2, real 16.
	eventSize = 3 + 4 + 18 + 18 + 16
	// maxBatch events fit in one frame with room to spare.
	maxBatch = 4096
	nonceLen = 32
	macLen   = sha256.Size
	maxName  = 255
)

// frame is one decoded frame.
type frame struct {
	typ    byte
	group  string // Hello
	name   string // Hello
	nonce  []byte // Hello
	mac    []byte // Auth
	seq    uint64 // Batch, SnapshotEnd, Ack
	events []xdp.ConnEvent
	reason string // Bye
}

var errFrame = errors.New("ha: malformed sync frame")

// readFrame reads one frame (at most maxFrame bytes) into buf, returning
// the type and payload (which aliases buf).
func readFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("%w: length %d (1..%d)", errFrame, n, maxFrame)
	}
	if cap(buf) < int(n-1) {
		buf = make([]byte, n-1)
	}
	buf = buf[:n-1]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return h[4], buf, nil
}

// decodeFrame parses a payload of the given type. It never panics on
// untrusted bytes (FuzzDecode).
func decodeFrame(typ byte, p []byte) (frame, error) {
	f := frame{typ: typ}
	var err error
	switch typ {
	case frameHello:
		if f.group, p, err = getString(p); err != nil {
			return f, err
		}
		if f.name, p, err = getString(p); err != nil {
			return f, err
		}
		if len(p) != nonceLen {
			return f, fmt.Errorf("%w: hello nonce of %d bytes", errFrame, len(p))
		}
		f.nonce = append([]byte(nil), p...)
	case frameAuth:
		if len(p) != macLen {
			return f, fmt.Errorf("%w: auth of %d bytes", errFrame, len(p))
		}
		f.mac = append([]byte(nil), p...)
	case frameSnapshotBegin, frameHeartbeat:
		if len(p) != 0 {
			return f, fmt.Errorf("%w: type %d with a payload", errFrame, typ)
		}
	case frameSnapshotEnd, frameAck:
		if len(p) != 8 {
			return f, fmt.Errorf("%w: type %d of %d bytes", errFrame, typ, len(p))
		}
		f.seq = binary.BigEndian.Uint64(p)
	case frameBatch:
		if len(p) < 12 {
			return f, fmt.Errorf("%w: batch of %d bytes", errFrame, len(p))
		}
		f.seq = binary.BigEndian.Uint64(p)
		n := binary.BigEndian.Uint32(p[8:])
		p = p[12:]
		if n > maxBatch || len(p) != int(n)*eventSize {
			return f, fmt.Errorf("%w: batch of %d events in %d bytes", errFrame, n, len(p))
		}
		f.events = make([]xdp.ConnEvent, n)
		for i := range f.events {
			if f.events[i], err = decodeEvent(p[i*eventSize : (i+1)*eventSize]); err != nil {
				return f, err
			}
		}
	case frameBye:
		if f.reason, p, err = getString(p); err != nil {
			return f, err
		}
		if len(p) != 0 {
			return f, fmt.Errorf("%w: bye with %d trailing bytes", errFrame, len(p))
		}
	default:
		return f, fmt.Errorf("%w: unknown type %d", errFrame, typ)
	}
	return f, nil
}

func getString(p []byte) (string, []byte, error) {
	if len(p) < 2 {
		return "", nil, fmt.Errorf("%w: short string", errFrame)
	}
	n := int(binary.BigEndian.Uint16(p))
	if n > maxName || len(p) < 2+n {
		return "", nil, fmt.Errorf("%w: string of %d bytes", errFrame, n)
	}
	return string(p[2 : 2+n]), p[2+n:], nil
}

func putString(b []byte, s string) []byte {
	if len(s) > maxName {
		s = s[:maxName]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendFrame appends a whole frame (header included) of type typ whose
// payload is what body appends.
func appendFrame(b []byte, typ byte, body func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, typ)
	if body != nil {
		b = body(b)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func helloFrame(group, name string, nonce []byte) []byte {
	return appendFrame(nil, frameHello, func(b []byte) []byte {
		b = putString(b, group)
		b = putString(b, name)
		return append(b, nonce...)
	})
}

func seqFrame(typ byte, seq uint64) []byte {
	return appendFrame(nil, typ, func(b []byte) []byte { return binary.BigEndian.AppendUint64(b, seq) })
}

func byeFrame(reason string) []byte {
	return appendFrame(nil, frameBye, func(b []byte) []byte { return putString(b, reason) })
}

// batchFrame encodes at most maxBatch events.
func batchFrame(seq uint64, evs []xdp.ConnEvent) []byte {
	return appendFrame(make([]byte, 0, 17+len(evs)*eventSize), frameBatch, func(b []byte) []byte {
		b = binary.BigEndian.AppendUint64(b, seq)
		b = binary.BigEndian.AppendUint32(b, uint32(len(evs)))
		for _, ev := range evs {
			b = appendEvent(b, ev)
		}
		return b
	})
}

const (
	protoTCP = 6
	protoUDP = 17
)

func appendEvent(b []byte, ev xdp.ConnEvent) []byte {
	proto := byte(protoTCP)
	if ev.Conn.Proto == "udp" {
		proto = protoUDP
	}
	idle := ev.Conn.Idle / time.Second
	if idle > 1<<32-1 {
		idle = 1<<32 - 1
	}
	b = append(b, byte(ev.Op), proto, byte(ev.Conn.State))
	b = binary.BigEndian.AppendUint32(b, uint32(idle))
	b = appendAddr(b, ev.Conn.Client.Addr())
	b = binary.BigEndian.AppendUint16(b, ev.Conn.Client.Port())
	b = appendAddr(b, ev.Conn.VIP.Addr())
	b = binary.BigEndian.AppendUint16(b, ev.Conn.VIP.Port())
	return appendAddr(b, ev.Conn.Real)
}

// appendAddr writes 16 bytes: IPv4 as IPv4-mapped IPv6.
func appendAddr(b []byte, a netip.Addr) []byte {
	x := a.As16()
	return append(b, x[:]...)
}

func getAddr(p []byte) netip.Addr {
	return netip.AddrFrom16([16]byte(p[:16])).Unmap()
}

func decodeEvent(p []byte) (xdp.ConnEvent, error) {
	var ev xdp.ConnEvent
	ev.Op = xdp.EventOp(p[0])
	if ev.Op < xdp.OpNew || ev.Op > xdp.OpDelete {
		return ev, fmt.Errorf("%w: event op %d", errFrame, p[0])
	}
	switch p[1] {
	case protoTCP:
		ev.Conn.Proto = "tcp"
	case protoUDP:
		ev.Conn.Proto = "udp"
	default:
		return ev, fmt.Errorf("%w: event protocol %d", errFrame, p[1])
	}
	ev.Conn.State = xdp.ConnState(p[2])
	if ev.Conn.State < xdp.StateEstablished || ev.Conn.State > xdp.StateUDP {
		return ev, fmt.Errorf("%w: event state %d", errFrame, p[2])
	}
	ev.Conn.Idle = time.Duration(binary.BigEndian.Uint32(p[3:])) * time.Second
	p = p[7:]
	ev.Conn.Client = netip.AddrPortFrom(getAddr(p), binary.BigEndian.Uint16(p[16:]))
	p = p[18:]
	ev.Conn.VIP = netip.AddrPortFrom(getAddr(p), binary.BigEndian.Uint16(p[16:]))
	p = p[18:]
	ev.Conn.Real = getAddr(p)
	return ev, nil
}

// authMAC proves the key: over both names and nonces, the side (so a peer
// cannot reflect our own proof back at us) and bind, the TLS session's
// exported value (nil in plain text), so a relay holding two TLS sessions
// cannot pass proofs between them.
func authMAC(key []byte, side byte, group, dialer, listener string, dNonce, lNonce, bind []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("corral-ha-sync-v1"))
	m.Write([]byte{side})
	for _, s := range []string{group, dialer, listener} {
		m.Write(putString(nil, s))
	}
	m.Write(dNonce)
	m.Write(lNonce)
	m.Write(bind)
	return m.Sum(nil)
}
