package proto

// Messages of I/O server identity, replacement and garbage collection.

const (
	OpObjects  Op = 15 // ObjectsReply
	OpRefs     Op = 16 // RefsReply
	OpReplace  Op = 37 // ReplaceServer: accept an empty disk as a lost server
	OpRefCheck Op = 38 // RefCheck: which objects files still reference
	OpList     Op = 58 // ListObjects (I/O server)
	OpIdentify Op = 59 // Identify (I/O server)
)

// AnyIndex in an ObjRef stands for an object of a data directory made before
// objects carried their stripe index: it may hold any index of its file.
const AnyIndex = ^uint32(0)

// AllServers as a Create's StripeCount asks for every usable I/O server.
const AllServers = ^uint32(0)

// ReplaceServer accepts, as server ID, the next I/O server with an empty
// data directory that registers at ID's address (the disk was replaced).
// Answered with a ServersReply holding the server.
type ReplaceServer struct{ ID uint32 }

func (*ReplaceServer) Op() Op          { return OpReplace }
func (m *ReplaceServer) Encode(e *Enc) { e.U32(m.ID) }
func (m *ReplaceServer) Decode(d *Dec) { m.ID = d.U32() }

// ObjRef names one object: a file's inode number and its stripe index.
type ObjRef struct {
	Ino   uint64
	Index uint32
}

// RefCheck asks the metadata server which of the objects stored on server
// Server a file still references. Answered with a RefsReply, one flag per
// object.
type RefCheck struct {
	Server uint32
	Objs   []ObjRef
}

func (*RefCheck) Op() Op { return OpRefCheck }
func (m *RefCheck) Encode(e *Enc) {
	e.U32(m.Server)
	e.U32(uint32(len(m.Objs)))
	for _, o := range m.Objs {
		e.U64(o.Ino)
		e.U32(o.Index)
	}
}
func (m *RefCheck) Decode(d *Dec) {
	m.Server = d.U32()
	m.Objs = make([]ObjRef, d.Count(12))
	for i := range m.Objs {
		m.Objs[i].Ino, m.Objs[i].Index = d.U64(), d.U32()
	}
}

// RefsReply: Used[i] says whether RefCheck.Objs[i] belongs to a file.
type RefsReply struct{ Used []bool }

func (*RefsReply) Op() Op { return OpRefs }
func (m *RefsReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Used)))
	for _, u := range m.Used {
		e.Bool(u)
	}
}
func (m *RefsReply) Decode(d *Dec) {
	m.Used = make([]bool, d.Count(1))
	for i := range m.Used {
		m.Used[i] = d.Bool()
	}
}

// ListObjects asks an I/O server for its objects in (Ino, Index) order,
// starting after After (all when AfterSet is false), at most Limit of them.
type ListObjects struct {
	AfterSet bool
	After    ObjRef
	Limit    uint32
}

func (*ListObjects) Op() Op { return OpList }
func (m *ListObjects) Encode(e *Enc) {
	e.Bool(m.AfterSet)
	e.U64(m.After.Ino)
	e.U32(m.After.Index)
	e.U32(m.Limit)
}
func (m *ListObjects) Decode(d *Dec) {
	m.AfterSet, m.After.Ino, m.After.Index, m.Limit = d.Bool(), d.U64(), d.U32(), d.U32()
}

// ObjectInfo is one stored object.
type ObjectInfo struct {
	ObjRef
	Size  uint64
	Mtime int64 // ns since the epoch
}

type ObjectsReply struct {
	Objs []ObjectInfo
	More bool
}

func (*ObjectsReply) Op() Op { return OpObjects }
func (m *ObjectsReply) Encode(e *Enc) {
	e.U32(uint32(len(m.Objs)))
	for _, o := range m.Objs {
		e.U64(o.Ino)
		e.U32(o.Index)
		e.U64(o.Size)
		e.I64(o.Mtime)
	}
	e.Bool(m.More)
}
func (m *ObjectsReply) Decode(d *Dec) {
	m.Objs = make([]ObjectInfo, d.Count(28))
	for i := range m.Objs {
		o := &m.Objs[i]
		o.Ino, o.Index, o.Size, o.Mtime = d.U64(), d.U32(), d.U64(), d.I64()
	}
	m.More = d.Bool()
}

// Identify asks an I/O server who it is: answered with a ServersReply of one
// server (ID 0 when its data directory has no identity yet) and its cluster.
type Identify struct{}

func (*Identify) Op() Op        { return OpIdentify }
func (*Identify) Encode(*Enc)   {}
func (*Identify) Decode(d *Dec) {}
