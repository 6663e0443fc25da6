package meta

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// handlePosix serves the requests of proto/msgs_posix.go (special files,
// extended attributes, orphans) and the checks every call shares with a
// local file system; ok says whether it handled req.
func (s *Service) handlePosix(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch m := req.(type) {
	case *proto.Lookup:
		// ext4 says a name over 255 bytes is too long, not absent.
		if len(m.Name) > maxName {
			return nil, checkName(m.Name), true
		}
		return nil, nil, false
	case *proto.Walk:
		for _, c := range strings.Split(m.Path, "/") {
			if len(c) > maxName {
				return nil, checkName(c), true
			}
		}
		return nil, nil, false
	case *proto.Rename:
		if m.Flags != proto.RenameOrphan {
			return nil, nil, false
		}
		r, err = s.proposeReq(ctx, m, nil)
	case *proto.WalkBeneath:
		r, err = s.walkBeneath(m)
	case *proto.Mknod:
		r, err = s.mknod(ctx, m)
	case *proto.SetXattr:
		r, err = s.setXattr(ctx, m)
	case *proto.GetXattr:
		r, err = s.getXattr(m)
	case *proto.ListXattr:
		r, err = s.listXattr(m)
	case *proto.RemoveXattr:
		r, err = s.removeXattr(ctx, m)
	case *proto.UnlinkOpen, *proto.ReleaseOrphan, *proto.RenewOrphans:
		r, err = s.proposeReq(ctx, m, nil)
	default:
		return nil, nil, false
	}
	return r, err, true
}

// More file types as in stat(2): special files are metadata only.
const (
	sIFIFO  = 0o010000
	sIFCHR  = 0o020000
	sIFBLK  = 0o060000
	sIFSOCK = 0o140000
)

// mknod makes a FIFO, socket or device node. A device's number rides in
// StripeSize (see proto.Attr.Rdev): such inodes have no layout, so stored
// records and the wire format stay as they were.
func (s *Service) mknod(ctx context.Context, m *proto.Mknod) (proto.Msg, error) {
	switch typ := m.Mode & sIFMT; typ {
	case sIFIFO, sIFSOCK, sIFCHR, sIFBLK:
	default:
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("mknod %s: type %#o is not a FIFO, socket or device (create regular files with Create, directories with Mkdir)", m.Name, typ))
	}
	return s.proposeReq(ctx, m, nil)
}

func (t tx) mknod(m *proto.Mknod) (proto.Msg, error) {
	typ := m.Mode & sIFMT
	rdev := uint32(0)
	if typ == sIFCHR || typ == sIFBLK {
		rdev = m.Rdev
	}
	return t.mknode(m.Parent, m.Name, func(ino uint64) *inode {
		return &inode{Attr: proto.Attr{Ino: ino, Mode: typ | m.Mode&0o7777, Uid: m.Uid, Gid: m.Gid, Nlink: 1,
			Atime: t.now, Mtime: t.now, Ctime: t.now, StripeSize: rdev}}
	})
}
