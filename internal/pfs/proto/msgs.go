package proto

import (
	"fmt"
)

// Op identifies a message type on the wire. Values are part of the protocol:
// never renumber, only add.
type Op uint8

const (
	// Replies.
	OpOK      Op = 1 // empty success
	OpError   Op = 2 // Error
	OpAttr    Op = 3 // AttrReply
	OpEntries Op = 4 // EntriesReply
	OpTarget  Op = 5 // TargetReply
	OpStatfsR Op = 6 // StatfsReply
	OpServerR Op = 7 // ServersReply
	OpData    Op = 8 // DataReply
	OpSize    Op = 9 // SizeReply

	// Metadata requests.
	OpLookup    Op = 20
	OpWalk      Op = 21
	OpGetAttr   Op = 22
	OpSetAttr   Op = 23
	OpCreate    Op = 24
	OpMkdir     Op = 25
	OpSymlink   Op = 26
	OpLink      Op = 27
	OpUnlink    Op = 28
	OpRmdir     Op = 29
	OpRename    Op = 30
	OpReaddir   Op = 31
	OpReadlink  Op = 32
	OpSetLayout Op = 33
	OpStatfs    Op = 34
	OpRegister  Op = 35
	OpServers   Op = 36

	// I/O server requests.
	OpRead     Op = 50
	OpWrite    Op = 51
	OpTruncate Op = 52
	OpSync     Op = 53
	OpRemove   Op = 54
	OpObjStat  Op = 55
)

// Msg is one message body.
type Msg interface {
	Op() Op
	Encode(*Enc)
	Decode(*Dec)
}

// New returns an empty message for op, or nil for an unknown op.
func New(op Op) Msg {
	switch op {
	case OpOK:
		return &OK{}
	case OpError:
		return &Error{}
	case OpAttr:
		return &AttrReply{}
	case OpEntries:
		return &EntriesReply{}
	case OpTarget:
		return &TargetReply{}
	case OpStatfsR:
		return &StatfsReply{}
	case OpServerR:
		return &ServersReply{}
	case OpData:
		return &DataReply{}
	case OpSize:
		return &SizeReply{}
	case OpObjects:
		return &ObjectsReply{}
	case OpRefs:
		return &RefsReply{}
	case OpLookup:
		return &Lookup{}
	case OpWalk:
		return &Walk{}
	case OpGetAttr:
		return &GetAttr{}
	case OpSetAttr:
		return &SetAttr{}
	case OpCreate:
		return &Create{}
	case OpMkdir:
		return &Mkdir{}
	case OpSymlink:
		return &Symlink{}
	case OpLink:
		return &Link{}
	case OpUnlink:
		return &Unlink{}
	case OpRmdir:
		return &Rmdir{}
	case OpRename:
		return &Rename{}
	case OpReaddir:
		return &Readdir{}
	case OpReadlink:
		return &Readlink{}
	case OpSetLayout:
		return &SetLayout{}
	case OpStatfs:
		return &Statfs{}
	case OpRegister:
		return &Register{}
	case OpServers:
		return &Servers{}
	case OpReplace:
		return &ReplaceServer{}
	case OpRefCheck:
		return &RefCheck{}
	case OpRead:
		return &Read{}
	case OpWrite:
		return &Write{}
	case OpTruncate:
		return &Truncate{}
	case OpSync:
		return &Sync{}
	case OpRemove:
		return &Remove{}
	case OpObjStat:
		return &ObjStat{}
	case OpList:
		return &ListObjects{}
	case OpIdentify:
		return &Identify{}
	}
	if m := newReplica(op); m != nil {
		return m
	}
	if m := newRedundancy(op); m != nil {
		return m
	}
	if m := newReserve(op); m != nil {
		return m
	}
	return newPosix(op)
}

// Decode parses a payload for op, rejecting unknown ops, short payloads and
// trailing bytes.
func Decode(op Op, payload []byte) (Msg, error) {
	m := New(op)
	if m == nil {
		return nil, fmt.Errorf("unknown op %d", op)
	}
	d := Dec{B: payload}
	m.Decode(&d)
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("op %d: %w", op, err)
	}
	return m, nil
}

