package proto

// Messages that let the FUSE mount behave like a local disk: special files,
// extended attributes, files unlinked while open (orphans), and fallocate.

// Reply ops 17-19, metadata requests 40-47, I/O server requests 56-57 belong
// to this file.
const (
	OpXattr Op = 17 // XattrReply

	OpMknod         Op = 40
	OpSetXattr      Op = 41
	OpGetXattr      Op = 42
	OpListXattr     Op = 43
	OpRemoveXattr   Op = 44
	OpUnlinkOpen    Op = 45
	OpReleaseOrphan Op = 46
	OpRenewOrphans  Op = 47

	OpPunch Op = 56
	OpAlloc Op = 57
)

// Extended attribute limits, as Linux defines them (XATTR_NAME_MAX,
// XATTR_SIZE_MAX, XATTR_LIST_MAX).
const (
	XattrNameMax = 255
	XattrSizeMax = 64 << 10
	XattrListMax = 64 << 10
)

// RenameOrphan is a Rename flag for a mount that holds the file being
// replaced open: if the rename removes its last link, it stays as an orphan
// (see UnlinkOpen) instead of being freed. Both names must be non-directories.
const RenameOrphan uint32 = 1 << 8

// SetXattr flags, as setxattr(2).
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// newPosix returns an empty message for one of this file's ops, or nil.
func newPosix(op Op) Msg {
	switch op {
	case OpXattr:
		return &XattrReply{}
	case OpMknod:
		return &Mknod{}
	case OpSetXattr:
		return &SetXattr{}
	case OpGetXattr:
		return &GetXattr{}
	case OpListXattr:
		return &ListXattr{}
	case OpRemoveXattr:
		return &RemoveXattr{}
	case OpUnlinkOpen:
		return &UnlinkOpen{}
	case OpReleaseOrphan:
		return &ReleaseOrphan{}
	case OpRenewOrphans:
		return &RenewOrphans{}
	case OpPunch:
		return &Punch{}
	case OpAlloc:
		return &Alloc{}
	case OpWalkBeneath:
		return &WalkBeneath{}
	}
	return nil
}

// Rdev is a character or block device's device number (Linux's
// new_encode_dev form, as FUSE carries it). Devices have no layout, so the
// wire Attr carries it in StripeSize; it is 0 for every other type.
func (a *Attr) Rdev() uint32 {
	switch a.Mode & 0o170000 {
	case 0o020000, 0o060000:
		return a.StripeSize
	}
	return 0
}

// XattrReply carries an attribute's value (GetXattr) or the NUL-terminated
// names of a file's attributes back to back (ListXattr), as listxattr(2).
type XattrReply struct{ Value []byte }

func (*XattrReply) Op() Op          { return OpXattr }
func (m *XattrReply) Encode(e *Enc) { e.Bytes(m.Value) }
func (m *XattrReply) Decode(d *Dec) { m.Value = d.Bytes() }

// Mknod makes a metadata-only inode: a FIFO, socket, or character or block
// device (Mode carries the type bits). Rdev is the device number.
type Mknod struct {
	Parent   uint64
	Name     string
	Mode     uint32
	Rdev     uint32
	Uid, Gid uint32
}

func (*Mknod) Op() Op { return OpMknod }
func (m *Mknod) Encode(e *Enc) {
	e.U64(m.Parent)
	e.Str(m.Name)
	e.U32(m.Mode)
	e.U32(m.Rdev)
	e.U32(m.Uid)
	e.U32(m.Gid)
}
func (m *Mknod) Decode(d *Dec) {
	m.Parent, m.Name, m.Mode, m.Rdev, m.Uid, m.Gid = d.U64(), d.Str(), d.U32(), d.U32(), d.U32(), d.U32()
}

type SetXattr struct {
	Ino   uint64
	Name  string
	Value []byte
	Flags uint32 // XattrCreate, XattrReplace
}

