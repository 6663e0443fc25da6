package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// Buckets of the bbolt store. Keys are big-endian so cursors walk in order.
var (
	bInode   = []byte("inode")   // ino -> record (attr, symlink target, parent)
	bDirent  = []byte("dirent")  // parent ino + name -> child ino
	bSys     = []byte("sys")     // counters and file-system defaults
	bIOD     = []byte("iod")     // server id -> proto.ServerInfo
	bReclaim = []byte("reclaim") // ino -> servers still holding its objects
	bXattr   = []byte("xattr")   // ino + name -> extended attribute value
	bOrphan  = []byte("orphan")  // ino (unlinked, still open) -> last renewal, i64 ns

	kNextIno = []byte("nextino")
	kNextIOD = []byte("nextiod")
)

// RootIno is the root directory's inode number.
const RootIno = 1

// inode is the stored form of one file, directory or symbolic link.
type inode struct {
	proto.Attr
	Target string // symlink target
	Parent uint64 // directories only: the one directory holding this one
}

func (n *inode) encode() []byte {
	e := proto.Enc{B: make([]byte, 0, 112+len(n.Target)+4*(len(n.Servers)+len(n.Extra)))}
	n.Attr.EncodeV1(&e)
	e.Str(n.Target)
	e.U64(n.Parent)
	// The replica fields come after the record's own: a record written
	// before them ends at Parent and reads them as zero.
	n.Attr.EncodeReplicas(&e)
	return e.B
}

func decodeInode(b []byte) (*inode, error) {
	d := proto.Dec{B: b}
	n := &inode{}
	n.Attr.DecodeV1(&d)
	n.Target = d.Str()
	n.Parent = d.U64()
	if len(d.B) > 0 { // (Err would call the rest trailing bytes)
		n.Attr.DecodeReplicas(&d)
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("corrupt inode record: %w", err)
	}
	return n, nil
}

func (n *inode) isDir() bool  { return n.Mode&sIFMT == sIFDIR }
func (n *inode) isReg() bool  { return n.Mode&sIFMT == sIFREG }
func (n *inode) isLink() bool { return n.Mode&sIFMT == sIFLNK }

// File type bits as in stat(2).
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

func u64key(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func direntKey(parent uint64, name string) []byte {
	return append(u64key(parent), name...)
}

// tx wraps a bbolt transaction with the store's typed accessors.
type tx struct {
	*bolt.Tx
	now int64   // the command's time (the leader's clock)
	ch  *change // what the command changed (nil: a read)
}

func (t tx) inode(ino uint64) (*inode, error) {
	b := t.Bucket(bInode).Get(u64key(ino))
	if b == nil {
		return nil, proto.Errorf(errnoNoEnt, fmt.Sprintf("inode %d: no such file or directory", ino))
	}
	return decodeInode(b)
}

func (t tx) dir(ino uint64) (*inode, error) {
	n, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, proto.Errorf(errnoNotDir, fmt.Sprintf("inode %d: not a directory", ino))
	}
	return n, nil
}

func (t tx) put(n *inode) error {
	t.ch.touch(n.Ino)
	return t.Bucket(bInode).Put(u64key(n.Ino), n.encode())
}

func (t tx) child(parent uint64, name string) (uint64, bool) {
	v := t.Bucket(bDirent).Get(direntKey(parent, name))
	if v == nil {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

func (t tx) lookup(parent uint64, name string) (*inode, error) {
	ino, ok := t.child(parent, name)
	if !ok {
		return nil, proto.Errorf(errnoNoEnt, fmt.Sprintf("%s: no such file or directory", name))
	}
	return t.inode(ino)
}

func (t tx) setChild(parent uint64, name string, ino uint64) error {
	return t.Bucket(bDirent).Put(direntKey(parent, name), u64key(ino))
}

func (t tx) delChild(parent uint64, name string) error {
	return t.Bucket(bDirent).Delete(direntKey(parent, name))
}

func (t tx) empty(dir uint64) bool {
	c := t.Bucket(bDirent).Cursor()
	k, _ := c.Seek(u64key(dir))
	return k == nil || binary.BigEndian.Uint64(k[:8]) != dir
}

func (t tx) nextIno() (uint64, error) {
	b := t.Bucket(bSys)
	v := b.Get(kNextIno)
	next := uint64(RootIno + 1)
	if v != nil {
		next = binary.BigEndian.Uint64(v)
	}
	return next, b.Put(kNextIno, u64key(next+1))
}

// drop removes one link to n; the last link frees the inode and queues its
// objects for reclaim on the I/O servers, in the same transaction.
func (t tx) drop(n *inode) error {
	if n.isDir() {
		t.ch.touch(n.Ino)
		return t.Bucket(bInode).Delete(u64key(n.Ino))
	}
	n.Nlink--
	n.Ctime = t.now
	if n.Nlink > 0 {
		return t.put(n)
	}
	t.ch.touch(n.Ino)
	if err := t.Bucket(bInode).Delete(u64key(n.Ino)); err != nil {
		return err
	}
	if err := t.dropStale(n); err != nil {
		return err
	}
	if n.isReg() && len(n.Servers) > 0 {
		if t.ch != nil {
			t.ch.reclaim = true
		}
		return t.Bucket(bReclaim).Put(u64key(n.Ino), encodeReclaim(append(slices.Clone(n.Servers), n.Extra...), uint32(len(n.Servers))))
	}
	return nil
}

// openDB opens the store; mmap > 0 maps that much of it at once.
func openDB(path string, mmap int) (*bolt.DB, error) {
	o := &bolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, InitialMmapSize: mmap}
	if mmap > 0 {
		// Deferred sync: freed pages pile up between checkpoints; the
		// hash map freelist merges them without sorting the whole list.
		o.FreelistType = bolt.FreelistMapType
	}
	db, err := bolt.Open(path, 0o600, o)
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: locked by another process (is a metadata server already running on this directory?)", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(btx *bolt.Tx) error {
		// Buckets only: the root directory and the cluster ID come from
		// the log (cmdInit), so that every member holds the same ones.
		for _, name := range [][]byte{bInode, bDirent, bSys, bIOD, bReclaim, bXattr, bOrphan, bClient, bClientSeen, bStale, bReserved} {
			if _, err := btx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise %s: %w", path, err)
	}
	return db, nil
}

// A reclaim record lists the servers still holding objects of a removed
// file: the columns' first copies, then the other copies column by column
// (as Attr.Extra), then the column count when there are other copies
// (records from before replicas have none). A server done is 0.
func encodeReclaim(servers []uint32, cols uint32) []byte {
	e := proto.Enc{}
	e.U32s(servers)
	if int(cols) < len(servers) {
		e.U32(cols)
	}
	return e.B
}

func decodeReclaim(b []byte) (servers []uint32, cols uint32) {
	d := proto.Dec{B: b}
	servers = d.U32s()
	cols = uint32(len(servers))
	if len(d.B) >= 4 {
		cols = d.U32()
	}
	return servers, cols
}

// reclaimIndex is the object index (stripe column) of position p of a
// reclaim record.
func reclaimIndex(p int, n int, cols uint32) uint32 {
	c := int(cols)
	if p < c || c == 0 || n <= c {
		return uint32(p)
	}
	per := (n - c) / c // copies 2..R of each column
	return uint32((p - c) / max(1, per))
}