// Attr is an inode's attributes. Times are nanoseconds since the Unix epoch.
type Attr struct {
	Ino                 uint64
	Mode                uint32 // type bits and permissions, as in stat(2)
	Uid, Gid, Nlink     uint32
	Size                uint64
	Atime, Mtime, Ctime int64
	// StripeSize and Servers: the layout of a regular file. For a directory
	// StripeSize and StripeCount are the policy new files inherit (0: the
	// file system's default).
	StripeSize  uint32
	StripeCount uint32
	Servers     []uint32
	// Replicas: a regular file's copies of each stripe unit (1-5); for a
	// directory the policy new files inherit (0: as the nearest ancestor
	// that sets it, else the default). Extra are the servers of copies 2..R,
	// column by column: column k's are Extra[k*(R-1) : (k+1)*(R-1)].
	Replicas uint32
	Extra    []uint32
	// Placement of a directory's new files: 0 inherit, PlaceStriped,
	// PlaceWhole. Stale: how many stale records the file has (0: every
	// replica is current, nothing to ask).
	Placement uint8
	Stale     uint32
}

// Placement policies (Attr.Placement, SetLayout.Placement).
const (
	PlaceInherit uint8 = 0
	PlaceStriped uint8 = 1 // stripe units round-robin over the servers (PVFS)
	PlaceWhole   uint8 = 2 // each file whole on the least-loaded server(s) (CASTOR)
)

func (a *Attr) Encode(e *Enc) {
	a.EncodeV1(e)
	a.EncodeReplicas(e)
}

func (a *Attr) Decode(d *Dec) {
	a.DecodeV1(d)
	a.DecodeReplicas(d)
}

// EncodeV1 writes the fields known before replicas, in their order then:
// meta's stored records (inodes, retry replies) start with them, so the
// records written before replicas still read.
func (a *Attr) EncodeV1(e *Enc) {
	e.U64(a.Ino)
	e.U32(a.Mode)
	e.U32(a.Uid)
	e.U32(a.Gid)
	e.U32(a.Nlink)
	e.U64(a.Size)
	e.I64(a.Atime)
	e.I64(a.Mtime)
	e.I64(a.Ctime)
	e.U32(a.StripeSize)
	e.U32(a.StripeCount)
	e.U32s(a.Servers)
}

// DecodeV1 reads what EncodeV1 writes.
func (a *Attr) DecodeV1(d *Dec) {
	a.Ino = d.U64()
	a.Mode = d.U32()
	a.Uid = d.U32()
	a.Gid = d.U32()
	a.Nlink = d.U32()
	a.Size = d.U64()
	a.Atime = d.I64()
	a.Mtime = d.I64()
	a.Ctime = d.I64()
	a.StripeSize = d.U32()
	a.StripeCount = d.U32()
	a.Servers = d.U32s()
}

// EncodeReplicas writes the replica fields (Replicas, Extra, Placement,
// Stale), which follow the V1 fields on the wire.
func (a *Attr) EncodeReplicas(e *Enc) {
	e.U32(a.Replicas)
	e.U32s(a.Extra)
	e.U8(a.Placement)
	e.U32(a.Stale)
}

// DecodeReplicas reads what EncodeReplicas writes.
func (a *Attr) DecodeReplicas(d *Dec) {
	a.Replicas = d.U32()
	a.Extra = d.U32s()
	a.Placement = d.U8()
	a.Stale = d.U32()
}

// Replies.

type OK struct{}

func (*OK) Op() Op        { return OpOK }
func (*OK) Encode(*Enc)   {}
func (*OK) Decode(d *Dec) {}

// Error carries an errno (as in errno(3)) and a human message.
type Error struct {
	Errno uint32
	Msg   string
}

func (*Error) Op() Op           { return OpError }
func (m *Error) Encode(e *Enc)  { e.U32(m.Errno); e.Str(m.Msg) }
func (m *Error) Decode(d *Dec)  { m.Errno = d.U32(); m.Msg = d.Str() }
func (m *Error) String() string { return m.Msg }

type AttrReply struct {
	Attr    Attr
	Created bool // Create: whether this call made the file
}

func (*AttrReply) Op() Op          { return OpAttr }
func (m *AttrReply) Encode(e *Enc) { m.Attr.Encode(e); e.Bool(m.Created) }
func (m *AttrReply) Decode(d *Dec) { m.Attr.Decode(d); m.Created = d.Bool() }

// Entry is one directory entry with its attributes (readdirplus).
type Entry struct {
	Name string
	Attr Attr
}

type EntriesReply struct {
	Entries []Entry
	More    bool // more entries follow after the last one
}

