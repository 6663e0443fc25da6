package meta

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

func TestLookupNameTooLong(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		errno(t, s, &proto.Lookup{Parent: RootIno, Name: strings.Repeat("x", 256)}, syscall.ENAMETOOLONG)
		errno(t, s, &proto.Lookup{Parent: RootIno, Name: strings.Repeat("x", 255)}, syscall.ENOENT)
		errno(t, s, &proto.Walk{Path: "/a/" + strings.Repeat("x", 256) + "/b"}, syscall.ENAMETOOLONG)
		errno(t, s, &proto.Walk{Path: "/" + strings.Repeat("x", 255)}, syscall.ENOENT)
	})
}

func TestMknod(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		fifo := call[*proto.AttrReply](t, s, &proto.Mknod{Parent: RootIno, Name: "p", Mode: sIFIFO | 0o640, Uid: 5}).Attr
		if fifo.Mode != sIFIFO|0o640 || fifo.Uid != 5 || fifo.Nlink != 1 || fifo.Rdev() != 0 {
			t.Fatalf("fifo: %+v", fifo)
		}
		dev := call[*proto.AttrReply](t, s, &proto.Mknod{Parent: RootIno, Name: "c", Mode: sIFCHR | 0o600, Rdev: 0x0103}).Attr
		if got := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: RootIno, Name: "c"}).Attr; got.Rdev() != 0x0103 || got.Ino != dev.Ino {
			t.Fatalf("device after lookup: %+v", got)
		}
		call[*proto.AttrReply](t, s, &proto.Mknod{Parent: RootIno, Name: "s", Mode: sIFSOCK | 0o755})
		errno(t, s, &proto.Mknod{Parent: RootIno, Name: "p", Mode: sIFIFO | 0o640}, syscall.EEXIST)
		errno(t, s, &proto.Mknod{Parent: RootIno, Name: "r", Mode: sIFREG | 0o640}, syscall.EINVAL)
		errno(t, s, &proto.SetAttr{Ino: fifo.Ino, Mask: proto.SetSize}, syscall.EINVAL)
		// Links, renames, chmod and unlink work as for any inode.
		call[*proto.AttrReply](t, s, &proto.Link{Ino: fifo.Ino, Parent: RootIno, Name: "p2"})
		call[*proto.OK](t, s, &proto.Rename{OldParent: RootIno, OldName: "p2", NewParent: RootIno, NewName: "p3"})
		if a := call[*proto.AttrReply](t, s, &proto.SetAttr{Ino: fifo.Ino, Mask: proto.SetMode, Mode: 0o600}).Attr; a.Mode != sIFIFO|0o600 || a.Nlink != 2 {
			t.Fatalf("chmod fifo: %+v", a)
		}
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "p"})
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "p3"})
		errno(t, s, &proto.GetAttr{Ino: fifo.Ino}, syscall.ENOENT)
	})
}

func TestXattr(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.b", Value: []byte("2")})
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.a", Value: []byte("1")})
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "trusted.t", Value: nil})
		if v := call[*proto.XattrReply](t, s, &proto.GetXattr{Ino: f.Ino, Name: "user.a"}).Value; string(v) != "1" {
			t.Fatalf("get: %q", v)
		}
		if v := call[*proto.XattrReply](t, s, &proto.ListXattr{Ino: f.Ino}).Value; string(v) != "trusted.t\x00user.a\x00user.b\x00" {
			t.Fatalf("list: %q", v)
		}
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.a", Value: []byte("x"), Flags: proto.XattrCreate}, syscall.EEXIST)
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.c", Value: []byte("x"), Flags: proto.XattrReplace}, syscall.ENODATA)
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.a", Value: []byte("11"), Flags: proto.XattrReplace})
		errno(t, s, &proto.GetXattr{Ino: f.Ino, Name: "user.zz"}, syscall.ENODATA)
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.big", Value: make([]byte, proto.XattrSizeMax+1)}, syscall.E2BIG)
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.max", Value: make([]byte, proto.XattrSizeMax)})
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "user." + strings.Repeat("n", 251), Value: nil}, syscall.ERANGE)
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "system.posix_acl_access", Value: nil}, syscall.EOPNOTSUPP)
		errno(t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.", Value: nil}, syscall.EINVAL)
		call[*proto.OK](t, s, &proto.RemoveXattr{Ino: f.Ino, Name: "user.a"})
		errno(t, s, &proto.RemoveXattr{Ino: f.Ino, Name: "user.a"}, syscall.ENODATA)
		errno(t, s, &proto.GetXattr{Ino: 999, Name: "user.a"}, syscall.ENOENT)
		// user.* only on files and directories, as Linux.
		l := call[*proto.AttrReply](t, s, &proto.Symlink{Parent: RootIno, Name: "l", Target: "f"}).Attr
		errno(t, s, &proto.SetXattr{Ino: l.Ino, Name: "user.a", Value: nil}, syscall.EPERM)
		call[*proto.OK](t, s, &proto.SetXattr{Ino: l.Ino, Name: "trusted.a", Value: nil})
		// The names list stays within listxattr's limit.
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		var err error
		for i := 0; err == nil && i < 1000; i++ {
			_, err = s.Handle(context.Background(), &proto.SetXattr{Ino: d.Ino, Name: "user." + strings.Repeat("n", 200) + string(rune('a'+i%26)) + strings.Repeat("m", i/26), Value: nil})
		}
		if !errorsIs(err, syscall.ENOSPC) {
			t.Fatalf("many names: %v, want ENOSPC", err)
		}
		if v := call[*proto.XattrReply](t, s, &proto.ListXattr{Ino: d.Ino}).Value; len(v) > proto.XattrListMax {
			t.Fatalf("list of %d bytes", len(v))
		}
		// Removed with the inode (by the sweep).
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "f"})
		if n, err := s.sweepXattrs(context.Background()); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		s.view(func(t2 tx) error {
			if t2.xattrNamesLen(f.Ino) != 0 {
				t.Error("attributes of a removed file left behind")
			}
			return nil
		})
	})
}

