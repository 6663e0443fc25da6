// Package fusefs mounts the parallel file system with FUSE, so that ordinary
// tools work on it (PVFS's "transparent access").
//
// Consistency is close-to-open, as NFS: close(2) (FUSE flush) pushes the
// data to the I/O servers, syncs it and publishes the size; open revalidates
// attributes and drops the kernel's cached pages unless the file is
// unchanged since its last open here. With a caching client the kernel
// keeps attributes, names and pages, dropped by meta's callbacks (see
// kcache.go); without one, timeouts default to 0.
// All open descriptors of one inode share one client.File, so their writes
// and sizes agree. A file unlinked while open becomes an orphan on the
// metadata server (nlink 0, in no directory) that this mount frees at its
// last close (see posix.go).
package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a mount.
type Options struct {
	ReadOnly bool
	// AttrTimeout is how long the kernel may cache attributes and names
	// when no callback can drop them (0: ask the client every time).
	AttrTimeout time.Duration
	// KernelCache is how long the kernel may cache attributes, names and
	// pages that a caching client's callbacks drop when they change (0:
	// DefaultKernelCache; negative: off). Unused without a client cache.
	KernelCache time.Duration
	Debug       bool
	Log         *slog.Logger
	Metrics     *Metrics // nil: none
}

// Mount mounts the file system of c at dir and returns the FUSE server; call
// Wait on it, and Unmount to end.
func Mount(dir string, c *client.Client, o Options) (*fuse.Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	fsys := &filesystem{c: c, opts: o}
	if o.KernelCache >= 0 {
		ttl := o.KernelCache
		if ttl == 0 {
			ttl = DefaultKernelCache
		}
		kc := newKcache(ttl)
		if c.OnCacheChange(kc.changed) {
			fsys.kc = kc
		} else {
			kc.stop()
		}
	}
	root := &node{fsys: fsys}
	if fsys.kc != nil {
		fsys.kc.nodes[1] = root
	}
	t := o.AttrTimeout
	mo := fuse.MountOptions{
		FsName:        "corral:" + c.Meta(),
		Name:          "corral",
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		// Without this the kernel asks for attributes on every read(2)
		// to spot changes; close-to-open only needs them at open, which
		// drops cached pages unless they are known current (keep-cache).
		ExplicitDataCacheControl: true,
		// Reads answer from memory, never from a file descriptor, so
		// go-fuse's splice path cannot apply: it would only fill a pipe
		// with the header to throw it away, and for a 1 MiB read (header
		// included over the 1 MiB pipe limit) log a warning every time.
		DisableSplice: true,
		Options:       []string{"default_permissions"},
		Debug:         o.Debug,
		Logger:        slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn),
	}
	if syscall.Geteuid() == 0 {
		// As root: mount(2) directly (no fusermount needed) and let every
		// user in, with the kernel checking permissions.
		mo.DirectMount = true
		mo.AllowOther = true
	}
	if o.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	srv, err := mount(dir, root, &fs.Options{
		MountOptions:    mo,
		AttrTimeout:     &t,
		EntryTimeout:    &t,
		NegativeTimeout: &t,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
		// Keep mode 0000 as it is: go-fuse would otherwise show it as
		// 0644/0755 and let every user read it.
		NullPermissions: true,
	}, o.Metrics)
	if err != nil && fsys.kc != nil {
		c.OnCacheChange(nil)
		fsys.kc.stop()
	}
	if err == nil && fsys.kc != nil {
		go func() { srv.Wait(); c.OnCacheChange(nil); fsys.kc.stop() }()
	}
	if err == nil {
		raiseReadAhead(dir, o.Log)
		go root.fsys.renewOrphans(srv)
	}
	return srv, err
}

// raiseReadAhead lets the kernel read ahead 4 MiB instead of the default
// 128 KiB: sequential reads then reach every I/O server at once (measured
// here: 241 -> 440 MB/s for a cold 512 MiB read). Needs root; without it
// the default stays.
func raiseReadAhead(dir string, log *slog.Logger) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(p, []byte("4096"), 0o644); err != nil && syscall.Geteuid() == 0 {
		log.Warn("could not raise the kernel's read-ahead", "file", p, "err", err)
	}
}

type filesystem struct {
	c    *client.Client
	opts Options

	orphansMu sync.Mutex
	orphans   map[uint64]bool // orphans this mount holds open

	kc *kcache // nil: the kernel caches only for AttrTimeout
}

