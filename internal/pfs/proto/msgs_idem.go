package proto

import "fmt"

// OpIdem wraps a mutating metadata request with the client's request ID, so
// a retry after a lost reply applies once (docs/design/replicated-meta.md).
const OpIdem Op = 60

// Idem is a mutating request with its request ID. Client is the client's
// random ID, Seq numbers its request (the same for every retry of one
// operation), Done is the lowest Seq whose reply the client still awaits:
// every reply below it arrived, so the member may forget them.
type Idem struct {
	Client, Seq, Done uint64
	Req               Msg
}

func (*Idem) Op() Op { return OpIdem }

// Encode writes the three IDs, the inner op byte, then the inner message.
func (m *Idem) Encode(e *Enc) {
	e.U64(m.Client)
	e.U64(m.Seq)
	e.U64(m.Done)
	e.U8(uint8(m.Req.Op()))
	m.Req.Encode(e)
}

// Decode refuses a nested Idem and any op that changes nothing: only
// mutating requests carry request IDs.
func (m *Idem) Decode(d *Dec) {
	m.Client, m.Seq, m.Done = d.U64(), d.U64(), d.U64()
	op := Op(d.U8())
	if d.err != nil {
		return
	}
	if !Mutating(op) {
		d.err = fmt.Errorf("idem: inner op %d is not a mutating metadata request", op)
		return
	}
	m.Req = New(op)
	m.Req.Decode(d)
}

// Mutating reports whether op is a metadata request that changes the name
// space: the ones a client wraps in Idem.
func Mutating(op Op) bool {
	switch op {
	case OpSetAttr, OpCreate, OpMkdir, OpSymlink, OpLink, OpUnlink, OpRmdir, OpRename, OpSetLayout,
		OpMknod, OpSetXattr, OpRemoveXattr, OpUnlinkOpen, OpReleaseOrphan:
		return true
	}
	return false
}

// newIdem returns an empty message for one of this file's ops, or nil.
func newIdem(op Op) Msg {
	if op == OpIdem {
		return &Idem{}
	}
	return nil
}
