package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// Enc appends little-endian fields to a buffer.
type Enc struct{ B []byte }

func (e *Enc) U8(v uint8)   { e.B = append(e.B, v) }
func (e *Enc) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Enc) I64(v int64)  { e.U64(uint64(v)) }
func (e *Enc) Bool(v bool) {
	if v {
		e.U8(1)
	} else {
		e.U8(0)
	}
}
func (e *Enc) Str(s string) { e.U32(uint32(len(s))); e.B = append(e.B, s...) }
func (e *Enc) Bytes(b []byte) {
	e.U32(uint32(len(b)))
	e.B = append(e.B, b...)
}
func (e *Enc) U32s(v []uint32) {
	e.U32(uint32(len(v)))
	for _, x := range v {
		e.U32(x)
	}
}

// U64s writes a count, then the values.
func (e *Enc) U64s(v []uint64) {
	e.U32(uint32(len(v)))
	for _, x := range v {
		e.U64(x)
	}
}

// ErrShort is returned when a payload ends before its fields do.
var ErrShort = errors.New("payload truncated")

// Dec reads fields written by Enc. The first error sticks: later reads return
// zero values, and Err reports it, so decoders read every field and check once.
type Dec struct {
	B   []byte
	err error
}

func (d *Dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.B) < n {
		d.err = ErrShort
		return false
	}
	return true
}

func (d *Dec) U8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}
func (d *Dec) U32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.B)
	d.B = d.B[4:]
	return v
}
func (d *Dec) U64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.B)
	d.B = d.B[8:]
	return v
}
func (d *Dec) I64() int64 { return int64(d.U64()) }

// OptU64 reads a trailing optional field that Enc writes only when it is
// not zero: absent reads as 0, and an explicit 0 is refused, so every
// message has one encoding (the older form without the field stays valid).
func (d *Dec) OptU64() uint64 {
	if d.err != nil || len(d.B) == 0 {
		return 0
	}
	v := d.U64()
	if v == 0 && d.err == nil {
		d.err = errors.New("optional field present but zero")
	}
	return v
}
func (d *Dec) Bool() bool {
	v := d.U8()
	if v > 1 && d.err == nil {
		d.err = fmt.Errorf("bad boolean %d", v)
	}
	return v == 1
}

// Bytes returns a slice aliasing the payload (no copy: write data is large).
func (d *Dec) Bytes() []byte {
	n := d.U32()
	if !d.need(int(n)) {
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

// Str limits strings to MaxString bytes: names and paths, never data.
func (d *Dec) Str() string {
	n := d.U32()
	if n > MaxString {
		if d.err == nil {
			// ENAMETOOLONG: the server answers it to the request (the
			// frame itself is whole) instead of dropping the connection.
			d.err = fmt.Errorf("string of %d bytes exceeds limit %d: %w", n, MaxString, syscall.ENAMETOOLONG)
		}
		return ""
	}
	if !d.need(int(n)) {
		return ""
	}
	v := string(d.B[:n])
	d.B = d.B[n:]
	return v
}

func (d *Dec) U32s() []uint32 {
	n := d.U32()
	if !d.need(int(n) * 4) {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = d.U32()
	}
	return v
}

// U64s reads what Enc.U64s wrote.
func (d *Dec) U64s() []uint64 {
	v := make([]uint64, d.Count(8))
	for i := range v {
		v[i] = d.U64()
	}
	return v
}

// Count reads a slice length and checks that at least min bytes per element
// remain, so a forged count cannot make the decoder allocate wildly.
func (d *Dec) Count(minElem int) int {
	n := d.U32()
	if !d.need(int(n) * minElem) {
		return 0
	}
	return int(n)
}

// Err reports the first decoding error, or trailing bytes.
func (d *Dec) Err() error {
	if d.err == nil && len(d.B) != 0 {
		return fmt.Errorf("%d trailing bytes", len(d.B))
	}
	return d.err
}