// node is one inode of the file system.
type node struct {
	fs.Inode
	fsys *filesystem

	// life serializes the open file's life cycle: the first open, the
	// last close, and unlink or rename over a file open here (so an open
	// or last close cannot slip between checking refs and the metadata
	// call). It is held across those network calls; mu never is.
	life sync.Mutex
	// mu guards the fields below, local state only: operations that need
	// just them (Getattr's open size, the cached capability) never wait
	// for a network call on this inode.
	mu     sync.Mutex
	file   *client.File // shared by every open descriptor
	refs   int
	orphan bool    // unlinked while open: freed at the last close
	caps   *caps   // security.capability while open (see posix.go)
	kept   keepKey // the attributes at the last open (see openFlags)
}

var (
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeReaddirer   = (*node)(nil)
	_ fs.NodeMkdirer     = (*node)(nil)
	_ fs.NodeRmdirer     = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeSymlinker   = (*node)(nil)
	_ fs.NodeReadlinker  = (*node)(nil)
	_ fs.NodeLinker      = (*node)(nil)
	_ fs.NodeStatfser    = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)

// detachNote: every operation runs to completion even when the kernel
// interrupts it (a signal reached the caller; Go programs get one every few
// milliseconds for preemption). Abandoning a create or a close half-way would
// hand the caller EINTR for something that may have happened, and close(2)
// is not retried. Calls are bounded by the protocol's timeouts instead.

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// errno maps a client error to what the kernel expects.
func (n *node) errno(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	n.fsys.opts.Log.Warn("I/O error", "op", op, "ino", n.ino(), "err", err)
	return syscall.EIO
}

func (n *node) rofs() bool { return n.fsys.opts.ReadOnly }

func fillAttr(a *proto.Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = (a.Size + 511) / 512
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
	out.Blksize = 1 << 16
	if a.StripeSize != 0 && a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		out.Blksize = a.StripeSize
	}
	out.Rdev = a.Rdev()
}

// child wraps a looked-up or created inode.
func (n *node) child(ctx context.Context, a *proto.Attr, out *fuse.EntryOut) *fs.Inode {
	fillAttr(a, &out.Attr)
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: a.Ino})
	if cn, ok := ch.Operations().(*node); ok && n.fsys.kc != nil {
		n.fsys.kc.add(cn)
	}
	return ch
}

// withOpenSize adds what an open file's writes not yet published changed:
// the size, and the mtime (and ctime) of the latest write, as a local file
// system shows them at once.
func (n *node) withOpenSize(a *proto.Attr) {
	n.mu.Lock()
	f := n.file
	n.mu.Unlock()
	// Outside mu: Pending waits for the file's own lock, which a write-back
	// to the I/O servers (Sync) holds across its round trips.
	if f != nil {
		size, mtime := f.Pending()
		a.Size = max(a.Size, uint64(size))
		if mtime != 0 {
			a.Mtime, a.Ctime = mtime, max(a.Ctime, mtime)
		}
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if tooLong(name) {
		return nil, syscall.ENAMETOOLONG
	}
	epoch, trusted := n.fsys.begin()
	a, err := n.fsys.c.Lookup(ctx, n.ino(), name)
	if err != nil {
		return nil, n.errno("lookup", err)
	}
	ch := n.child(ctx, &a, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.withOpenSize(&a)
		fillAttr(&a, &out.Attr)
	}
	n.fsys.entryTimeouts(epoch, trusted, out)
	return ch, 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	epoch, trusted := n.fsys.begin()
	a, err := n.fsys.c.GetAttr(ctx, n.ino())
	if err != nil {
		return n.errno("getattr", gone(err, n.fsys.kc != nil))
	}
	n.withOpenSize(&a)
	fillAttr(&a, &out.Attr)
	n.fsys.attrTimeout(epoch, trusted, out)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	defer n.fsys.changing()()
	epoch, trusted := n.fsys.begin()
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(ctx, int64(size)); err != 0 {
			return err
		}
	}
	m := &proto.SetAttr{Ino: n.ino()}
	if mode, ok := in.GetMode(); ok {
		m.Mask |= proto.SetMode
		m.Mode = mode
	}
	if uid, ok := in.GetUID(); ok {
		m.Mask |= proto.SetUid
		m.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		m.Mask |= proto.SetGid
		m.Gid = gid
	}
	if t, ok := in.GetATime(); ok {
		m.Mask |= proto.SetAtime
		m.Atime = t.UnixNano()
	}
	if t, ok := in.GetMTime(); ok {
		m.Mask |= proto.SetMtime
		m.Mtime = t.UnixNano()
	}
	var a proto.Attr
	var err error
	if m.Mask != 0 {
		a, err = n.fsys.c.SetAttr(ctx, m)
	} else {
		a, err = n.fsys.c.GetAttr(ctx, n.ino())
	}
	if err != nil {
		return n.errno("setattr", err)
	}
	n.withOpenSize(&a)
	fillAttr(&a, &out.Attr)
	n.fsys.attrTimeout(epoch, trusted, out)
	return 0
}

