package proto

import (
	"errors"
	"time"
)

// Data redundancy (docs/pfs-protocol.md, "Replicas"): ops 80-89.
//
//	80 ReplWrite   client -> head I/O server (and head -> other replicas)
//	81 ReplReply   reply of 80: the replicas that did not take the write
//	82 Scrub       -> I/O server: check an object's checksums
//	83 ScrubReply  reply of 82
//	84 Heal        meta -> I/O server: copy ranges of an object from a current replica
//	85 HealReply   reply of 84
//	86 MarkStale   client -> meta: replicas that missed a write
//	87 GetStale    client -> meta: a file's stale records
//	88 StaleReply  reply of 87
//	89 LoseServer  corral fs servers lost ID
const (
	OpReplWrite  Op = 80
	OpReplReply  Op = 81
	OpScrub      Op = 82
	OpScrubReply Op = 83
	OpHeal       Op = 84
	OpHealReply  Op = 85
	OpMarkStale  Op = 86
	OpGetStale   Op = 87
	OpStaleReply Op = 88
	OpLoseServer Op = 89
)

// Peer names one replica's I/O server: its ID and address.
type Peer struct {
	ID   uint32
	Addr string
}

func encPeers(e *Enc, ps []Peer) {
	e.U32(uint32(len(ps)))
	for _, p := range ps {
		e.U32(p.ID)
		e.Str(p.Addr)
	}
}

func decPeers(d *Dec) []Peer {
	ps := make([]Peer, d.Count(8))
	for i := range ps {
		ps[i].ID, ps[i].Addr = d.U32(), d.Str()
	}
	return ps
}

// ReplWrite writes Data at Off of object (Handle, Index) on the receiving
// server (the head) and on every replica in Fwd, in one order: the head
// applies overlapping writes of one object one at a time and forwards each
// (with Fwd empty and Head its own ID) before the next. The reply lists the
// replicas of Fwd that failed; an error means the head itself did not apply
// it. Head is 0 from a client: the receiver is the head. Fwd holds at most
// layout.MaxReplicas-1 distinct servers, never the head (else EINVAL).
type ReplWrite struct {
	Handle uint64
	Index  uint32
	Off    uint64
	Head   uint32
	Fwd    []Peer
	Data   []byte
	// Sync (optional trailing flag, written only when set): every copy
	// makes the write durable (as Sync would) before it answers, and the
	// head forwards with it: a new small file's bytes in one round.
	Sync bool
}

func (*ReplWrite) Op() Op { return OpReplWrite }
func (m *ReplWrite) Encode(e *Enc) {
	e.U64(m.Handle)
	e.U32(m.Index)
	e.U64(m.Off)
	e.U32(m.Head)
	encPeers(e, m.Fwd)
	e.Bytes(m.Data)
	if m.Sync {
		e.U8(1)
	}
}
func (m *ReplWrite) Decode(d *Dec) {
	m.Handle, m.Index, m.Off, m.Head = d.U64(), d.U32(), d.U64(), d.U32()
	m.Fwd = decPeers(d)
	m.Data = d.Bytes()
	if d.err == nil && len(d.B) > 0 {
		// One encoding per message: the flag is absent or 1.
		if d.U8() != 1 && d.err == nil {
			d.err = errors.New("replicated write: sync flag present but not 1")
		}
		m.Sync = d.err == nil
	}
}

// ReplReply: Failed are the IDs of Fwd replicas that did not apply the
// write, Why a message for each.
type ReplReply struct {
	Failed []uint32
	Why    []string
}

func (*ReplReply) Op() Op { return OpReplReply }
func (m *ReplReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Failed)))
	for i, id := range m.Failed {
		e.U32(id)
		w := ""
		if i < len(m.Why) {
			w = m.Why[i]
		}
		e.Str(w)
	}
}
func (m *ReplReply) Decode(d *Dec) {
	n := d.Count(8)
	m.Failed, m.Why = make([]uint32, n), make([]string, n)
	for i := range n {
		m.Failed[i], m.Why[i] = d.U32(), d.Str()
	}
}

