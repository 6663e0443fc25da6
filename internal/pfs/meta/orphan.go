package meta

import (
	"context"
	"encoding/binary"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Orphans: a file unlinked while a mount holds it open keeps its inode
// (nlink 0, in no directory) and its objects, so the open descriptors keep
// reading and writing it, as on a local disk. Bucket orphan maps its inode
// number to when its mount last said it still holds it open (i64 ns). The
// mount frees it with ReleaseOrphan at the last close and renews it every
// OrphanRenew while open; one not renewed for OrphanLease (its mount
// crashed or was killed) is freed by the reaper. A restarted metadata server
// waits one OrphanLease before reaping, so mounts can renew first.
var (
	OrphanLease = time.Hour
	OrphanRenew = 10 * time.Minute
	// reapEvery is how often the reaper looks for expired orphans and for
	// extended attributes of removed inodes.
	reapEvery = time.Minute
)

func (s *Service) unlinkOpen(ctx context.Context, m *proto.UnlinkOpen) (proto.Msg, error) {
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		if err := checkName(m.Name); err != nil {
			return err
		}
		p, err := t.dir(m.Parent)
		if err != nil {
			return err
		}
		n, err := t.lookup(m.Parent, m.Name)
		if err != nil {
			return err
		}
		if n.isDir() {
			return proto.Errorf(syscall.EISDIR, m.Name+": is a directory")
		}
		if err := t.delChild(m.Parent, m.Name); err != nil {
			return err
		}
		p.Mtime, p.Ctime = t.now, t.now
		if err := t.put(p); err != nil {
			return err
		}
		if n.Nlink > 0 {
			n.Nlink--
		}
		n.Ctime = t.now
		if n.Nlink == 0 {
			if err := t.Bucket(bOrphan).Put(u64key(n.Ino), u64key(uint64(t.now))); err != nil {
				return err
			}
		}
		r = attrReply(n)
		return t.put(n)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// renameOrphan is rename(2) of a non-directory over another that the
// sender holds open: one transaction, so both names always resolve, and the
// replaced file becomes an orphan if this was its last link.
// It replies with the replaced file's attributes.
func (s *Service) renameOrphan(ctx context.Context, m *proto.Rename) (proto.Msg, error) {
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		op, np, src, err := t.renameEnds(m)
		if err != nil {
			return err
		}
		dst, err := t.lookup(m.NewParent, m.NewName)
		if err != nil {
			return err
		}
		if src.isDir() || dst.isDir() {
			return proto.Errorf(syscall.EINVAL, "rename: the orphan flag is for files only")
		}
		r = attrReply(dst)
		if src.Ino == dst.Ino {
			return nil // same file: rename(2) does nothing
		}
		if err := t.delChild(op.Ino, m.OldName); err != nil {
			return err
		}
		if err := t.setChild(np.Ino, m.NewName, src.Ino); err != nil {
			return err
		}
		if dst.Nlink > 0 {
			dst.Nlink--
		}
		if dst.Nlink == 0 {
			if err := t.Bucket(bOrphan).Put(u64key(dst.Ino), u64key(uint64(t.now))); err != nil {
				return err
			}
		}
		src.Ctime, dst.Ctime = t.now, t.now
		op.Mtime, op.Ctime, np.Mtime, np.Ctime = t.now, t.now, t.now, t.now
		for _, n := range []*inode{src, dst, op, np} {
			if err := t.put(n); err != nil {
				return err
			}
		}
		r = attrReply(dst)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// freeOrphan deletes orphan ino and queues its objects for reclaim; false if
// it is no orphan.
func (t tx) freeOrphan(ino uint64) (bool, error) {
	b := t.Bucket(bOrphan)
	if b.Get(u64key(ino)) == nil {
		return false, nil
	}
	if err := b.Delete(u64key(ino)); err != nil {
		return false, err
	}
	n, err := t.inode(ino)
	if err != nil || n.Nlink > 0 {
		return false, nil // gone, or linked again: nothing to free
	}
	n.Nlink = 1 // drop removes the last link
	if err := t.drop(n); err != nil {
		return false, err
	}
	return true, t.dropXattrs(ino)
}

func (s *Service) releaseOrphan(ctx context.Context, m *proto.ReleaseOrphan) (proto.Msg, error) {
	freed := false
	err := s.update(ctx, func(t tx) (err error) {
		freed, err = t.freeOrphan(m.Ino)
		return err
	})
	if freed {
		s.wake()
	}
	return nil, err
}

func (s *Service) renewOrphans(ctx context.Context, m *proto.RenewOrphans) (proto.Msg, error) {
	return nil, s.update(ctx, func(t tx) error {
		b := t.Bucket(bOrphan)
		for _, ino := range m.Inos {
			if b.Get(u64key(ino)) != nil {
				if err := b.Put(u64key(ino), u64key(uint64(t.now))); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// reapOrphans frees orphans not renewed since before cut.
func (s *Service) reapOrphans(ctx context.Context, cut int64) (int, error) {
	var old []uint64
	s.view(func(t tx) error {
		return t.Bucket(bOrphan).ForEach(func(k, v []byte) error {
			if len(k) == 8 && len(v) == 8 && int64(binary.BigEndian.Uint64(v)) < cut {
				old = append(old, binary.BigEndian.Uint64(k))
			}
			return nil
		})
	})
	if len(old) == 0 {
		return 0, nil
	}
	freed := 0
	err := s.update(ctx, func(t tx) error {
		for _, ino := range old {
			// Renewed meanwhile? Then keep it.
			if v := t.Bucket(bOrphan).Get(u64key(ino)); v == nil || int64(binary.BigEndian.Uint64(v)) >= cut {
				continue
			}
			ok, err := t.freeOrphan(ino)
			if err != nil {
				return err
			}
			if ok {
				freed++
			}
		}
		return nil
	})
	if freed > 0 {
		s.log.Info("freed files left open by mounts that stopped renewing them", "count", freed)
		s.wake()
	}
	return freed, err
}

// startPosix starts the reaper of expired orphans and stale extended
// attributes. Called by Open.
func (s *Service) startPosix() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		started := time.Now()
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if time.Since(started) > OrphanLease {
				s.reapOrphans(ctx, time.Now().Add(-OrphanLease).UnixNano())
			}
			s.sweepXattrs(ctx)
			cancel()
		}
	}()
}