func (n *node) truncate(ctx context.Context, size int64) syscall.Errno {
	n.mu.Lock()
	f := n.file
	n.mu.Unlock()
	if f == nil {
		a, err := n.fsys.c.GetAttr(ctx, n.ino())
		if err != nil {
			return n.errno("truncate", err)
		}
		if f, err = n.fsys.c.OpenAttr(ctx, a); err != nil {
			return n.errno("truncate", err)
		}
		defer f.Close() // drops the client's shared state of the inode
	}
	return n.errno("truncate", f.Truncate(ctx, size))
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	ents, err := n.fsys.c.Readdir(ctx, n.ino())
	if err != nil {
		return nil, n.errno("readdir", err)
	}
	out := make([]fuse.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = fuse.DirEntry{Name: e.Name, Ino: e.Attr.Ino, Mode: e.Attr.Mode}
	}
	return fs.NewListDirStream(out), 0
}

func caller(ctx context.Context) (uint32, uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return nil, syscall.EROFS
	}
	if tooLong(name) {
		return nil, syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	epoch, trusted := n.fsys.begin()
	uid, gid := caller(ctx)
	a, err := n.fsys.c.AttrCall(ctx, &proto.Mkdir{Parent: n.ino(), Name: name, Mode: mode, Uid: uid, Gid: gid})
	if err != nil {
		return nil, n.errno("mkdir", err)
	}
	ch := n.child(ctx, &a, out)
	n.fsys.entryTimeouts(epoch, trusted, out)
	return ch, 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	if tooLong(name) {
		return syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	return n.errno("rmdir", n.fsys.c.Rmdir(ctx, n.ino(), name))
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	if tooLong(name) {
		return syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	if cn := childNode(&n.Inode, name); cn != nil {
		// life is held across the call so that an open and a last
		// close cannot slip in between the check and the unlink.
		cn.life.Lock()
		defer cn.life.Unlock()
		if cn.openRefs() > 0 {
			return cn.unlinkOpen(ctx, n.ino(), name)
		}
	}
	return n.errno("unlink", n.fsys.c.Unlink(ctx, n.ino(), name))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	if tooLong(name) || tooLong(newName) {
		return syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	np := newParent.EmbeddedInode().StableAttr().Ino
	src, victim := childNode(&n.Inode, name), childNode(newParent.EmbeddedInode(), newName)
	if flags == 0 && src != nil && victim != nil && src != victim &&
		src.StableAttr().Mode != syscall.S_IFDIR && victim.StableAttr().Mode != syscall.S_IFDIR {
		victim.life.Lock()
		defer victim.life.Unlock()
		if victim.openRefs() > 0 {
			// Replacing a file that is open here: it stays as an orphan
			// for its open descriptors until their last close.
			return victim.renameOver(ctx, n.ino(), name, np, newName)
		}
	}
	return n.errno("rename", n.fsys.c.Rename(ctx, n.ino(), name, np, newName, flags))
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return nil, syscall.EROFS
	}
	if tooLong(name) {
		return nil, syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	epoch, trusted := n.fsys.begin()
	uid, gid := caller(ctx)
	a, err := n.fsys.c.AttrCall(ctx, &proto.Symlink{Parent: n.ino(), Name: name, Target: target, Uid: uid, Gid: gid})
	if err != nil {
		return nil, n.errno("symlink", err)
	}
	ch := n.child(ctx, &a, out)
	n.fsys.entryTimeouts(epoch, trusted, out)
	return ch, 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	t, err := n.fsys.c.Readlink(ctx, n.ino())
	if err != nil {
		return nil, n.errno("readlink", err)
	}
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return nil, syscall.EROFS
	}
	if tooLong(name) {
		return nil, syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	epoch, trusted := n.fsys.begin()
	a, err := n.fsys.c.Link(ctx, target.EmbeddedInode().StableAttr().Ino, n.ino(), name)
	if err != nil {
		return nil, n.errno("link", err)
	}
	ch := n.child(ctx, &a, out)
	n.fsys.entryTimeouts(epoch, trusted, out)
	return ch, 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	s, err := n.fsys.c.Statfs(ctx)
	if err != nil {
		return n.errno("statfs", err)
	}
	const bs = 4096
	out.Bsize, out.Frsize = bs, bs
	out.Blocks, out.Bfree, out.Bavail = s.Capacity/bs, s.Free/bs, s.Free/bs
	out.Files = s.Files
	out.Ffree = 1 << 40
	out.NameLen = 255
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return nil, nil, 0, syscall.EROFS
	}
	if tooLong(name) {
		return nil, nil, 0, syscall.ENAMETOOLONG
	}
	defer n.fsys.changing()()
	epoch, trusted := n.fsys.begin()
	uid, gid := caller(ctx)
	r, err := n.fsys.c.Call(ctx, &proto.Create{Parent: n.ino(), Name: name, Mode: mode, Uid: uid, Gid: gid, Excl: flags&syscall.O_EXCL != 0})
	ar, ok := r.(*proto.AttrReply)
	if err != nil || !ok {
		return nil, nil, 0, n.errno("create", errors.Join(err, errors.New("unexpected reply")))
	}
	ch := n.child(ctx, &ar.Attr, out)
	cn := ch.Operations().(*node)
	h, errno := cn.open(ctx, &ar.Attr)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !ar.Created && flags&syscall.O_TRUNC != 0 && ar.Attr.Size > 0 {
		if errno := cn.truncate(ctx, 0); errno != 0 {
			h.Release(ctx)
			return nil, nil, 0, errno
		}
		out.Attr.Size = 0
	}
	n.fsys.entryTimeouts(epoch, trusted, out)
	return ch, h, 0, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() && flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EROFS
	}
	a, err := n.fsys.c.GetAttr(ctx, n.ino())
	if err != nil {
		return nil, 0, n.errno("open", gone(err, n.fsys.kc != nil))
	}
	h, errno := n.open(ctx, &a)
	if errno != 0 {
		return nil, 0, errno
	}
	fl := n.openFlags(&a)
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Its close has nothing to publish: the kernel need not ask
		// (a writing descriptor's own close publishes its writes).
		fl |= fuse.FOPEN_NOFLUSH
	}
	return h, fl, 0
}

