// Package powercut is a power-loss harness for tests and benchmarks: a small
// FUSE pass-through file system that behaves as a disk with a volatile cache
// under strict POSIX rules (the idea of Jepsen's LazyFS), and drops that
// cache on command.
//
// Mounted over an empty directory, it keeps every write, truncation and
// new, renamed or removed directory entry in memory until it is made
// durable:
//
//   - fsync or fdatasync of a file (or a write through an O_SYNC/O_DSYNC
//     descriptor) makes that file's data and size durable, nothing else;
//   - fsync of a directory makes its entries durable (names created, renamed
//     in or out, removed), nothing else: a new file whose data is synced but
//     whose parent directory is not is gone after a cut, and so is a
//     directory whose own parent was never synced, with all under it.
//
// Cut drops everything not durable and presents the durable state at the
// same mount point (it remounts, so the kernel keeps no page or entry cache
// of the lost state). The processes using the mount must be gone first, as
// after a real power cut.
//
// Durable file data lives in a backing directory, one file per inode; the
// durable name space lives in this process's memory (the harness is the
// disk, and it outlives the processes under test). Modes, owners and times
// are kept but not modelled for durability; hard links, symbolic links and
// special files are refused (ENOTSUP): the data directories under test use
// none.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// Disk is a mounted harness.
type Disk struct {
	mnt     string
	backing string

	mu      sync.Mutex
	nextIno uint64
	root    *inode
	inodes  map[uint64]*inode // every inode the current state can reach or a handle holds
	server  *fuse.Server
	stats   Stats
}

// Stats counts what the harness saw; Cut reports what it dropped.
type Stats struct {
	Syncs          int // fsync/fdatasync of files (and O_SYNC writes)
	DirSyncs       int // fsync of directories
	Cuts           int
	DroppedBytes   int64 // unsynced file data dropped by cuts (page granular)
	DroppedEntries int   // directory entries whose change a cut undid
}

// inode is one file or directory of the model.
type inode struct {
	ino   uint64
	mode  uint32 // type and permission bits
	uid   uint32
	gid   uint32
	mtime time.Time

	// Directories: the entries as processes see them, and as they survive.
	cur, dur map[string]*inode

	// Files: the durable bytes are the backing file's first durSize bytes.
	// The current bytes are those, cut at minSize (the smallest size since
	// the last sync: a shrink then a growth reads zeros), overlaid with
	// dirty pages, cut at size.
	size, durSize, minSize int64
	dirty                  map[int64][]byte // page index -> whole page
	backing                *os.File
}

func (n *inode) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }

// Mount mounts a new, empty harness at mnt, keeping durable data in backing
// (created if needed; it must be empty).
func Mount(mnt, backing string) (*Disk, error) {
	if err := os.MkdirAll(backing, 0o700); err != nil {
		return nil, fmt.Errorf("powercut: backing directory: %w", err)
	}
	if ents, err := os.ReadDir(backing); err != nil {
		return nil, fmt.Errorf("powercut: backing directory: %w", err)
	} else if len(ents) > 0 {
		return nil, fmt.Errorf("powercut: backing directory %s is not empty", backing)
	}
	d := &Disk{mnt: mnt, backing: backing, nextIno: 2, inodes: map[uint64]*inode{}}
	d.root = &inode{ino: 1, mode: syscall.S_IFDIR | 0o755, cur: map[string]*inode{}, dur: map[string]*inode{}, mtime: time.Now()}
	d.inodes[1] = d.root
	if err := d.mount(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Disk) mount() error {
	zero := time.Duration(0)
	root := &node{d: d, in: d.root}
	srv, err := fs.Mount(d.mnt, root, &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:        "powercut",
			Name:          "powercut",
			DisableXAttrs: true,
			MaxWrite:      1 << 20,
			DirectMount:   true, // as root, without fusermount
		},
	})
	if err != nil {
		return fmt.Errorf("powercut: mount %s: %w", d.mnt, err)
	}
	d.server = srv
	return nil
}

