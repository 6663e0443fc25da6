package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Extended attributes live in bucket xattr under ino (8 bytes, big-endian)
// + name, so one inode's attributes are adjacent and listed in name order.
// Inode numbers are never reused, so attributes of a removed inode are
// never seen again; sweepXattrs deletes them.

func xattrKey(ino uint64, name string) []byte { return append(u64key(ino), name...) }

// checkXattrName accepts the namespaces Linux file systems store: user.,
// trusted. and security. (system.* is ACLs and the like: not supported).
func checkXattrName(name string) error {
	if name == "" || len(name) > proto.XattrNameMax {
		return proto.Errorf(syscall.ERANGE, fmt.Sprintf("extended attribute name of %d bytes: must be 1 to %d", len(name), proto.XattrNameMax))
	}
	for _, ns := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return proto.Errorf(syscall.EINVAL, fmt.Sprintf("extended attribute %q: empty name after the namespace", name))
			}
			return nil
		}
	}
	return proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("extended attribute %q: only the user., trusted. and security. namespaces are supported", name))
}

// userXattrOK: as Linux, user.* attributes exist only on regular files and
// directories (on other types reads find nothing and writes are refused).
func userXattrOK(n *inode, name string, write bool) error {
	if !strings.HasPrefix(name, "user.") || n.isReg() || n.isDir() {
		return nil
	}
	if write {
		return proto.Errorf(syscall.EPERM, fmt.Sprintf("inode %d: user.* attributes only on regular files and directories", n.Ino))
	}
	return noData(name)
}

func noData(name string) error {
	return proto.Errorf(syscall.ENODATA, name+": no such extended attribute")
}

// xattrNamesLen is the size of the inode's listxattr(2) answer.
func (t tx) xattrNamesLen(ino uint64) int {
	n := 0
	prefix := u64key(ino)
	c := t.Bucket(bXattr).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		n += len(k) - 8 + 1
	}
	return n
}

func (s *Service) setXattr(ctx context.Context, m *proto.SetXattr) (proto.Msg, error) {
	if err := checkXattrName(m.Name); err != nil {
		return nil, err
	}
	if len(m.Value) > proto.XattrSizeMax {
		return nil, proto.Errorf(syscall.E2BIG, fmt.Sprintf("%s: value of %d bytes over the limit of %d", m.Name, len(m.Value), proto.XattrSizeMax))
	}
	if m.Flags&^(proto.XattrCreate|proto.XattrReplace) != 0 {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("setxattr: invalid flags %#x", m.Flags))
	}
	return s.proposeReq(ctx, m, nil)
}

func (t tx) setXattr(m *proto.SetXattr) error {
	{
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if err := userXattrOK(n, m.Name, true); err != nil {
			return err
		}
		b := t.Bucket(bXattr)
		k := xattrKey(m.Ino, m.Name)
		old := b.Get(k)
		switch {
		case old != nil && m.Flags&proto.XattrCreate != 0:
			return proto.Errorf(syscall.EEXIST, m.Name+": extended attribute exists")
		case old == nil && m.Flags&proto.XattrReplace != 0:
			return noData(m.Name)
		case old == nil && t.xattrNamesLen(m.Ino)+len(m.Name)+1 > proto.XattrListMax:
			// Keep every inode's list within what listxattr(2) can return.
			return proto.Errorf(syscall.ENOSPC, fmt.Sprintf("inode %d: no room for another extended attribute name", m.Ino))
		}
		if err := b.Put(k, bytes.Clone(m.Value)); err != nil {
			return err
		}
		n.Ctime = t.now
		return t.put(n)
	}
}

func (s *Service) getXattr(m *proto.GetXattr) (proto.Msg, error) {
	if err := checkXattrName(m.Name); err != nil {
		return nil, err
	}
	var r *proto.XattrReply
	err := s.view(func(t tx) error {
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if err := userXattrOK(n, m.Name, false); err != nil {
			return err
		}
		v := t.Bucket(bXattr).Get(xattrKey(m.Ino, m.Name))
		if v == nil {
			return noData(m.Name)
		}
		r = &proto.XattrReply{Value: bytes.Clone(v)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Service) listXattr(m *proto.ListXattr) (proto.Msg, error) {
	r := &proto.XattrReply{Value: []byte{}}
	err := s.view(func(t tx) error {
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		prefix := u64key(m.Ino)
		c := t.Bucket(bXattr).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			name := string(k[8:])
			if userXattrOK(n, name, false) != nil {
				continue
			}
			r.Value = append(append(r.Value, name...), 0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Service) removeXattr(ctx context.Context, m *proto.RemoveXattr) (proto.Msg, error) {
	if err := checkXattrName(m.Name); err != nil {
		return nil, err
	}
	return s.proposeReq(ctx, m, nil)
}

func (t tx) removeXattr(m *proto.RemoveXattr) error {
	{
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if err := userXattrOK(n, m.Name, true); err != nil {
			return err
		}
		b := t.Bucket(bXattr)
		k := xattrKey(m.Ino, m.Name)
		if b.Get(k) == nil {
			return noData(m.Name)
		}
		if err := b.Delete(k); err != nil {
			return err
		}
		n.Ctime = t.now
		return t.put(n)
	}
}

// dropXattrs deletes every extended attribute of ino.
func (t tx) dropXattrs(ino uint64) error {
	prefix := u64key(ino)
	c := t.Bucket(bXattr).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// sweepXattrs deletes the attributes of inodes that no longer exist (removed
// by unlink, rmdir or rename since the last sweep) and returns how many
// inodes it cleaned.
func (s *Service) sweepXattrs(ctx context.Context) (int, error) {
	var gone []uint64
	s.view(func(t tx) error {
		c := t.Bucket(bXattr).Cursor()
		for k, _ := c.First(); k != nil; {
			ino := binary.BigEndian.Uint64(k[:8])
			if t.Bucket(bInode).Get(u64key(ino)) == nil {
				gone = append(gone, ino)
			}
			k, _ = c.Seek(u64key(ino + 1))
		}
		return nil
	})
	if len(gone) == 0 {
		return 0, nil
	}
	if _, err := s.propose(ctx, &command{Kind: cmdSweep, Inos: gone}); err != nil {
		return 0, err
	}
	return len(gone), nil
}
