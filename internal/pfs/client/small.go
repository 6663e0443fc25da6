package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// SmallFileMax: CreateFile writes files up to this size beside their create
// (one replicated commit per file); larger ones are created, written and
// closed in turn.
const SmallFileMax = 64 << 10

// reserveBatch is how many inodes one Reserve takes for a directory: one
// commit buys this many one-commit creates.
const reserveBatch = 64

// reserveUse is how long after asking this client uses a reservation:
// half of meta's ReserveLease (2 min), so a clock running up to twice as
// fast as the leader's does not outlive it.
const reserveUse = time.Minute

// reservations are the inodes meta reserved for this client, per directory.
type reservations struct {
	mu   sync.Mutex
	dirs map[uint64]*dirReserve
	off  bool // meta does not reserve (an older server): the old path only
}

type dirReserve struct {
	mu    sync.Mutex // held while a Reserve is in flight: one per directory
	attrs []proto.Attr
	until time.Time
}

// reserved takes a reserved inode of directory dir, asking meta for more
// when none is left; ok is false when meta reserves none (then the caller
// creates the old way).
func (c *Client) reserved(ctx context.Context, dir uint64) (a proto.Attr, ok bool) {
	c.res.mu.Lock()
	if c.res.off {
		c.res.mu.Unlock()
		return a, false
	}
	if c.res.dirs == nil || len(c.res.dirs) > 1024 {
		c.res.dirs = map[uint64]*dirReserve{} // the unused lapse at meta
	}
	d := c.res.dirs[dir]
	if d == nil {
		d = &dirReserve{}
		c.res.dirs[dir] = d
	}
	c.res.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Now().After(d.until) {
		d.attrs = nil
	}
	if len(d.attrs) == 0 {
		sent := time.Now()
		r, err := c.call(ctx, &proto.Reserve{Parent: dir, Count: reserveBatch})
		if err != nil {
			if isErrno(err, syscall.EOPNOTSUPP) || c.noIdem.Load() {
				c.res.mu.Lock()
				c.res.off = true
				c.res.mu.Unlock()
			}
			return a, false
		}
		rr, isr := r.(*proto.ReserveReply)
		if !isr || len(rr.Files) == 0 {
			return a, false
		}
		d.attrs, d.until = rr.Files, sent.Add(reserveUse)
	}
	a = d.attrs[0]
	d.attrs = d.attrs[1:]
	return a, true
}

// CreateFile creates regular file name in directory parent holding data,
// exclusively (EEXIST if the name exists): when it returns nil, the whole
// file is durable on its I/O servers and in meta; on an error no file was
// made, or (after a failure of every copy of the data, reported as the
// error) the file is removed again when meta can be reached. A small file
// (up to SmallFileMax, no explicit layout in o) costs one replicated
// commit: its bytes go to the servers of an inode reserved ahead of time
// while the create, carrying the size, commits. Others are created,
// written and closed in turn.
func (c *Client) CreateFile(ctx context.Context, parent uint64, name string, mode uint32, data []byte, o CreateOpts) (proto.Attr, error) {
	o.Excl = true
	if len(data) <= SmallFileMax && o.StripeSize == 0 && o.StripeCount == 0 && o.Replicas == 0 {
		if a, ok := c.reserved(ctx, parent); ok {
			attr, lapsed, err := c.createReserved(ctx, parent, name, mode, a, data)
			if !lapsed {
				return attr, err
			}
			// The reservation lapsed (a long pause): nothing was made.
		}
	}
	a, _, err := c.Create(ctx, parent, name, mode, o)
	if err != nil || len(data) == 0 {
		return a, err
	}
	return c.fill(ctx, parent, name, a, data)
}

// createReserved writes data to reserved inode a's servers beside the
// create that names it.
// lapsed says meta refused it as not reserved (ESTALE): nothing was made.
func (c *Client) createReserved(ctx context.Context, parent uint64, name string, mode uint32, a proto.Attr, data []byte) (_ proto.Attr, lapsed bool, _ error) {
	werr := make(chan error, 1)
	if len(data) > 0 {
		go func() { werr <- c.writeAhead(ctx, a, data) }()
	} else {
		werr <- nil
	}
	r, err := c.mutate(ctx, &proto.Create{Parent: parent, Name: name, Mode: mode, Uid: c.Uid, Gid: c.Gid,
		Excl: true, Reserved: a.Ino, Size: uint64(len(data))})
	wr := <-werr
	if err != nil {
		// No file: meta queued the reserved objects for removal (or the
		// reservation lapsed and they are unreferenced: gc's).
		return proto.Attr{}, isErrno(err, syscall.ESTALE), err
	}
	ar, ok := r.(*proto.AttrReply)
	if !ok {
		return proto.Attr{}, false, unexpected(c.meta, r)
	}
	if wr == nil {
		return ar.Attr, false, nil
	}
	// The file exists with its size, but a copy may lack the bytes (a
	// server failed, or a copy's miss could not be recorded before the
	// inode existed): write them again the ordinary way, which marks
	// copies that miss them stale.
	a, err = c.fill(ctx, parent, name, ar.Attr, data)
	return a, false, err
}

// fill writes data into new file a (name in parent) and closes it; if that
// fails the file is removed, so that no file claims bytes it lacks.
func (c *Client) fill(ctx context.Context, parent uint64, name string, a proto.Attr, data []byte) (proto.Attr, error) {
	f, err := c.OpenAttr(ctx, a)
	if err == nil {
		if _, err = f.WriteAt(data, 0); err != nil {
			f.Close()
		} else {
			err = f.Close()
		}
	}
	if err != nil {
		if uerr := c.Unlink(context.WithoutCancel(ctx), parent, name); uerr != nil && !errors.Is(uerr, syscall.ENOENT) {
			err = fmt.Errorf("%w (and removing the incomplete %s failed: %v)", err, name, uerr)
		}
		return proto.Attr{}, err
	}
	a.Size = uint64(max(int64(a.Size), int64(len(data))))
	return a, nil
}

// writeAhead writes data at 0 of reserved inode a's objects, durable on
// every copy when answered (one round per column), without telling meta
// anything (the create does).
func (c *Client) writeAhead(ctx context.Context, a proto.Attr, data []byte) error {
	a.Size = 0
	f, err := c.OpenAttr(ctx, a)
	if err != nil {
		return err
	}
	defer func() {
		f.closed.Store(true)
		c.release(f.wstate)
	}()
	f.mu.Lock()
	f.syncWrites = true // each copy syncs before it answers: no Sync round
	f.mu.Unlock()
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	err = f.drain()
	f.dirty = false // nothing for meta: the create carries the size
	return err
}