// openRefs is the number of open descriptors.
func (n *node) openRefs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.refs
}

// open takes a reference on the inode's shared client.File.
func (n *node) open(ctx context.Context, a *proto.Attr) (*handle, syscall.Errno) {
	n.life.Lock()
	defer n.life.Unlock()
	n.mu.Lock()
	f := n.file
	n.mu.Unlock()
	if f == nil {
		// The first open; life (not mu) held, as OpenAttr may ask the
		// metadata server for I/O server addresses.
		var err error
		if f, err = n.fsys.c.OpenAttr(ctx, *a); err != nil {
			return nil, n.errno("open", err)
		}
	}
	n.mu.Lock()
	n.file = f
	n.refs++
	n.mu.Unlock()
	return &handle{n: n, f: f}, 0
}

// handle is one open file description.
type handle struct {
	n *node
	f *client.File
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	n, err := h.f.ReadAt(dest, off)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return nil, h.n.errno("read", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if h.n.rofs() {
		return 0, syscall.EROFS
	}
	defer h.n.fsys.changing()()
	n, err := h.f.WriteAt(data, off)
	return uint32(n), h.n.errno("write", err)
}

// Flush runs on every close(2): publish the data (close-to-open).
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	defer h.n.fsys.changing()()
	return h.n.errno("flush", h.f.Sync(ctx))
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	defer h.n.fsys.changing()()
	return h.n.errno("fsync", h.f.Sync(ctx))
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	n := h.n
	defer n.fsys.changing()()
	n.life.Lock()
	defer n.life.Unlock()
	n.mu.Lock()
	n.refs--
	var last *client.File
	orphan := false
	if n.refs == 0 {
		last, n.file = n.file, nil
		n.caps = nil
		orphan, n.orphan = n.orphan, false
	}
	n.mu.Unlock()
	var err error
	if last != nil {
		err = last.Close() // may write back: outside mu
	}
	if orphan {
		n.fsys.releaseOrphan(n.ino())
	}
	return n.errno("release", err)
}