// Scrub checks every block checksum of object (Handle, Index); Repair
// asks the server to rewrite nothing but report (repair goes through Heal).
type Scrub struct {
	Handle uint64
	Index  uint32
}

func (*Scrub) Op() Op          { return OpScrub }
func (m *Scrub) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index) }
func (m *Scrub) Decode(d *Dec) { m.Handle, m.Index = d.U64(), d.U32() }

// Extent is a byte range of an object.
type Extent struct {
	Off, Len uint64
}

func encExtents(e *Enc, xs []Extent) {
	e.U32(uint32(len(xs)))
	for _, x := range xs {
		e.U64(x.Off)
		e.U64(x.Len)
	}
}

func decExtents(d *Dec) []Extent {
	xs := make([]Extent, d.Count(16))
	for i := range xs {
		xs[i].Off, xs[i].Len = d.U64(), d.U64()
	}
	return xs
}

// ScrubReply: the object's size, whether it exists, and the ranges whose
// checksum does not match (whole blocks).
type ScrubReply struct {
	Size   uint64
	Exists bool
	Bad    []Extent
}

func (*ScrubReply) Op() Op { return OpScrubReply }
func (m *ScrubReply) Encode(e *Enc) {
	e.U64(m.Size)
	e.Bool(m.Exists)
	encExtents(e, m.Bad)
}
func (m *ScrubReply) Decode(d *Dec) {
	m.Size, m.Exists = d.U64(), d.Bool()
	m.Bad = decExtents(d)
}

// Heal makes the receiving server's copy of object (Handle, Index) equal
// to a current replica's over Ranges (Len 0: to the end of the source
// object), reading from the first of From that answers; with Whole, or a
// range of Len 0, the object is also cut or extended to the source's size,
// never cut below the start of a Len 0 range (the receiver is current below
// it, the source perhaps not). Meta sends Whole on the last piece of every
// Len 0 extent. Writes arriving
// meanwhile for those ranges wait, so none is overwritten by older bytes.
type Heal struct {
	Handle uint64
	Index  uint32
	Whole  bool
	Ranges []Extent
	From   []Peer
	// Held is the object size the file's size implies (as Read's): the
	// healer's reads carry it, so a source whose object is gone answers
	// missing and the next is tried, instead of being copied as zeros.
	// Optional on the wire.
	Held uint64
}

func (*Heal) Op() Op { return OpHeal }
func (m *Heal) Encode(e *Enc) {
	e.U64(m.Handle)
	e.U32(m.Index)
	e.Bool(m.Whole)
	encExtents(e, m.Ranges)
	encPeers(e, m.From)
	if m.Held != 0 {
		e.U64(m.Held)
	}
}
func (m *Heal) Decode(d *Dec) {
	m.Handle, m.Index, m.Whole = d.U64(), d.U32(), d.Bool()
	m.Ranges = decExtents(d)
	m.From = decPeers(d)
	m.Held = d.OptU64()
}

// HealReply: bytes copied.
type HealReply struct {
	Copied uint64
}

func (*HealReply) Op() Op          { return OpHealReply }
func (m *HealReply) Encode(e *Enc) { e.U64(m.Copied) }
func (m *HealReply) Decode(d *Dec) { m.Copied = d.U64() }

// MarkStale records that Servers (replicas in column Index of file Ino)
// missed a write of [Off, Off+Len) (Len 0: from Off to the end). Column is
// the column's servers as the sender knows them: when the file's layout
// has changed since, the answer is ESTALE and nothing is recorded (the
// sender re-reads the layout and writes again).
type MarkStale struct {
	Ino     uint64
	Index   uint32
	Column  []uint32
	Servers []uint32
	Off     uint64
	Len     uint64
}

func (*MarkStale) Op() Op { return OpMarkStale }
func (m *MarkStale) Encode(e *Enc) {
	e.U64(m.Ino)
	e.U32(m.Index)
	e.U32s(m.Column)
	e.U32s(m.Servers)
	e.U64(m.Off)
	e.U64(m.Len)
}
func (m *MarkStale) Decode(d *Dec) {
	m.Ino, m.Index = d.U64(), d.U32()
	m.Column, m.Servers = d.U32s(), d.U32s()
	m.Off, m.Len = d.U64(), d.U64()
}

