package powercut

import (
	"context"
	"sort"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is the FUSE face of a model inode (a new one per mount).
type node struct {
	fs.Inode
	d  *Disk
	in *inode
}

// handle is an open file: writes through it sync when opened O_SYNC/O_DSYNC.
type handle struct{ sync bool }

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeReader    = (*node)(nil)
	_ fs.NodeWriter    = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
	_ fs.NodeFlusher   = (*node)(nil)
	_ fs.NodeAllocater = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
	_ fs.NodeLinker    = (*node)(nil)
	_ fs.NodeSymlinker = (*node)(nil)
	_ fs.NodeMknoder   = (*node)(nil)
)

func (n *node) child(ctx context.Context, c *inode, out *fuse.EntryOut) *fs.Inode {
	n.d.attr(c, &out.Attr)
	return n.NewInode(ctx, &node{d: n.d, in: c}, fs.StableAttr{Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	c := n.in.cur[name]
	if c == nil {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, c, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	n.d.attr(n.in, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if sz, ok := in.GetSize(); ok {
		if n.in.isDir() {
			return syscall.EISDIR
		}
		n.d.truncate(n.in, int64(sz))
	}
	if m, ok := in.GetMode(); ok {
		n.in.mode = n.in.mode&syscall.S_IFMT | m&07777
	}
	if u, ok := in.GetUID(); ok {
		n.in.uid = u
	}
	if g, ok := in.GetGID(); ok {
		n.in.gid = g
	}
	if t, ok := in.GetMTime(); ok {
		n.in.mtime = t
	}
	n.d.attr(n.in, &out.Attr)
	return 0
}

func openFlags(flags uint32) *handle {
	return &handle{sync: flags&(unix.O_SYNC|unix.O_DSYNC) != 0}
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if n.in.cur[name] != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	c := n.d.newInode(syscall.S_IFREG|mode&07777, ctx)
	n.in.cur[name] = c
	return n.child(ctx, c, out), openFlags(flags), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if n.in.cur[name] != nil {
		return nil, syscall.EEXIST
	}
	c := n.d.newInode(syscall.S_IFDIR|mode&07777, ctx)
	n.in.cur[name] = c
	return n.child(ctx, c, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	c := n.in.cur[name]
	if c == nil {
		return syscall.ENOENT
	}
	if c.isDir() {
		return syscall.EISDIR
	}
	delete(n.in.cur, name)
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	c := n.in.cur[name]
	if c == nil {
		return syscall.ENOENT
	}
	if !c.isDir() {
		return syscall.ENOTDIR
	}
	if len(c.cur) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(n.in.cur, name)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	dst := newParent.(*node).in
	c := n.in.cur[name]
	if c == nil {
		return syscall.ENOENT
	}
	if flags&^unix.RENAME_NOREPLACE != 0 {
		return syscall.ENOTSUP // RENAME_EXCHANGE and whiteouts: unused by the data directories
	}
	if old := dst.cur[newName]; old != nil {
		switch {
		case old == c:
			return 0
		case flags&unix.RENAME_NOREPLACE != 0:
			return syscall.EEXIST
		case old.isDir() && !c.isDir():
			return syscall.EISDIR
		case !old.isDir() && c.isDir():
			return syscall.ENOTDIR
		case old.isDir() && len(old.cur) > 0:
			return syscall.ENOTEMPTY
		}
	}
	if c.isDir() {
		// A directory cannot move under itself.
		for p := dst; p != nil; p = n.d.parentOf(p) {
			if p == c {
				return syscall.EINVAL
			}
		}
	}
	delete(n.in.cur, name)
	dst.cur[newName] = c
	return 0
}

// parentOf finds a directory's current parent (nil for the root).
func (d *Disk) parentOf(c *inode) *inode {
	for _, p := range d.inodes {
		if p.isDir() {
			for _, x := range p.cur {
				if x == c {
					return p
				}
			}
		}
	}
	return nil
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	names := make([]string, 0, len(n.in.cur))
	for name := range n.in.cur {
		names = append(names, name)
	}
	sort.Strings(names)
	ents := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		c := n.in.cur[name]
		ents = append(ents, fuse.DirEntry{Name: name, Ino: c.ino, Mode: c.mode & syscall.S_IFMT})
	}
	return fs.NewListDirStream(ents), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		n.d.mu.Lock()
		n.d.truncate(n.in, 0)
		n.d.mu.Unlock()
	}
	return openFlags(flags), 0, 0
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	k, err := n.d.read(n.in, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if err := n.d.write(n.in, data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	if h, ok := f.(*handle); ok && h.sync {
		if err := n.d.syncFile(n.in); err != nil {
			return 0, fs.ToErrno(err)
		}
	}
	return uint32(len(data)), 0
}

// Fsync serves fsync and fdatasync of files, and fsync of directories.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	if n.in.isDir() {
		n.d.stats.DirSyncs++
		n.in.dur = clone(n.in.cur)
		return 0
	}
	return fs.ToErrno(n.d.syncFile(n.in))
}

// Flush (close) makes nothing durable, as on a disk.
func (n *node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	n.d.mu.Lock()
	defer n.d.mu.Unlock()
	switch mode {
	case 0:
		if end := int64(off + size); end > n.in.size {
			n.d.truncate(n.in, end)
		}
		return 0
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0 // space reservation: nothing to remember
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		return fs.ToErrno(n.d.zero(n.in, int64(off), int64(size)))
	}
	return syscall.EOPNOTSUPP
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.d.backing, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}