func (*EntriesReply) Op() Op { return OpEntries }
func (m *EntriesReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Entries)))
	for i := range m.Entries {
		e.Str(m.Entries[i].Name)
		m.Entries[i].Attr.Encode(e)
	}
	e.Bool(m.More)
}
func (m *EntriesReply) Decode(d *Dec) {
	n := d.Count(60)
	m.Entries = make([]Entry, n)
	for i := range m.Entries {
		m.Entries[i].Name = d.Str()
		m.Entries[i].Attr.Decode(d)
	}
	m.More = d.Bool()
}

type TargetReply struct{ Target string }

func (*TargetReply) Op() Op          { return OpTarget }
func (m *TargetReply) Encode(e *Enc) { e.Str(m.Target) }
func (m *TargetReply) Decode(d *Dec) { m.Target = d.Str() }

type StatfsReply struct {
	Capacity, Free, Files uint64
	Servers               uint32
}

func (*StatfsReply) Op() Op { return OpStatfsR }
func (m *StatfsReply) Encode(e *Enc) {
	e.U64(m.Capacity)
	e.U64(m.Free)
	e.U64(m.Files)
	e.U32(m.Servers)
}
func (m *StatfsReply) Decode(d *Dec) {
	m.Capacity, m.Free, m.Files, m.Servers = d.U64(), d.U64(), d.U64(), d.U32()
}

// ServerInfo is an I/O server as the metadata server knows it.
type ServerInfo struct {
	ID             uint32
	Addr           string
	Capacity, Free uint64
	Seen           int64 // last registration, ns since epoch
	// State is ServerUp, ServerDown, ... as the metadata server sees it now.
	State uint8
	// Base: on a store that replaced a lost disk, a missing object of a file
	// whose inode number is below Base is lost data (EIO), not a hole.
	Base uint64
	// Zone is the failure domain the server says it is in ("": none);
	// replicas of one unit go to distinct zones when there are enough.
	Zone string
	// Load: the server's current I/O, in KiB/s read and written (whole-file
	// placement and replica choice prefer the less loaded).
	Load uint32
	// Stale: bytes of its replicas that are out of date (heal to do);
	// Healed: bytes copied to it by heal since the metadata leader started.
	Stale, Healed uint64
}

// I/O server states (ServerInfo.State).
const (
	ServerUp        uint8 = 0 // heard from recently, space above the reserve
	ServerDown      uint8 = 1 // not heard from since the metadata server started or lately
	ServerLost      uint8 = 2 // came back without its objects: out of placement until replaced
	ServerFull      uint8 = 3 // up, but free space is below the reserve
	ServerReplacing uint8 = 4 // lost; the next empty disk at its address is accepted as it
)

// StateName is the word `corral fs servers` shows for a state.
func StateName(s uint8) string {
	switch s {
	case ServerUp:
		return "up"
	case ServerDown:
		return "down"
	case ServerLost:
		return "lost"
	case ServerFull:
		return "full"
	case ServerReplacing:
		return "replacing"
	}
	return fmt.Sprintf("state-%d", s)
}

// ServersReply lists I/O servers. Cluster is the metadata server's cluster
// ID (an I/O server keeps it in its data directory at registration).
type ServersReply struct {
	Servers []ServerInfo
	Cluster string
}

func (*ServersReply) Op() Op { return OpServerR }
func (m *ServersReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Servers)))
	for _, s := range m.Servers {
		e.U32(s.ID)
		e.Str(s.Addr)
		e.U64(s.Capacity)
		e.U64(s.Free)
		e.I64(s.Seen)
		e.U8(s.State)
		e.U64(s.Base)
		e.Str(s.Zone)
		e.U32(s.Load)
		e.U64(s.Stale)
		e.U64(s.Healed)
	}
	e.Str(m.Cluster)
}
func (m *ServersReply) Decode(d *Dec) {
	m.Servers = make([]ServerInfo, d.Count(65))
	for i := range m.Servers {
		s := &m.Servers[i]
		s.ID, s.Addr, s.Capacity, s.Free, s.Seen = d.U32(), d.Str(), d.U64(), d.U64(), d.I64()
		s.State, s.Base = d.U8(), d.U64()
		s.Zone, s.Load, s.Stale, s.Healed = d.Str(), d.U32(), d.U64(), d.U64()
	}
	m.Cluster = d.Str()
}

type DataReply struct {
	Data []byte
	// Done, if set, is called once the reply has been written, so a server
	// can reuse Data's buffer. Not sent.
	Done func()
}

