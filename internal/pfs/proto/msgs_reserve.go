package proto

// Inode numbers and placement handed to a client ahead of its creates, so
// that a small file's bytes go to its I/O servers beside the create, and the
// create carries the size: one replicated commit per small file.

const (
	OpReserveR Op = 90 // ReserveReply
	OpReserve  Op = 91
)

// MaxReserve bounds one Reserve's Count.
const MaxReserve = 1024

// Reserve asks for Count inode numbers, each with the layout a new regular
// file in directory Parent would take now (its policy, the leader's
// placement). Only a Create with Reserved set, from the same client (Idem's
// Client) and in the same directory, uses one; unused ones lapse at Until.
type Reserve struct {
	Parent uint64
	Count  uint32
}

func (*Reserve) Op() Op { return OpReserve }
func (m *Reserve) Encode(e *Enc) {
	e.U64(m.Parent)
	e.U32(m.Count)
}
func (m *Reserve) Decode(d *Dec) { m.Parent, m.Count = d.U64(), d.U32() }

// ReserveReply: the reserved files' attributes as a Create would give them
// (Ino and layout; Size 0, Mode a regular file's type only), valid until
// Until (the leader's clock, Unix ns).
type ReserveReply struct {
	Until int64
	Files []Attr
}

func (*ReserveReply) Op() Op { return OpReserveR }
func (m *ReserveReply) Encode(e *Enc) {
	e.I64(m.Until)
	e.U32(uint32(len(m.Files)))
	for i := range m.Files {
		m.Files[i].Encode(e)
	}
}
func (m *ReserveReply) Decode(d *Dec) {
	m.Until = d.I64()
	// An Attr is at least 60 bytes on the wire.
	n := d.Count(60)
	if n > 0 {
		m.Files = make([]Attr, n)
		for i := range m.Files {
			m.Files[i].Decode(d)
		}
	}
}

// newReserve returns an empty message for one of this file's ops, or nil.
func newReserve(op Op) Msg {
	switch op {
	case OpReserve:
		return &Reserve{}
	case OpReserveR:
		return &ReserveReply{}
	}
	return nil
}
