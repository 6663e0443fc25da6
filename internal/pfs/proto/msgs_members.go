package proto

// Messages of the replicated metadata group (docs/meta.md): who the
// members are, changing them, online backup, and the Raft traffic between
// members.
const (
	OpMembersR Op = 18 // MembersReply
	OpBackupR  Op = 70 // BackupReply

	OpMembers      Op = 61 // Members: the group as the answering member sees it
	OpMemberChange Op = 62 // MemberChange: add or remove a member (leader)
	OpBackup       Op = 63 // Backup: one chunk of a consistent snapshot
	OpRaftSnap     Op = 64 // RaftSnap: one chunk of a snapshot for a lagging member
	OpRaft         Op = 65 // Raft: a batch of Raft messages between members
)

// MaxChunk bounds the data of one Backup or RaftSnap chunk: well under
// MaxPayload, so a chunk never competes with a stripe for a frame.
const MaxChunk = 16 << 20

func init() {
	// Names for logs and metric labels (opname.go builds its table from
	// these in its own init, which runs after this file's).
	for op, n := range map[Op]string{OpMembers: "members", OpMemberChange: "member-change", OpBackup: "backup",
		OpRaftSnap: "raft-snapshot", OpRaft: "raft"} {
		opNames[op] = n
	}
}

// newMembers returns an empty message for one of this file's ops, or nil.
func newMembers(op Op) Msg {
	switch op {
	case OpMembersR:
		return &MembersReply{}
	case OpBackupR:
		return &BackupReply{}
	case OpMembers:
		return &Members{}
	case OpMemberChange:
		return &MemberChange{}
	case OpBackup:
		return &Backup{}
	case OpRaftSnap:
		return &RaftSnap{}
	case OpRaft:
		return &Raft{}
	}
	return nil
}

// Members asks a member for its view of the group; answered with a
// MembersReply.
type Members struct{}

func (*Members) Op() Op      { return OpMembers }
func (*Members) Encode(*Enc) {}
func (*Members) Decode(*Dec) {}

// MemberInfo is one member in a MembersReply.
type MemberInfo struct {
	ID      uint64
	Addr    string
	Learner bool   // catching up, not voting yet
	Match   uint64 // highest index the leader knows it holds (leader's view; 0 elsewhere)
	Active  bool   // the leader heard from it lately (leader's view)
}

// MembersReply is the group as member ID sees it.
type MembersReply struct {
	ID, Leader, Term, Commit, Applied uint64
	Members                           []MemberInfo
}

func (*MembersReply) Op() Op { return OpMembersR }
func (m *MembersReply) Encode(e *Enc) {
	e.U64(m.ID)
	e.U64(m.Leader)
	e.U64(m.Term)
	e.U64(m.Commit)
	e.U64(m.Applied)
	e.U32(uint32(len(m.Members)))
	for _, x := range m.Members {
		e.U64(x.ID)
		e.Str(x.Addr)
		e.Bool(x.Learner)
		e.U64(x.Match)
		e.Bool(x.Active)
	}
}
func (m *MembersReply) Decode(d *Dec) {
	m.ID, m.Leader, m.Term, m.Commit, m.Applied = d.U64(), d.U64(), d.U64(), d.U64(), d.U64()
	m.Members = make([]MemberInfo, d.Count(22))
	for i := range m.Members {
		x := &m.Members[i]
		x.ID, x.Addr, x.Learner, x.Match, x.Active = d.U64(), d.Str(), d.Bool(), d.U64(), d.Bool()
	}
}

// Member change operations.
const (
	MemberAdd    uint8 = 1
	MemberRemove uint8 = 2
)

// MemberChange adds (Addr: the new member's metadata address) or removes
// member ID; sent to the leader, answered with a MembersReply once the
// change is applied.
type MemberChange struct {
	Change uint8 // MemberAdd or MemberRemove
	ID     uint64
	Addr   string
}

func (*MemberChange) Op() Op          { return OpMemberChange }
func (m *MemberChange) Encode(e *Enc) { e.U8(m.Change); e.U64(m.ID); e.Str(m.Addr) }
func (m *MemberChange) Decode(d *Dec) { m.Change, m.ID, m.Addr = d.U8(), d.U64(), d.Str() }

// Backup asks for the chunk at Offset of the snapshot Token names; Token 0
// starts a new consistent snapshot (Offset must be 0). Answered with a
// BackupReply.
type Backup struct {
	Token  uint64
	Offset uint64
}

func (*Backup) Op() Op          { return OpBackup }
func (m *Backup) Encode(e *Enc) { e.U64(m.Token); e.U64(m.Offset) }
func (m *Backup) Decode(d *Dec) { m.Token, m.Offset = d.U64(), d.U64() }

// BackupReply is one chunk of a backup: Data at Offset of snapshot Token,
// whose whole size is Size; Done once the chunk ends it (the member then
// forgets the snapshot).
type BackupReply struct {
	Token, Offset, Size uint64
	Data                []byte
	Done                bool
}

func (*BackupReply) Op() Op { return OpBackupR }
func (m *BackupReply) Encode(e *Enc) {
	e.U64(m.Token)
	e.U64(m.Offset)
	e.U64(m.Size)
	e.Bytes(m.Data)
	e.Bool(m.Done)
}
func (m *BackupReply) Decode(d *Dec) {
	m.Token, m.Offset, m.Size, m.Data, m.Done = d.U64(), d.U64(), d.U64(), d.Bytes(), d.Bool()
}

// RaftSnap carries one chunk of a state machine snapshot to a member too
// far behind for the log; the last chunk (Last) carries in Msg the Raft
// snapshot message (metadata only) the receiver steps once the data is
// whole. Token names one transfer; chunks arrive in Offset order.
type RaftSnap struct {
	Token  uint64
	Offset uint64
	Data   []byte
	Last   bool
	Msg    []byte
}

func (*RaftSnap) Op() Op { return OpRaftSnap }
func (m *RaftSnap) Encode(e *Enc) {
	e.U64(m.Token)
	e.U64(m.Offset)
	e.Bytes(m.Data)
	e.Bool(m.Last)
	e.Bytes(m.Msg)
}
func (m *RaftSnap) Decode(d *Dec) {
	m.Token, m.Offset, m.Data, m.Last, m.Msg = d.U64(), d.U64(), d.Bytes(), d.Bool(), d.Bytes()
}

// Raft carries a batch of Raft messages between members; the replicated
// log (internal/replog) encodes and checks Data. Answered with OK.
type Raft struct{ Data []byte }

func (*Raft) Op() Op          { return OpRaft }
func (m *Raft) Encode(e *Enc) { e.Bytes(m.Data) }
func (m *Raft) Decode(d *Dec) { m.Data = d.Bytes() }