func (*SetXattr) Op() Op { return OpSetXattr }
func (m *SetXattr) Encode(e *Enc) {
	e.U64(m.Ino)
	e.Str(m.Name)
	e.Bytes(m.Value)
	e.U32(m.Flags)
}
func (m *SetXattr) Decode(d *Dec) {
	m.Ino, m.Name, m.Value, m.Flags = d.U64(), d.Str(), d.Bytes(), d.U32()
}

type GetXattr struct {
	Ino  uint64
	Name string
}

func (*GetXattr) Op() Op          { return OpGetXattr }
func (m *GetXattr) Encode(e *Enc) { e.U64(m.Ino); e.Str(m.Name) }
func (m *GetXattr) Decode(d *Dec) { m.Ino, m.Name = d.U64(), d.Str() }

type ListXattr struct{ Ino uint64 }

func (*ListXattr) Op() Op          { return OpListXattr }
func (m *ListXattr) Encode(e *Enc) { e.U64(m.Ino) }
func (m *ListXattr) Decode(d *Dec) { m.Ino = d.U64() }

type RemoveXattr struct {
	Ino  uint64
	Name string
}

func (*RemoveXattr) Op() Op          { return OpRemoveXattr }
func (m *RemoveXattr) Encode(e *Enc) { e.U64(m.Ino); e.Str(m.Name) }
func (m *RemoveXattr) Decode(d *Dec) { m.Ino, m.Name = d.U64(), d.Str() }

// UnlinkOpen is Unlink for a file the sender holds open: when it removes the
// last link the inode becomes an orphan (nlink 0, in no directory) that keeps
// its data until ReleaseOrphan. Replies Attr (the file after the unlink).
type UnlinkOpen struct {
	Parent uint64
	Name   string
}

func (*UnlinkOpen) Op() Op          { return OpUnlinkOpen }
func (m *UnlinkOpen) Encode(e *Enc) { e.U64(m.Parent); e.Str(m.Name) }
func (m *UnlinkOpen) Decode(d *Dec) { m.Parent, m.Name = d.U64(), d.Str() }

// ReleaseOrphan says the last open descriptor of an orphan closed: its inode
// and objects are freed. OK also when Ino is no orphan (any more).
type ReleaseOrphan struct{ Ino uint64 }

func (*ReleaseOrphan) Op() Op          { return OpReleaseOrphan }
func (m *ReleaseOrphan) Encode(e *Enc) { e.U64(m.Ino) }
func (m *ReleaseOrphan) Decode(d *Dec) { m.Ino = d.U64() }

// RenewOrphans says the sender still holds these orphans open. An orphan not
// renewed for meta.OrphanLease (its mount crashed) is freed.
type RenewOrphans struct{ Inos []uint64 }

func (*RenewOrphans) Op() Op          { return OpRenewOrphans }
func (m *RenewOrphans) Encode(e *Enc) { e.U64s(m.Inos) }
func (m *RenewOrphans) Decode(d *Dec) { m.Inos = d.U64s() }

// Punch deallocates the object range [Off, Off+Len): it reads as zeros and
// its space is freed; the object's size does not change.
type Punch struct {
	Handle uint64
	Index  uint32 // the object's stripe index in the file's layout
	Off    uint64
	Len    uint64
}

func (*Punch) Op() Op          { return OpPunch }
func (m *Punch) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index); e.U64(m.Off); e.U64(m.Len) }
func (m *Punch) Decode(d *Dec) { m.Handle, m.Index, m.Off, m.Len = d.U64(), d.U32(), d.U64(), d.U64() }

// Alloc reserves disk space for the object range [Off, Off+Len) without
// changing the object's size (fallocate FALLOC_FL_KEEP_SIZE).
type Alloc struct {
	Handle uint64
	Index  uint32 // the object's stripe index in the file's layout
	Off    uint64
	Len    uint64
}

func (*Alloc) Op() Op          { return OpAlloc }
func (m *Alloc) Encode(e *Enc) { e.U64(m.Handle); e.U32(m.Index); e.U64(m.Off); e.U64(m.Len) }
func (m *Alloc) Decode(d *Dec) { m.Handle, m.Index, m.Off, m.Len = d.U64(), d.U32(), d.U64(), d.U64() }
