package meta

import (
	"context"
	"encoding/binary"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// Orphans: a file unlinked while a mount holds it open keeps its inode
// (nlink 0, in no directory) and its objects, so the open descriptors keep
// reading and writing it, as on a local disk. Bucket orphan maps its inode
// number to when its mount last said it still holds it open (i64 ns). The
// mount frees it with ReleaseOrphan at the last close and renews it every
// OrphanRenew while open; one not renewed for OrphanLease (its mount
// crashed or was killed) is freed by the reaper. A restarted metadata server
// waits one OrphanLease before reaping (so does a new leader), so mounts can renew first.
var (
	OrphanLease = time.Hour
	OrphanRenew = 10 * time.Minute
	// reapEvery is how often the reaper looks for expired orphans and for
	// extended attributes of removed inodes.
	reapEvery = time.Minute
)

func (t tx) unlinkOpen(m *proto.UnlinkOpen) (proto.Msg, error) {
	if err := checkName(m.Name); err != nil {
		return nil, err
	}
	p, err := t.dir(m.Parent)
	if err != nil {
		return nil, err
	}
	n, err := t.lookup(m.Parent, m.Name)
	if err != nil {
		return nil, err
	}
	if n.isDir() {
		return nil, proto.Errorf(syscall.EISDIR, m.Name+": is a directory")
	}
	if err := t.delChild(m.Parent, m.Name); err != nil {
		return nil, err
	}
	p.Mtime, p.Ctime = t.now, t.now
	if err := t.put(p); err != nil {
		return nil, err
	}
	if n.Nlink > 0 {
		n.Nlink--
	}
	n.Ctime = t.now
	if n.Nlink == 0 {
		if err := t.Bucket(bOrphan).Put(u64key(n.Ino), u64key(uint64(t.now))); err != nil {
			return nil, err
		}
	}
	return attrReply(n), t.put(n)
}

// renameOrphan is rename(2) of a non-directory over another that the
// sender holds open: one transaction, so both names always resolve, and the
// replaced file becomes an orphan if this was its last link.
// It replies with the replaced file's attributes.
func (t tx) renameOrphan(m *proto.Rename) (proto.Msg, error) {
	op, np, src, err := t.renameEnds(m)
	if err != nil {
		return nil, err
	}
	dst, err := t.lookup(m.NewParent, m.NewName)
	if err != nil {
		return nil, err
	}
	if src.isDir() || dst.isDir() {
		return nil, proto.Errorf(syscall.EINVAL, "rename: the orphan flag is for files only")
	}
	if src.Ino == dst.Ino {
		return attrReply(dst), nil // same file: rename(2) does nothing
	}
	if err := t.delChild(op.Ino, m.OldName); err != nil {
		return nil, err
	}
	if err := t.setChild(np.Ino, m.NewName, src.Ino); err != nil {
		return nil, err
	}
	if dst.Nlink > 0 {
		dst.Nlink--
	}
	if dst.Nlink == 0 {
		if err := t.Bucket(bOrphan).Put(u64key(dst.Ino), u64key(uint64(t.now))); err != nil {
			return nil, err
		}
	}
	src.Ctime, dst.Ctime = t.now, t.now
	op.Mtime, op.Ctime, np.Mtime, np.Ctime = t.now, t.now, t.now, t.now
	for _, n := range []*inode{src, dst, op, np} {
		if err := t.put(n); err != nil {
			return nil, err
		}
	}
	return attrReply(dst), nil
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

func (t tx) renewOrphans(m *proto.RenewOrphans) error {
	b := t.Bucket(bOrphan)
	for _, ino := range m.Inos {
		if b.Get(u64key(ino)) != nil {
			if err := b.Put(u64key(ino), u64key(uint64(t.now))); err != nil {
				return err
			}
		}
	}
	return nil
}

// reapOrphans frees orphans not renewed since before cut (leader only).
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
	r, err := s.propose(ctx, &command{Kind: cmdReap, Cut: cut, Inos: old})
	if err != nil {
		return 0, err
	}
	freed := 0
	if sr, ok := r.(*proto.SizeReply); ok {
		freed = int(sr.Size)
	}
	if freed > 0 {
		s.log.Info("freed files left open by mounts that stopped renewing them", "count", freed)
	}
	return freed, nil
}

// reap frees the orphans inos not renewed since cut.
func (t tx) reap(cut int64, inos []uint64) (proto.Msg, error) {
	freed := 0
	for _, ino := range inos {
		// Renewed meanwhile? Then keep it.
		if v := t.Bucket(bOrphan).Get(u64key(ino)); v == nil || int64(binary.BigEndian.Uint64(v)) >= cut {
			continue
		}
		ok, err := t.freeOrphan(ino)
		if err != nil {
			return nil, err
		}
		if ok {
			freed++
		}
	}
	return &proto.SizeReply{Size: uint64(freed)}, nil
}

// startPosix starts the reaper of expired orphans, stale extended
// attributes and idle clients' request IDs (leader only). Called by Open.
func (s *Service) startPosix() {
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			since := s.leaderSince.Load()
			if since == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(s.life, time.Minute)
			// A new leader waits one lease, so mounts can renew first.
			if time.Since(time.Unix(0, since)) > OrphanLease {
				s.reapOrphans(ctx, time.Now().Add(-OrphanLease).UnixNano())
			}
			s.sweepXattrs(ctx)
			s.expireClients(ctx, time.Now().Add(-ClientIdle).UnixNano())
			s.sweepReservations(ctx)
			cancel()
		}
	}()
}

// ClientIdle: the request IDs of a client not heard from for this long are
// forgotten (it cannot still be retrying).
var ClientIdle = time.Hour

// expireClients forgets the request IDs of clients idle since cut.
func (s *Service) expireClients(ctx context.Context, cut int64) error {
	var idle []uint64
	s.m.view(func(btx *bolt.Tx) error {
		idle = idleClients(btx, cut)
		return nil
	})
	if len(idle) == 0 {
		return nil
	}
	_, err := s.propose(ctx, &command{Kind: cmdExpire, Cut: cut, Inos: idle})
	return err
}