func (*DataReply) Op() Op              { return OpData }
func (m *DataReply) Encode(e *Enc)     { e.Bytes(m.Data) }
func (m *DataReply) Decode(d *Dec)     { m.Data = d.Bytes() }
func (m *DataReply) encodeHead(e *Enc) { e.U32(uint32(len(m.Data))) }
func (m *DataReply) tail() []byte      { return m.Data }

type SizeReply struct{ Size uint64 }

func (*SizeReply) Op() Op          { return OpSize }
func (m *SizeReply) Encode(e *Enc) { e.U64(m.Size) }
func (m *SizeReply) Decode(d *Dec) { m.Size = d.U64() }

// Metadata requests.

type Lookup struct {
	Parent uint64
	Name   string
}

func (*Lookup) Op() Op          { return OpLookup }
func (m *Lookup) Encode(e *Enc) { e.U64(m.Parent); e.Str(m.Name) }
func (m *Lookup) Decode(d *Dec) { m.Parent = d.U64(); m.Name = d.Str() }

// Walk resolves an absolute path in one round trip, following symbolic links
// in every component but the last.
type Walk struct{ Path string }

func (*Walk) Op() Op          { return OpWalk }
func (m *Walk) Encode(e *Enc) { e.Str(m.Path) }
func (m *Walk) Decode(d *Dec) { m.Path = d.Str() }

type GetAttr struct{ Ino uint64 }

func (*GetAttr) Op() Op          { return OpGetAttr }
func (m *GetAttr) Encode(e *Enc) { e.U64(m.Ino) }
func (m *GetAttr) Decode(d *Dec) { m.Ino = d.U64() }

// SetAttr field mask bits.
const (
	SetMode uint32 = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime
	SetMtime
	// SetSizeExtend raises the size to Size if it is smaller, never lowers
	// it: what a writer reports at close, safe with concurrent writers.
	SetSizeExtend
)

type SetAttr struct {
	Ino          uint64
	Mask         uint32
	Mode         uint32
	Uid, Gid     uint32
	Size         uint64
	Atime, Mtime int64
}

func (*SetAttr) Op() Op { return OpSetAttr }
func (m *SetAttr) Encode(e *Enc) {
	e.U64(m.Ino)
	e.U32(m.Mask)
	e.U32(m.Mode)
	e.U32(m.Uid)
	e.U32(m.Gid)
	e.U64(m.Size)
	e.I64(m.Atime)
	e.I64(m.Mtime)
}
func (m *SetAttr) Decode(d *Dec) {
	m.Ino, m.Mask, m.Mode, m.Uid, m.Gid = d.U64(), d.U32(), d.U32(), d.U32(), d.U32()
	m.Size, m.Atime, m.Mtime = d.U64(), d.I64(), d.I64()
}

// Create makes a regular file, or returns the existing one unless Excl.
// StripeSize/StripeCount of 0 inherit the directory's policy.
type Create struct {
	Parent      uint64
	Name        string
	Mode        uint32
	Uid, Gid    uint32
	Excl        bool
	StripeSize  uint32
	StripeCount uint32
	Replicas    uint32 // 0: as the directory's policy
	// Reserved (optional, not 0): create the file as this inode, reserved
	// by this client in Parent (Reserve), with its reserved layout, and
	// Size (optional, not 0; only with Reserved) as its size: the client
	// wrote the bytes to its I/O servers beside this create.
	Reserved uint64
	Size     uint64
}

func (*Create) Op() Op { return OpCreate }
func (m *Create) Encode(e *Enc) {
	e.U64(m.Parent)
	e.Str(m.Name)
	e.U32(m.Mode)
	e.U32(m.Uid)
	e.U32(m.Gid)
	e.Bool(m.Excl)
	e.U32(m.StripeSize)
	e.U32(m.StripeCount)
	e.U32(m.Replicas)
	if m.Reserved != 0 {
		e.U64(m.Reserved)
		if m.Size != 0 {
			e.U64(m.Size)
		}
	}
}
func (m *Create) Decode(d *Dec) {
	m.Parent, m.Name, m.Mode, m.Uid, m.Gid = d.U64(), d.Str(), d.U32(), d.U32(), d.U32()
	m.Excl, m.StripeSize, m.StripeCount, m.Replicas = d.Bool(), d.U32(), d.U32(), d.U32()
	if m.Reserved = d.OptU64(); m.Reserved != 0 {
		m.Size = d.OptU64()
	}
}

type Mkdir struct {
	Parent   uint64
	Name     string
	Mode     uint32
	Uid, Gid uint32
}

