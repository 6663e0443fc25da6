package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t *testing.T, o opener) *Service {
	t.Helper()
	s, err := o(Config{Data: t.TempDir(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
		if _, err := s.Handle(ctx, &proto.Register{Addr: addr}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func call[T proto.Msg](t *testing.T, s *Service, req proto.Msg) T {
	t.Helper()
	r, err := s.Handle(context.Background(), req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	if r == nil {
		r = &proto.OK{} // what the server sends for a nil reply
	}
	return r.(T)
}

func errno(t *testing.T, s *Service, req proto.Msg, want syscall.Errno) {
	t.Helper()
	_, err := s.Handle(context.Background(), req)
	if !errors.Is(err, want) {
		t.Fatalf("%T %+v: got %v, want %v", req, req, err, want)
	}
}

func TestRenameRules(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		d1 := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d1", Mode: 0o755}).Attr
		d2 := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d2", Mode: 0o755}).Attr
		sub := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: d1.Ino, Name: "sub", Mode: 0o755}).Attr
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: d1.Ino, Name: "a", Mode: 0o644}).Attr
		call[*proto.AttrReply](t, s, &proto.Create{Parent: d2.Ino, Name: "b", Mode: 0o644})

		errno(t, s, &proto.Rename{OldParent: RootIno, OldName: "d1", NewParent: sub.Ino, NewName: "x"}, syscall.EINVAL)
		errno(t, s, &proto.Rename{OldParent: d1.Ino, OldName: "a", NewParent: d2.Ino, NewName: "b", Flags: proto.RenameNoReplace}, syscall.EEXIST)
		errno(t, s, &proto.Rename{OldParent: d1.Ino, OldName: "a", NewParent: d2.Ino, NewName: "zz", Flags: proto.RenameExchange}, syscall.ENOENT)
		errno(t, s, &proto.Rename{OldParent: RootIno, OldName: "d2", NewParent: RootIno, NewName: "d1"}, syscall.ENOTEMPTY)
		errno(t, s, &proto.Rename{OldParent: d1.Ino, OldName: "a", NewParent: d1.Ino, NewName: "b", Flags: 3}, syscall.EINVAL)

		// Renaming a file onto itself (or a hard link of itself) does nothing.
		call[*proto.AttrReply](t, s, &proto.Link{Ino: a.Ino, Parent: d1.Ino, Name: "a2"})
		call[*proto.OK](t, s, &proto.Rename{OldParent: d1.Ino, OldName: "a", NewParent: d1.Ino, NewName: "a2"})
		if n := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr.Nlink; n != 2 {
			t.Fatalf("nlink %d after rename onto own hard link, want 2", n)
		}
	})
}

func TestExchangeMovesDirectories(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		d1 := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d1", Mode: 0o755}).Attr
		d2 := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d2", Mode: 0o755}).Attr
		x := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: d1.Ino, Name: "x", Mode: 0o755}).Attr
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: d2.Ino, Name: "f", Mode: 0o644}).Attr
		if _, err := s.Handle(context.Background(), &proto.Rename{OldParent: d1.Ino, OldName: "x", NewParent: d2.Ino, NewName: "f", Flags: proto.RenameExchange}); err != nil {
			t.Fatal(err)
		}
		got := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: d2.Ino, Name: "f"}).Attr
		if got.Ino != x.Ino {
			t.Fatalf("d2/f is inode %d, want the directory %d", got.Ino, x.Ino)
		}
		if got := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: d1.Ino, Name: "x"}).Attr; got.Ino != f.Ino {
			t.Fatalf("d1/x is inode %d, want the file %d", got.Ino, f.Ino)
		}
		n1 := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: d1.Ino}).Attr.Nlink
		n2 := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: d2.Ino}).Attr.Nlink
		if n1 != 2 || n2 != 3 {
			t.Fatalf("link counts d1 %d d2 %d, want 2 and 3", n1, n2)
		}
		// The moved directory's .. now leads to d2.
		if w := call[*proto.AttrReply](t, s, &proto.Walk{Path: "/d2/f/.."}).Attr; w.Ino != d2.Ino {
			t.Fatalf("/d2/f/.. is %d, want %d", w.Ino, d2.Ino)
		}
	})
}

