// Package proto is the wire protocol between Corral's file-system clients, its
// metadata server and its I/O servers: length-prefixed, versioned frames
// carrying one message each, multiplexed by request ID over a TCP connection.
// docs/pfs-protocol.md describes the bytes.
package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Frame header: magic "CR", version, op, request ID (u32), payload length
// (u32), all little-endian.
const (
	Version    = 2
	HeaderLen  = 12
	MaxPayload = 64<<20 + 4096 // one 64 MiB stripe unit plus its fields
	MaxString  = 4096          // PATH_MAX: names, paths, link targets, messages
	// MaxIO is the largest byte range one Read or Write may carry.
	MaxIO = 64 << 20
)

var (
	// ErrBadMagic means the peer does not speak this protocol.
	ErrBadMagic = errors.New("bad magic (not a corral peer?)")
	// ErrVersion means the peer speaks another protocol version.
	ErrVersion = errors.New("unsupported protocol version")
	// ErrTooBig means a frame announced a payload over MaxPayload.
	ErrTooBig = errors.New("frame too large")
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// AppendFrame encodes m as one frame with request id onto buf.
func AppendFrame(buf []byte, id uint32, m Msg) []byte {
	start := len(buf)
	buf = append(buf, 'C', 'R', Version, byte(m.Op()), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(buf[start+4:], id)
	e := Enc{B: buf}
	m.Encode(&e)
	binary.LittleEndian.PutUint32(e.B[start+8:], uint32(len(e.B)-start-HeaderLen))
	return e.B
}

// tailed is a message whose encoding ends with a large byte slice (file
// data). WriteFrame sends that slice from where it lies instead of copying
// it into the frame buffer.
type tailed interface {
	Msg
	encodeHead(*Enc) // every field, the tail's length prefix included
	tail() []byte
}

// WriteFrame writes one frame to w.
func WriteFrame(w io.Writer, id uint32, m Msg) error {
	bp := bufPool.Get().(*[]byte)
	var b, tail []byte
	if t, ok := m.(tailed); ok {
		b = append((*bp)[:0], 'C', 'R', Version, byte(m.Op()), 0, 0, 0, 0, 0, 0, 0, 0)
		binary.LittleEndian.PutUint32(b[4:], id)
		e := Enc{B: b}
		t.encodeHead(&e)
		b, tail = e.B, t.tail()
		binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-HeaderLen+len(tail)))
	} else {
		b = AppendFrame((*bp)[:0], id, m)
	}
	_, err := w.Write(b)
	if err == nil && len(tail) > 0 {
		_, err = w.Write(tail)
	}
	if cap(b) <= 4<<20 { // do not pin huge buffers in the pool
		*bp = b[:0]
		bufPool.Put(bp)
	}
	return err
}

// readHeader reads and checks one frame header.
func readHeader(r *bufio.Reader) (op Op, id uint32, n uint32, err error) {
	var h [HeaderLen]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return 0, 0, 0, err
	}
	if h[0] != 'C' || h[1] != 'R' {
		return 0, 0, 0, ErrBadMagic
	}
	if h[2] != Version {
		return 0, 0, 0, fmt.Errorf("%w %d (want %d)", ErrVersion, h[2], Version)
	}
	op = Op(h[3])
	id = binary.LittleEndian.Uint32(h[4:])
	n = binary.LittleEndian.Uint32(h[8:])
	if n > MaxPayload {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooBig, n, MaxPayload)
	}
	return op, id, n, nil
}

func readPayload(r *bufio.Reader, payload []byte) error {
	if _, err := io.ReadFull(r, payload); err != nil {
		return fmt.Errorf("payload of %d bytes: %w", len(payload), noEOF(err))
	}
	return nil
}

// ReadFrame reads one frame's header and payload. The payload is freshly
// allocated (messages alias it) and grows as bytes arrive: a frame that
// announces more than it sends costs no more than it sent.
func ReadFrame(r *bufio.Reader) (op Op, id uint32, payload []byte, err error) {
	op, id, n, err := readHeader(r)
	if err != nil {
		return 0, 0, nil, err
	}
	if payload, err = readPayloadN(r, n); err != nil {
		return 0, 0, nil, err
	}
	return op, id, payload, nil
}