func errorsIs(err error, errno syscall.Errno) bool {
	re, ok := err.(*proto.RemoteError)
	return ok && re.Errno == errno
}

func TestOrphan(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: d.Ino, Name: "f", Mode: 0o644}).Attr
		call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.a", Value: []byte("1")})
		a := call[*proto.AttrReply](t, s, &proto.UnlinkOpen{Parent: d.Ino, Name: "f"}).Attr
		if a.Nlink != 0 {
			t.Fatalf("nlink after unlink: %d", a.Nlink)
		}
		// Still there for its open descriptors, in no directory.
		if a := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: f.Ino}).Attr; a.Nlink != 0 {
			t.Fatalf("orphan: %+v", a)
		}
		call[*proto.OK](t, s, &proto.Rmdir{Parent: RootIno, Name: "d"})
		call[*proto.OK](t, s, &proto.ReleaseOrphan{Ino: f.Ino})
		errno(t, s, &proto.GetAttr{Ino: f.Ino}, syscall.ENOENT)
		s.view(func(t2 tx) error {
			if t2.Bucket(bReclaim).Get(u64key(f.Ino)) == nil {
				t.Error("objects of a released orphan not queued for reclaim")
			}
			if t2.xattrNamesLen(f.Ino) != 0 {
				t.Error("attributes of a released orphan left behind")
			}
			return nil
		})
		call[*proto.OK](t, s, &proto.ReleaseOrphan{Ino: f.Ino}) // twice: harmless

		// A file with another link is no orphan.
		g := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "g", Mode: 0o644}).Attr
		call[*proto.AttrReply](t, s, &proto.Link{Ino: g.Ino, Parent: RootIno, Name: "g2"})
		if a := call[*proto.AttrReply](t, s, &proto.UnlinkOpen{Parent: RootIno, Name: "g"}).Attr; a.Nlink != 1 {
			t.Fatalf("nlink: %d", a.Nlink)
		}
		call[*proto.OK](t, s, &proto.ReleaseOrphan{Ino: g.Ino})
		call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: g.Ino})

		// Rename over an open file: one transaction, the replaced file an orphan.
		a1 := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "a1", Mode: 0o644}).Attr
		b1 := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "b1", Mode: 0o644}).Attr
		if a := call[*proto.AttrReply](t, s, &proto.Rename{OldParent: RootIno, OldName: "a1", NewParent: RootIno, NewName: "b1", Flags: proto.RenameOrphan}).Attr; a.Ino != b1.Ino || a.Nlink != 0 {
			t.Fatalf("replaced file: %+v", a)
		}
		if a := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: RootIno, Name: "b1"}).Attr; a.Ino != a1.Ino {
			t.Fatalf("b1 is inode %d, want %d", a.Ino, a1.Ino)
		}
		errno(t, s, &proto.Lookup{Parent: RootIno, Name: "a1"}, syscall.ENOENT)
		call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: b1.Ino})
		call[*proto.OK](t, s, &proto.ReleaseOrphan{Ino: b1.Ino})
		errno(t, s, &proto.GetAttr{Ino: b1.Ino}, syscall.ENOENT)
		call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "dd", Mode: 0o755})
		errno(t, s, &proto.Rename{OldParent: RootIno, OldName: "b1", NewParent: RootIno, NewName: "dd", Flags: proto.RenameOrphan}, syscall.EINVAL)
		errno(t, s, &proto.Rename{OldParent: RootIno, OldName: "b1", NewParent: RootIno, NewName: "none", Flags: proto.RenameOrphan}, syscall.ENOENT)

		// Orphans of a crashed mount expire unless renewed.
		h := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "h", Mode: 0o644}).Attr
		k := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "k", Mode: 0o644}).Attr
		call[*proto.AttrReply](t, s, &proto.UnlinkOpen{Parent: RootIno, Name: "h"})
		call[*proto.AttrReply](t, s, &proto.UnlinkOpen{Parent: RootIno, Name: "k"})
		cut := time.Now().UnixNano()
		call[*proto.OK](t, s, &proto.RenewOrphans{Inos: []uint64{k.Ino, 12345}})
		if n, err := s.reapOrphans(context.Background(), cut); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		errno(t, s, &proto.GetAttr{Ino: h.Ino}, syscall.ENOENT)
		call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: k.Ino})
	})
}

// TestOldStoreOpens: a meta.db written before extended attributes and
// orphans existed opens and serves them.
func TestOldStoreOpens(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	call[*proto.ServersReply](t, s, &proto.Register{Addr: "127.0.0.1:1"})
	f := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
	s.Close()
	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(btx *bolt.Tx) error {
		btx.DeleteBucket(bXattr)
		return btx.DeleteBucket(bOrphan)
	})
	db.Close()
	s, err = Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	call[*proto.OK](t, s, &proto.SetXattr{Ino: f.Ino, Name: "user.a", Value: []byte("1")})
	call[*proto.AttrReply](t, s, &proto.UnlinkOpen{Parent: RootIno, Name: "f"})
	call[*proto.OK](t, s, &proto.ReleaseOrphan{Ino: f.Ino})
}