// Dir is the mount point.
func (d *Disk) Dir() string { return d.mnt }

// Stats returns the counters so far.
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Unmount unmounts the harness (its durable state is kept in memory and the
// backing directory until the Disk is dropped).
func (d *Disk) Unmount() error {
	if d.server == nil {
		return nil
	}
	err := d.server.Unmount()
	if err != nil {
		return fmt.Errorf("powercut: unmount %s (is a process still using it?): %w", d.mnt, err)
	}
	d.server = nil
	return nil
}

// Close unmounts for good, also with files still open: then the FUSE
// connection is aborted (their later calls fail with ENOTCONN) and the
// mount detached, so that a test that failed with a file open does not
// hang at exit on a close its own process would have to serve. It returns
// the error of the clean unmount, if it failed.
func (d *Disk) Close() error {
	err := d.Unmount()
	if err != nil {
		unix.Unmount(d.mnt, unix.MNT_FORCE) // FUSE aborts the connection
		unix.Unmount(d.mnt, unix.MNT_DETACH)
		d.server = nil
	}
	return err
}

// Cut is a power cut: it unmounts, drops every write and directory change
// not made durable, and mounts the durable state again. The processes that
// used the mount must have exited.
func (d *Disk) Cut() error {
	if err := d.Unmount(); err != nil {
		return err
	}
	d.mu.Lock()
	d.drop()
	d.mu.Unlock()
	return d.mount()
}

// drop rolls the model back to its durable state.
func (d *Disk) drop() {
	d.stats.Cuts++
	reach := map[uint64]*inode{}
	var walk func(n *inode)
	walk = func(n *inode) {
		if reach[n.ino] != nil {
			return
		}
		reach[n.ino] = n
		if n.isDir() {
			for name, c := range n.cur {
				if n.dur[name] != c {
					d.stats.DroppedEntries++
				}
			}
			for name, c := range n.dur {
				if n.cur[name] != c {
					d.stats.DroppedEntries++
				}
			}
			n.cur = clone(n.dur)
			for _, c := range n.dur {
				walk(c)
			}
			return
		}
		d.stats.DroppedBytes += int64(len(n.dirty)) * pageSize
		n.dirty = nil
		n.size, n.minSize = n.durSize, n.durSize
	}
	walk(d.root)
	for ino, n := range d.inodes {
		if reach[ino] == nil {
			if n.backing != nil {
				n.backing.Close()
				os.Remove(n.backing.Name())
			}
			delete(d.inodes, ino)
		}
	}
}

func clone(m map[string]*inode) map[string]*inode {
	c := make(map[string]*inode, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// read copies the current bytes of n at off into p; it returns how many.
func (d *Disk) read(n *inode, p []byte, off int64) (int, error) {
	if off >= n.size {
		return 0, nil
	}
	p = p[:min(int64(len(p)), n.size-off)]
	clear(p)
	// Durable bytes first, up to the smallest size since the last sync.
	if n.backing != nil && off < n.minSize {
		end := min(off+int64(len(p)), n.minSize, n.durSize)
		if end > off {
			if _, err := n.backing.ReadAt(p[:end-off], off); err != nil && !errors.Is(err, io.EOF) {
				return 0, err
			}
		}
	}
	for pg := off / pageSize; pg*pageSize < off+int64(len(p)); pg++ {
		b := n.dirty[pg]
		if b == nil {
			continue
		}
		start := max(pg*pageSize, off)
		end := min(pg*pageSize+pageSize, off+int64(len(p)))
		copy(p[start-off:end-off], b[start-pg*pageSize:end-pg*pageSize])
	}
	return len(p), nil
}

// page returns n's dirty page pg, made from its current bytes if new.
func (d *Disk) page(n *inode, pg int64) ([]byte, error) {
	if b := n.dirty[pg]; b != nil {
		return b, nil
	}
	b := make([]byte, pageSize)
	if _, err := d.read(n, b, pg*pageSize); err != nil {
		return nil, err
	}
	if n.dirty == nil {
		n.dirty = map[int64][]byte{}
	}
	n.dirty[pg] = b
	return b, nil
}

func (d *Disk) write(n *inode, data []byte, off int64) error {
	end := off + int64(len(data))
	for pg := off / pageSize; pg*pageSize < end; pg++ {
		b, err := d.page(n, pg)
		if err != nil {
			return err
		}
		start := max(pg*pageSize, off)
		stop := min(pg*pageSize+pageSize, end)
		copy(b[start-pg*pageSize:stop-pg*pageSize], data[start-off:stop-off])
	}
	n.size = max(n.size, end)
	n.mtime = time.Now()
	return nil
}

// truncate sets n's current size; bytes past it read as zeros if it grows
// again.
func (d *Disk) truncate(n *inode, size int64) {
	if size < n.size {
		for pg, b := range n.dirty {
			switch {
			case pg*pageSize >= size:
				delete(n.dirty, pg)
			case pg*pageSize+pageSize > size:
				clear(b[size-pg*pageSize:])
			}
		}
		n.minSize = min(n.minSize, size)
	}
	n.size = size
	n.mtime = time.Now()
}

// zero writes zeros over [off, off+length) without changing the size (a
// punched hole reads as zeros, durable at the next sync).
func (d *Disk) zero(n *inode, off, length int64) error {
	end := min(off+length, n.size)
	for off < end {
		k := min(end-off, 1<<20)
		if err := d.write(n, make([]byte, k), off); err != nil {
			return err
		}
		off += k
	}
	return nil
}

// syncFile makes n's data and size durable.
func (d *Disk) syncFile(n *inode) error {
	d.stats.Syncs++
	if n.backing == nil {
		f, err := os.OpenFile(filepath.Join(d.backing, strconv.FormatUint(n.ino, 10)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		n.backing = f
	}
	if n.minSize < n.durSize {
		if err := n.backing.Truncate(n.minSize); err != nil {
			return err
		}
	}
	pages := make([]int64, 0, len(n.dirty))
	for pg := range n.dirty {
		pages = append(pages, pg)
	}
	sort.Slice(pages, func(i, j int) bool { return pages[i] < pages[j] })
	for _, pg := range pages {
		b := n.dirty[pg]
		if pg*pageSize >= n.size {
			continue
		}
		b = b[:min(pageSize, n.size-pg*pageSize)]
		if _, err := n.backing.WriteAt(b, pg*pageSize); err != nil {
			return err
		}
	}
	if err := n.backing.Truncate(n.size); err != nil {
		return err
	}
	if err := n.backing.Sync(); err != nil {
		return err
	}
	n.dirty = nil
	n.durSize, n.minSize = n.size, n.size
	return nil
}

func (d *Disk) newInode(mode uint32, ctx context.Context) *inode {
	n := &inode{ino: d.nextIno, mode: mode, mtime: time.Now()}
	if c, ok := ctx.(*fuse.Context); ok {
		n.uid, n.gid = c.Uid, c.Gid
	}
	d.nextIno++
	if n.isDir() {
		n.cur, n.dur = map[string]*inode{}, map[string]*inode{}
	}
	d.inodes[n.ino] = n
	return n
}

func (d *Disk) attr(n *inode, out *fuse.Attr) {
	out.Ino = n.ino
	out.Mode = n.mode
	out.Nlink = 1
	if n.isDir() {
		out.Nlink = 2
		out.Size = 4096
	} else {
		out.Size = uint64(n.size)
		out.Blocks = (uint64(n.size) + 511) / 512
	}
	out.Blksize = pageSize
	out.Owner = fuse.Owner{Uid: n.uid, Gid: n.gid}
	out.SetTimes(nil, &n.mtime, &n.mtime)
}