func TestHardLinksAndReclaimQueue(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		call[*proto.AttrReply](t, s, &proto.Link{Ino: f.Ino, Parent: RootIno, Name: "g"})
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "f"})
		if n := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: RootIno, Name: "g"}).Attr.Nlink; n != 1 {
			t.Fatalf("nlink after unlinking one of two names: %d", n)
		}
		queued := func() (n int) {
			s.view(func(t tx) error { n = t.Bucket(bReclaim).Stats().KeyN; return nil })
			return n
		}
		if queued() != 0 {
			t.Fatal("objects queued for reclaim while a link remains")
		}
		// Stop the reclaimer from draining the queue before we look: its
		// servers are not real, so entries stay.
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "g"})
		if queued() != 1 {
			t.Fatal("last unlink did not queue the objects for reclaim")
		}
		errno(t, s, &proto.GetAttr{Ino: f.Ino}, syscall.ENOENT)
	})
}

func TestLayoutInheritance(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, StripeSize: 1 << 20, StripeCount: 2})
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: d.Ino, Name: "f", Mode: 0o644}).Attr
		if f.StripeSize != 1<<20 || len(f.Servers) != 2 {
			t.Fatalf("inherited layout %d x %v", f.StripeSize, f.Servers)
		}
		g := call[*proto.AttrReply](t, s, &proto.Create{Parent: d.Ino, Name: "g", Mode: 0o644, StripeSize: 8192, StripeCount: 3}).Attr
		if g.StripeSize != 8192 || len(g.Servers) != 3 {
			t.Fatalf("explicit layout %d x %v", g.StripeSize, g.Servers)
		}
		errno(t, s, &proto.SetLayout{Ino: f.Ino, StripeSize: 8192}, syscall.EINVAL)
		errno(t, s, &proto.SetLayout{Ino: d.Ino, StripeSize: 1000}, syscall.EINVAL)
		errno(t, s, &proto.Create{Parent: d.Ino, Name: "h", StripeSize: 100}, syscall.EINVAL)
		// New files start on different servers, so load spreads.
		firsts := map[uint32]bool{}
		for i := 0; i < 6; i++ {
			a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: fmt.Sprintf("single%d", i), StripeCount: 1}).Attr
			firsts[a.Servers[0]] = true
		}
		if len(firsts) != 3 {
			t.Fatalf("single-stripe files used servers %v, want all 3", firsts)
		}
	})
}

func TestReaddirPaging(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		for i := 0; i < 25; i++ {
			call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: string(rune('A' + i)), Mode: 0o755})
		}
		var names []string
		after := ""
		for {
			r := call[*proto.EntriesReply](t, s, &proto.Readdir{Ino: RootIno, After: after, Limit: 7})
			for _, e := range r.Entries {
				names = append(names, e.Name)
			}
			if !r.More {
				break
			}
			after = r.Entries[len(r.Entries)-1].Name
		}
		if len(names) != 25 || names[0] != "A" || names[24] != "Y" {
			t.Fatalf("paged readdir: %v", names)
		}
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		dir := t.TempDir()
		s, err := o(Config{Data: dir, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		s.Handle(ctx, &proto.Register{Addr: "127.0.0.1:9"})
		s.Handle(ctx, &proto.Mkdir{Parent: RootIno, Name: "kept", Mode: 0o700})
		s.Close()
		s, err = o(Config{Data: dir, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if a := call[*proto.AttrReply](t, s, &proto.Walk{Path: "/kept"}).Attr; a.Mode&0o777 != 0o700 {
			t.Fatalf("mode after reopen %o", a.Mode)
		}
		if ss := s.servers(); len(ss) != 1 || ss[0].Addr != "127.0.0.1:9" {
			t.Fatalf("servers after reopen: %+v", ss)
		}
		// A second server on the same store is refused.
		if _, err := o(Config{Data: dir, Log: quiet}); err == nil {
			t.Fatal("second open of a locked store succeeded")
		}
	})
}

// FuzzInodeRecord: a corrupt store record is an error, never a crash.
func FuzzInodeRecord(f *testing.F) {
	n := &inode{Attr: proto.Attr{Ino: 5, Mode: sIFREG | 0o644, Servers: []uint32{1, 2}}, Target: "x"}
	f.Add(n.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := decodeInode(b); err == nil {
			if m, err := decodeInode(n.encode()); err != nil || m.Ino != n.Ino {
				t.Fatalf("re-decode: %v", err)
			}
		}
	})
}