// GetStale asks for file Ino's stale records.
type GetStale struct {
	Ino uint64
}

func (*GetStale) Op() Op          { return OpGetStale }
func (m *GetStale) Encode(e *Enc) { e.U64(m.Ino) }
func (m *GetStale) Decode(d *Dec) { m.Ino = d.U64() }

// StaleRec says the replica on Server of column Index is out of date over
// [Off, Off+Len) (Len 0: from Off to the end).
type StaleRec struct {
	Index  uint32
	Server uint32
	Off    uint64
	Len    uint64
}

// StaleReply lists a file's stale records.
type StaleReply struct {
	Recs []StaleRec
}

func (*StaleReply) Op() Op { return OpStaleReply }
func (m *StaleReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Recs)))
	for _, r := range m.Recs {
		e.U32(r.Index)
		e.U32(r.Server)
		e.U64(r.Off)
		e.U64(r.Len)
	}
}
func (m *StaleReply) Decode(d *Dec) {
	m.Recs = make([]StaleRec, d.Count(24))
	for i := range m.Recs {
		r := &m.Recs[i]
		r.Index, r.Server, r.Off, r.Len = d.U32(), d.U32(), d.U64(), d.U64()
	}
}

// LoseServer declares I/O server ID lost for good: its replicas are made
// again on the other servers. Answered with Servers (the one entry).
type LoseServer struct {
	ID uint32
}

func (*LoseServer) Op() Op          { return OpLoseServer }
func (m *LoseServer) Encode(e *Enc) { e.U32(m.ID) }
func (m *LoseServer) Decode(d *Dec) { m.ID = d.U32() }

func newRedundancy(op Op) Msg {
	switch op {
	case OpReplWrite:
		return &ReplWrite{}
	case OpReplReply:
		return &ReplReply{}
	case OpScrub:
		return &Scrub{}
	case OpScrubReply:
		return &ScrubReply{}
	case OpHeal:
		return &Heal{}
	case OpHealReply:
		return &HealReply{}
	case OpMarkStale:
		return &MarkStale{}
	case OpGetStale:
		return &GetStale{}
	case OpStaleReply:
		return &StaleReply{}
	case OpLoseServer:
		return &LoseServer{}
	}
	return nil
}

func redundancySamples() []Msg {
	return []Msg{
		&ReplWrite{Handle: 7, Index: 1, Off: 4096, Head: 3, Fwd: []Peer{{2, "127.0.0.1:2"}}, Data: []byte("abc")},
		&ReplWrite{Handle: 7, Index: 1, Off: 4096, Fwd: []Peer{{2, "127.0.0.1:2"}}, Data: []byte("abc"), Sync: true},
		&ReplReply{Failed: []uint32{2}, Why: []string{"timeout"}},
		&Scrub{Handle: 7, Index: 1},
		&ScrubReply{Size: 9, Exists: true, Bad: []Extent{{0, 65536}}},
		&Heal{Handle: 7, Index: 1, Whole: true, Ranges: []Extent{{0, 0}}, From: []Peer{{1, "127.0.0.1:1"}}},
		&HealReply{Copied: 5},
		&MarkStale{Ino: 7, Index: 1, Column: []uint32{1, 2}, Servers: []uint32{2}, Off: 3, Len: 4},
		&GetStale{Ino: 7},
		&StaleReply{Recs: []StaleRec{{1, 2, 3, 4}}},
		&LoseServer{ID: 3},
	}
}

// ReplicaTimeout bounds one replica's part of a request moving n bytes
// (a head's forward, a heal's pull, a client's call to one copy): 2 s plus
// the time at 8 MiB/s, the slowest disk or link that still counts as
// working. A copy slower than that is marked stale and healed later rather
// than holding every writer of its object.
func ReplicaTimeout(n int) time.Duration {
	return 2*time.Second + time.Duration(int64(n)*int64(time.Second)/(8<<20))
}