func (*Mkdir) Op() Op { return OpMkdir }
func (m *Mkdir) Encode(e *Enc) {
	e.U64(m.Parent)
	e.Str(m.Name)
	e.U32(m.Mode)
	e.U32(m.Uid)
	e.U32(m.Gid)
}
func (m *Mkdir) Decode(d *Dec) {
	m.Parent, m.Name, m.Mode, m.Uid, m.Gid = d.U64(), d.Str(), d.U32(), d.U32(), d.U32()
}

type Symlink struct {
	Parent       uint64
	Name, Target string
	Uid, Gid     uint32
}

func (*Symlink) Op() Op { return OpSymlink }
func (m *Symlink) Encode(e *Enc) {
	e.U64(m.Parent)
	e.Str(m.Name)
	e.Str(m.Target)
	e.U32(m.Uid)
	e.U32(m.Gid)
}
func (m *Symlink) Decode(d *Dec) {
	m.Parent, m.Name, m.Target, m.Uid, m.Gid = d.U64(), d.Str(), d.Str(), d.U32(), d.U32()
}

type Link struct {
	Ino    uint64
	Parent uint64
	Name   string
}

func (*Link) Op() Op          { return OpLink }
func (m *Link) Encode(e *Enc) { e.U64(m.Ino); e.U64(m.Parent); e.Str(m.Name) }
func (m *Link) Decode(d *Dec) { m.Ino, m.Parent, m.Name = d.U64(), d.U64(), d.Str() }

type Unlink struct {
	Parent uint64
	Name   string
}

func (*Unlink) Op() Op          { return OpUnlink }
func (m *Unlink) Encode(e *Enc) { e.U64(m.Parent); e.Str(m.Name) }
func (m *Unlink) Decode(d *Dec) { m.Parent, m.Name = d.U64(), d.Str() }

type Rmdir struct {
	Parent uint64
	Name   string
}

func (*Rmdir) Op() Op          { return OpRmdir }
func (m *Rmdir) Encode(e *Enc) { e.U64(m.Parent); e.Str(m.Name) }
func (m *Rmdir) Decode(d *Dec) { m.Parent, m.Name = d.U64(), d.Str() }

// Rename flags, as renameat2(2).
const (
	RenameNoReplace uint32 = 1
	RenameExchange  uint32 = 2
)

type Rename struct {
	OldParent uint64
	OldName   string
	NewParent uint64
	NewName   string
	Flags     uint32
}

func (*Rename) Op() Op { return OpRename }
func (m *Rename) Encode(e *Enc) {
	e.U64(m.OldParent)
	e.Str(m.OldName)
	e.U64(m.NewParent)
	e.Str(m.NewName)
	e.U32(m.Flags)
}
func (m *Rename) Decode(d *Dec) {
	m.OldParent, m.OldName, m.NewParent, m.NewName, m.Flags = d.U64(), d.Str(), d.U64(), d.Str(), d.U32()
}

// Readdir lists entries whose names sort after After, at most Limit of them.
type Readdir struct {
	Ino   uint64
	After string
	Limit uint32
}

func (*Readdir) Op() Op          { return OpReaddir }
func (m *Readdir) Encode(e *Enc) { e.U64(m.Ino); e.Str(m.After); e.U32(m.Limit) }
func (m *Readdir) Decode(d *Dec) { m.Ino, m.After, m.Limit = d.U64(), d.Str(), d.U32() }

type Readlink struct{ Ino uint64 }

func (*Readlink) Op() Op          { return OpReadlink }
func (m *Readlink) Encode(e *Enc) { e.U64(m.Ino) }
func (m *Readlink) Decode(d *Dec) { m.Ino = d.U64() }

// SetLayout sets a directory's striping policy for files created in it later.
type SetLayout struct {
	Ino         uint64
	StripeSize  uint32
	StripeCount uint32
	Replicas    uint32 // 0: keep
	Placement   uint8  // PlaceInherit: keep
}

func (*SetLayout) Op() Op { return OpSetLayout }
func (m *SetLayout) Encode(e *Enc) {
	e.U64(m.Ino)
	e.U32(m.StripeSize)
	e.U32(m.StripeCount)
	e.U32(m.Replicas)
	e.U8(m.Placement)
}
func (m *SetLayout) Decode(d *Dec) {
	m.Ino, m.StripeSize, m.StripeCount, m.Replicas, m.Placement = d.U64(), d.U32(), d.U32(), d.U32(), d.U8()
}