// TestLayoutInheritedBySubdirectories: a directory's policy reaches files in
// every directory below it that sets none of its own, field by field, also
// for directories made before the policy was set; a stripe count over the
// file system's servers is refused when set.
func TestLayoutInheritedBySubdirectories(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		mkdir := func(parent uint64, name string) uint64 {
			return call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: parent, Name: name, Mode: 0o755}).Attr.Ino
		}
		create := func(parent uint64, name string) proto.Attr {
			return call[*proto.AttrReply](t, s, &proto.Create{Parent: parent, Name: name, Mode: 0o644}).Attr
		}
		www := mkdir(RootIno, "www")
		before := mkdir(www, "before")
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: www, StripeSize: 1 << 20, StripeCount: 2})
		sub := mkdir(www, "sub")
		deep := mkdir(sub, "deep")
		for _, d := range []uint64{sub, deep, before} {
			if f := create(d, "f"); f.StripeSize != 1<<20 || len(f.Servers) != 2 {
				t.Fatalf("file under /www: %d x %v, want 1M x 2 from /www", f.StripeSize, f.Servers)
			}
		}
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: sub, StripeCount: 1})
		if f := create(deep, "g"); f.StripeSize != 1<<20 || len(f.Servers) != 1 {
			t.Fatalf("file under /www/sub: %d x %v, want size 1M from /www, count 1 from /www/sub", f.StripeSize, f.Servers)
		}
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: deep, StripeCount: proto.AllServers})
		if f := create(deep, "h"); len(f.Servers) != 3 {
			t.Fatalf("stripe count all under a parent of 1: %v", f.Servers)
		}
		errno(t, s, &proto.SetLayout{Ino: www, StripeCount: 99}, syscall.EINVAL)
		errno(t, s, &proto.SetLayout{Ino: www, StripeCount: 4}, syscall.EINVAL)
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: www, StripeCount: 3})
	})
}

// A reclaim pass records every file it finished in one command: the
// command drops the queue records of Ino and of each of Inos, and leaves
// the others queued.
func TestReclaimBatchCommand(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		var inos []uint64
		for i := range 5 {
			f := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: fmt.Sprint("f", i), Mode: 0o644}).Attr
			inos = append(inos, f.Ino)
			call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: fmt.Sprint("f", i)})
		}
		queued := func() (left []uint64) {
			s.view(func(t tx) error {
				return t.Bucket(bReclaim).ForEach(func(k, _ []byte) error {
					left = append(left, binary.BigEndian.Uint64(k))
					return nil
				})
			})
			return left
		}
		if q := queued(); len(q) != 5 {
			t.Fatalf("queued %v, want the 5 removed files", q)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.propose(ctx, &command{Kind: cmdReclaim, Ino: inos[0], Inos: inos[1:4]}); err != nil {
			t.Fatal(err)
		}
		if q := queued(); len(q) != 1 || q[0] != inos[4] {
			t.Fatalf("queued after the batch: %v, want only %d", q, inos[4])
		}
	})
}
