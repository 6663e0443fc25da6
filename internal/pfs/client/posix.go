package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/extent"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Calls for special files, extended attributes, orphans and fallocate (see
// proto/msgs_posix.go).

// Mknod makes a FIFO, socket or device node in parent.
func (c *Client) Mknod(ctx context.Context, parent uint64, name string, mode, rdev uint32) (proto.Attr, error) {
	return c.attr(ctx, &proto.Mknod{Parent: parent, Name: name, Mode: mode, Rdev: rdev, Uid: c.Uid, Gid: c.Gid})
}

// SetXattr sets an extended attribute; flags are proto.XattrCreate or
// proto.XattrReplace (or 0).
func (c *Client) SetXattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) error {
	_, err := c.mutate(ctx, &proto.SetXattr{Ino: ino, Name: name, Value: value, Flags: flags})
	return err
}

func (c *Client) xattr(ctx context.Context, req proto.Msg) ([]byte, error) {
	r, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	xr, ok := r.(*proto.XattrReply)
	if !ok {
		return nil, unexpected(c.meta, r)
	}
	return xr.Value, nil
}

// GetXattr returns an extended attribute's value (ENODATA if absent).
func (c *Client) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	return c.xattr(ctx, &proto.GetXattr{Ino: ino, Name: name})
}

// ListXattr returns the inode's attribute names, each ended by a NUL, as
// listxattr(2).
func (c *Client) ListXattr(ctx context.Context, ino uint64) ([]byte, error) {
	return c.xattr(ctx, &proto.ListXattr{Ino: ino})
}

func (c *Client) RemoveXattr(ctx context.Context, ino uint64, name string) error {
	_, err := c.mutate(ctx, &proto.RemoveXattr{Ino: ino, Name: name})
	return err
}

// UnlinkOpen removes a name of a file the caller holds open; if it was the
// last, the file lives on as an orphan (nlink 0 in the reply) until
// ReleaseOrphan.
func (c *Client) UnlinkOpen(ctx context.Context, parent uint64, name string) (proto.Attr, error) {
	return c.attr(ctx, &proto.UnlinkOpen{Parent: parent, Name: name})
}

// ReleaseOrphan frees an orphan once its last descriptor closed.
func (c *Client) ReleaseOrphan(ctx context.Context, ino uint64) error {
	_, err := c.mutate(ctx, &proto.ReleaseOrphan{Ino: ino})
	return err
}

// RenewOrphans tells the metadata server these orphans are still open.
func (c *Client) RenewOrphans(ctx context.Context, inos []uint64) error {
	_, err := c.call(ctx, &proto.RenewOrphans{Inos: inos})
	return err
}

// fallocate(2) modes the file system serves.
const (
	FallocKeepSize  = 0x01
	FallocPunchHole = 0x02
	FallocZeroRange = 0x10
)

// Allocate is fallocate(2) on [off, off+n): mode 0 reserves space and
// extends the size, FallocKeepSize reserves without extending,
// FallocPunchHole|FallocKeepSize frees the range (it reads as zeros),
// FallocZeroRange zeros it keeping the space reserved (with FallocKeepSize:
// without extending). Other modes: EOPNOTSUPP.
func (f *File) Allocate(ctx context.Context, off, n int64, mode uint32) error {
	switch mode {
	case 0, FallocKeepSize, FallocPunchHole | FallocKeepSize, FallocZeroRange, FallocZeroRange | FallocKeepSize:
	case FallocPunchHole:
		return syscall.EOPNOTSUPP // as fallocate(2): punching needs KEEP_SIZE
	default:
		return syscall.EOPNOTSUPP
	}
	if off < 0 || n <= 0 || off > 1<<62-n {
		return syscall.EINVAL
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Earlier writes land first, so a punch or zeroing is never overtaken by
	// data written before it.
	if err := f.drain(); err != nil {
		return err
	}
	f.gen++ // read-ahead of every handle is stale now
	if mode&(FallocPunchHole|FallocZeroRange) != 0 {
		if err := f.objects(ctx, off, n, func(h uint64, k uint32, o, l uint64) proto.Msg {
			return &proto.Punch{Handle: h, Index: k, Off: o, Len: l}
		}); err != nil {
			return err
		}
	}
	if mode&FallocPunchHole == 0 {
		if err := f.objects(ctx, off, n, func(h uint64, k uint32, o, l uint64) proto.Msg {
			return &proto.Alloc{Handle: h, Index: k, Off: o, Len: l}
		}); err != nil {
			return err
		}
	}
	f.dirty = true
	f.wtime = now().UnixNano() // it changed the data or the space, as a write
	if mode&FallocKeepSize == 0 && off+n > f.size {
		if err := f.ensureObjects(ctx, f.metaSize, off+n); err != nil {
			return err
		}
		a, err := f.c.attr(ctx, &proto.SetAttr{Ino: f.ino, Mask: proto.SetSizeExtend, Size: uint64(off + n)})
		if err != nil {
			return err
		}
		f.metaSize, f.ctime = int64(a.Size), a.Ctime
		f.pub.Store(f.metaSize)
		f.size = max(f.size, f.metaSize)
	}
	return nil
}

// objects sends one request per server for the object bytes holding the
// file range [off, off+n). Objects are dense, so that is one contiguous
// range per object: from its size for a file of size off to its size for a
// file of size off+n. Called with f.mu held.
func (f *File) objects(ctx context.Context, off, n int64, mk func(handle uint64, index uint32, off, n uint64) proto.Msg) error {
	var cols []int
	for k := range f.addrs {
		lo, hi := f.lay.ObjectSize(k, off), f.lay.ObjectSize(k, off+n)
		if hi <= lo {
			continue
		}
		f.touched[k] = true
		if f.dirt != nil {
			f.dirt[k] = f.dirt[k].Hull(objRange(lo, hi))
		}
		cols = append(cols, k)
	}
	msg := func(k int) proto.Msg {
		lo, hi := f.lay.ObjectSize(k, off), f.lay.ObjectSize(k, off+n)
		return mk(f.ino, uint32(k), uint64(lo), uint64(hi-lo))
	}
	if f.replicated() {
		// Every copy; one that fails is stale over the range.
		return f.toCopies(ctx, "allocate", cols, msg,
			func(k int) extent.Range { return objRange(f.lay.ObjectSize(k, off), f.lay.ObjectSize(k, off+n)) })
	}
	errs := make([]error, len(f.addrs))
	var wg sync.WaitGroup
	for _, k := range cols {
		a := f.addrs[k]
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := msg(k)
			if _, err := f.c.pool.Call(ctx, a, req); err != nil {
				errs[k] = fmt.Errorf("%T on %s: %w", req, a, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