type Statfs struct{}

func (*Statfs) Op() Op        { return OpStatfs }
func (*Statfs) Encode(*Enc)   {}
func (*Statfs) Decode(d *Dec) {}

// Register announces an I/O server. ID 0 asks the metadata server for a new
// ID, which the I/O server keeps in its data directory with Cluster, the
// cluster that directory belongs to ("" before its first registration).
// Fresh says the objects directory has no store marker: it is empty or was
// wiped, so the objects of a known ID are gone.
type Register struct {
	ID             uint32
	Addr           string
	Capacity, Free uint64
	Cluster        string
	Fresh          bool
	Zone           string // failure domain (--zone), "" for none
	Load           uint32 // current I/O, KiB/s
}

func (*Register) Op() Op { return OpRegister }
func (m *Register) Encode(e *Enc) {
	e.U32(m.ID)
	e.Str(m.Addr)
	e.U64(m.Capacity)
	e.U64(m.Free)
	e.Str(m.Cluster)
	e.Bool(m.Fresh)
	e.Str(m.Zone)
	e.U32(m.Load)
}
func (m *Register) Decode(d *Dec) {
	m.ID, m.Addr, m.Capacity, m.Free = d.U32(), d.Str(), d.U64(), d.U64()
	m.Cluster, m.Fresh, m.Zone, m.Load = d.Str(), d.Bool(), d.Str(), d.U32()
}

type Servers struct{}

func (*Servers) Op() Op        { return OpServers }
func (*Servers) Encode(*Enc)   {}
func (*Servers) Decode(d *Dec) {}

// I/O server requests. An object is named by Handle (the file's inode
// number) and Index (the server's position in the file's layout), so no two
// files or stripe units ever share one.

type Read struct {
	Handle uint64
	Index  uint32
	Off    uint64
	Len    uint32
	// Held is the object size the file's size at the metadata server
	// implies (0: unknown, or nothing held). A client that sends it says
	// the object must exist: absent, it is answered ErrnoMissing, not read
	// as a hole. Optional on the wire (a request without it is the older
	// form, whose absent objects read as holes).
	Held uint64
}

func (*Read) Op() Op { return OpRead }
func (m *Read) Encode(e *Enc) {
	e.U64(m.Handle)
	e.U32(m.Index)
	e.U64(m.Off)
	e.U32(m.Len)
	if m.Held != 0 {
		e.U64(m.Held)
	}
}
func (m *Read) Decode(d *Dec) {
	m.Handle, m.Index, m.Off, m.Len = d.U64(), d.U32(), d.U64(), d.U32()
	m.Held = d.OptU64()
}

type Write struct {
	Handle uint64
	Index  uint32
	Off    uint64
	Data   []byte
}

func (*Write) Op() Op          { return OpWrite }
func (m *Write) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index); e.U64(m.Off); e.Bytes(m.Data) }
func (m *Write) Decode(d *Dec) {
	m.Handle, m.Index, m.Off, m.Data = d.U64(), d.U32(), d.U64(), d.Bytes()
}
func (m *Write) encodeHead(e *Enc) {
	e.U64(m.Handle)
	e.U32(m.Index)
	e.U64(m.Off)
	e.U32(uint32(len(m.Data)))
}
func (m *Write) tail() []byte { return m.Data }

type Truncate struct {
	Handle uint64
	Index  uint32
	Size   uint64
}

func (*Truncate) Op() Op          { return OpTruncate }
func (m *Truncate) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index); e.U64(m.Size) }
func (m *Truncate) Decode(d *Dec) { m.Handle, m.Index, m.Size = d.U64(), d.U32(), d.U64() }

type Sync struct {
	Handle uint64
	Index  uint32
}

func (*Sync) Op() Op          { return OpSync }
func (m *Sync) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index) }
func (m *Sync) Decode(d *Dec) { m.Handle, m.Index = d.U64(), d.U32() }

type Remove struct {
	Handle uint64
	Index  uint32
}

func (*Remove) Op() Op          { return OpRemove }
func (m *Remove) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index) }
func (m *Remove) Decode(d *Dec) { m.Handle, m.Index = d.U64(), d.U32() }

type ObjStat struct {
	Handle uint64
	Index  uint32
}

func (*ObjStat) Op() Op          { return OpObjStat }
func (m *ObjStat) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index) }
func (m *ObjStat) Decode(d *Dec) { m.Handle, m.Index = d.U64(), d.U32() }
