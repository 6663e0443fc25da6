package fusefs

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeFsyncer       = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
	_ fs.FileAllocater     = (*handle)(nil)
)

// maxName is NAME_MAX: a longer name is ENAMETOOLONG on every call, as ext4.
const maxName = 255

func tooLong(name string) bool { return len(name) > maxName }

// childNode returns dir's child name if the kernel knows it.
func childNode(dir *fs.Inode, name string) *node {
	ch := dir.GetChild(name)
	if ch == nil {
		return nil
	}
	cn, _ := ch.Operations().(*node)
	return cn
}

// unlinkOpen removes name (in parent) of n, which this mount holds open:
// if it was the last name, n lives on as an orphan for its descriptors
// (fstat says nlink 0) and is freed at the last close. Called with n.life
// held.
func (n *node) unlinkOpen(ctx context.Context, parent uint64, name string) syscall.Errno {
	a, err := n.fsys.c.UnlinkOpen(ctx, parent, name)
	if err != nil {
		return n.errno("unlink", err)
	}
	n.orphaned(a)
	return 0
}

// renameOver renames (oldParent, oldName) over n, which this mount holds
// open, in one metadata transaction. Called with n.life held.
func (n *node) renameOver(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string) syscall.Errno {
	r, err := n.fsys.c.Call(ctx, &proto.Rename{OldParent: oldParent, OldName: oldName, NewParent: newParent, NewName: newName, Flags: proto.RenameOrphan})
	if err != nil {
		return n.errno("rename", err)
	}
	if ar, ok := r.(*proto.AttrReply); ok {
		n.orphaned(ar.Attr)
	}
	return 0
}

// orphaned records that n lost its last name, given its attributes after
// an unlink or rename. Called with n.life held.
func (n *node) orphaned(a proto.Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.Nlink == 0 && !n.orphan {
		n.orphan = true
		n.fsys.orphansMu.Lock()
		if n.fsys.orphans == nil {
			n.fsys.orphans = map[uint64]bool{}
		}
		n.fsys.orphans[n.ino()] = true
		n.fsys.orphansMu.Unlock()
	}
}

func (fsys *filesystem) releaseOrphan(ino uint64) {
	fsys.orphansMu.Lock()
	delete(fsys.orphans, ino)
	fsys.orphansMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), proto.DefaultTimeout)
	defer cancel()
	if err := fsys.c.ReleaseOrphan(ctx, ino); err != nil {
		// The metadata server frees it when the renewals stop.
		fsys.opts.Log.Warn("freeing a file unlinked while open", "ino", ino, "err", err)
	}
}

// orphanRenew is how often a mount tells the metadata server which orphans
// it still holds; meta frees one not renewed for meta.OrphanLease (1 h).
var orphanRenew = 10 * time.Minute

// renewOrphans runs until the mount ends.
func (fsys *filesystem) renewOrphans(srv *fuse.Server) {
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	t := time.NewTicker(orphanRenew)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		fsys.orphansMu.Lock()
		inos := make([]uint64, 0, len(fsys.orphans))
		for ino := range fsys.orphans {
			inos = append(inos, ino)
		}
		fsys.orphansMu.Unlock()
		if len(inos) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), proto.DefaultTimeout)
		if err := fsys.c.RenewOrphans(ctx, inos); err != nil {
			fsys.opts.Log.Warn("renewing files unlinked while open", "count", len(inos), "err", err)
		}
		cancel()
	}
}

// Mknod makes FIFOs, sockets and device nodes: metadata only, the kernel
// serves their I/O. A regular file (mknod S_IFREG) is an exclusive create.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return nil, syscall.EROFS
	}
	if tooLong(name) {
		return nil, syscall.ENAMETOOLONG
	}
	uid, gid := caller(ctx)
	var req proto.Msg = &proto.Mknod{Parent: n.ino(), Name: name, Mode: mode, Rdev: rdev, Uid: uid, Gid: gid}
	if t := mode & syscall.S_IFMT; t == 0 || t == syscall.S_IFREG {
		req = &proto.Create{Parent: n.ino(), Name: name, Mode: mode, Uid: uid, Gid: gid, Excl: true}
	}
	a, err := n.fsys.c.AttrCall(ctx, req)
	if err != nil {
		return nil, n.errno("mknod", err)
	}
	return n.child(ctx, &a, out), 0
}

// Fsync serves fsync and fdatasync on files and directories. A directory's
// entries are durable already: the metadata server commits every change
// with an fsync before it replies.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if h, ok := f.(*handle); ok {
		return h.n.errno("fsync", h.f.Sync(ctx))
	}
	return 0
}

// The kernel asks for security.capability before every write(2) to a
// file, to drop it; one metadata round trip per write would cost more than
// the write. So while a file is open its answer is kept (close-to-open, as
// the data) and refreshed by this mount's own changes.
const capName = "security.capability"

type caps struct {
	val []byte
	err syscall.Errno
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	var val []byte
	var errno syscall.Errno
	n.mu.Lock()
	cached := n.caps
	n.mu.Unlock()
	if attr == capName && cached != nil {
		val, errno = cached.val, cached.err
	} else {
		v, err := n.fsys.c.GetXattr(ctx, n.ino(), attr)
		val, errno = v, n.errno("getxattr", err)
		if attr == capName && (errno == 0 || errno == syscall.ENODATA) {
			n.mu.Lock()
			if n.refs > 0 {
				n.caps = &caps{val: val, err: errno}
			}
			n.mu.Unlock()
		}
	}
	if errno != 0 {
		return 0, errno
	}
	if len(val) > len(dest) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	if len(attr) > proto.XattrNameMax {
		return syscall.ERANGE
	}
	n.dropCaps(attr)
	return n.errno("setxattr", n.fsys.c.SetXattr(ctx, n.ino(), attr, data, flags))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if n.rofs() {
		return syscall.EROFS
	}
	n.dropCaps(attr)
	return n.errno("removexattr", n.fsys.c.RemoveXattr(ctx, n.ino(), attr))
}

func (n *node) dropCaps(attr string) {
	if attr == capName {
		n.mu.Lock()
		n.caps = nil
		n.mu.Unlock()
	}
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = context.WithoutCancel(ctx) // see detachNote
	list, err := n.fsys.c.ListXattr(ctx, n.ino())
	if err != nil {
		return 0, n.errno("listxattr", err)
	}
	if len(list) > len(dest) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

// Allocate serves fallocate(2): see client.File.Allocate for the modes.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	ctx = context.WithoutCancel(ctx) // see detachNote
	if h.n.rofs() {
		return syscall.EROFS
	}
	if size > 1<<62 || off > 1<<62 {
		return syscall.EFBIG
	}
	err := h.f.Allocate(ctx, int64(off), int64(size), mode)
	var en syscall.Errno
	if errors.As(err, &en) && slices.Contains([]syscall.Errno{syscall.EOPNOTSUPP, syscall.EINVAL}, en) {
		return en
	}
	return h.n.errno("fallocate", err)
}
