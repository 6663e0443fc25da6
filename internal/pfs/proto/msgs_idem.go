package proto

import "fmt"

// OpIdem wraps a mutating request with the client's request ID, so that a
// retry after a lost reply is answered with the first reply instead of
// being applied twice (exactly-once across leader changes).
const OpIdem Op = 60

// Idem is one mutating request with its request ID: Client is the
// client's random 64-bit ID, Seq numbers its requests, and Done says the
// client has the replies of all its requests below Done, so the server may
// forget them.
type Idem struct {
	Client, Seq, Done uint64
	Req               Msg
}

// newIdem returns an empty message for one of this file's ops, or nil.
func newIdem(op Op) Msg {
	if op == OpIdem {
		return &Idem{}
	}
	return nil
}

func (*Idem) Op() Op { return OpIdem }

// Encode writes the three IDs, the inner op and the inner message.
func (m *Idem) Encode(e *Enc) {
	e.U64(m.Client)
	e.U64(m.Seq)
	e.U64(m.Done)
	if m.Req == nil {
		e.U8(0) // refused by Decode: an Idem always carries a request
		return
	}
	e.U8(uint8(m.Req.Op()))
	m.Req.Encode(e)
}

// Decode reads what Encode writes; an inner op that does not change
// metadata (or another Idem) is refused: only mutations need an ID.
func (m *Idem) Decode(d *Dec) {
	m.Client, m.Seq, m.Done = d.U64(), d.U64(), d.U64()
	op := Op(d.U8())
	if d.err != nil {
		return
	}
	if !Mutating(op) {
		d.err = fmt.Errorf("idem: inner op %d is not a metadata mutation", op)
		return
	}
	m.Req = New(op)
	m.Req.Decode(d)
}

// Mutating reports whether op changes metadata, so that a retry needs a
// request ID to be applied once (the ops an Idem may carry).
func Mutating(op Op) bool {
	switch op {
	case OpSetAttr, OpCreate, OpMkdir, OpSymlink, OpLink, OpUnlink, OpRmdir, OpRename, OpSetLayout,
		OpMknod, OpSetXattr, OpRemoveXattr, OpUnlinkOpen, OpReleaseOrphan, OpRenewOrphans,
		OpMarkStale, OpLoseServer, OpReserve:
		return true
	}
	return false
}
