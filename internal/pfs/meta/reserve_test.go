package meta

import (
	"context"
	"slices"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func idem(client, seq uint64, m proto.Msg) *proto.Idem {
	return &proto.Idem{Client: client, Seq: seq, Done: 1, Req: m}
}

func reclaimQueued(s *Service, ino uint64) bool {
	var ok bool
	s.view(func(t tx) error {
		ok = t.Bucket(bReclaim).Get(u64key(ino)) != nil
		return nil
	})
	return ok
}

// TestReservedCreate: a create of a reserved inode makes the file with the
// reserved layout and the size it carries, in one command; a reserved
// inode's objects are referenced until its create or its lapse; whatever
// uses a reservation up without making the file queues its objects for
// removal (its client may have written them).
func TestReservedCreate(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := openServers(t, o, proto.Register{}, proto.Register{}, proto.Register{})
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		errno(t, s, &proto.Reserve{Parent: d.Ino, Count: 4}, syscall.EINVAL) // no client ID
		errno(t, s, idem(7, 1, &proto.Reserve{Parent: d.Ino, Count: 0}), syscall.EINVAL)
		rr := call[*proto.ReserveReply](t, s, idem(7, 2, &proto.Reserve{Parent: d.Ino, Count: 4}))
		if len(rr.Files) != 4 {
			t.Fatalf("%d reserved, want 4", len(rr.Files))
		}
		var firsts []uint32
		for _, f := range rr.Files {
			if f.Replicas != 2 || len(f.Servers) != 3 || len(f.Extra) != 3 {
				t.Fatalf("reserved layout %+v: want the default (3 columns, 2 copies)", f)
			}
			firsts = append(firsts, f.Servers[0])
		}
		if slices.Sort(firsts); len(slices.Compact(firsts)) < 2 {
			t.Fatalf("every reserved file starts on server %d: placement does not rotate", firsts[0])
		}
		f0, f1, f2, f3 := rr.Files[0], rr.Files[1], rr.Files[2], rr.Files[3]
		col0 := append([]uint32{f0.Servers[0]}, f0.Extra[:1]...)
		refs := call[*proto.RefsReply](t, s, &proto.RefCheck{Server: col0[1], Objs: []proto.ObjRef{{Ino: f0.Ino, Index: 0}}})
		if !refs.Used[0] {
			t.Fatal("the object of a reserved inode is unreferenced before its create: a sweep would delete bytes written ahead of it")
		}

		// The create: reserved inode, layout and size in one command.
		a := call[*proto.AttrReply](t, s, idem(7, 3, &proto.Create{Parent: d.Ino, Name: "f", Mode: 0o640, Excl: true, Reserved: f0.Ino, Size: 4096}))
		if a.Attr.Ino != f0.Ino || a.Attr.Size != 4096 || !a.Created || a.Attr.Mode != sIFREG|0o640 || !slices.Equal(a.Attr.Servers, f0.Servers) || !slices.Equal(a.Attr.Extra, f0.Extra) {
			t.Fatalf("created %+v, want inode %d with size 4096 and the reserved layout %+v", a.Attr, f0.Ino, f0)
		}
		if got := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: d.Ino, Name: "f"}).Attr; got.Size != 4096 || got.Ino != f0.Ino {
			t.Fatalf("lookup %+v", got)
		}
		// A reservation is used once, by its client only, in its directory.
		errno(t, s, idem(7, 4, &proto.Create{Parent: d.Ino, Name: "g", Excl: true, Reserved: f0.Ino, Size: 1}), syscall.ESTALE)
		errno(t, s, idem(8, 1, &proto.Create{Parent: d.Ino, Name: "g", Excl: true, Reserved: f1.Ino, Size: 1}), syscall.ESTALE)
		errno(t, s, &proto.Create{Parent: d.Ino, Name: "g", Excl: true, Reserved: f1.Ino}, syscall.ESTALE)
		errno(t, s, &proto.Create{Parent: d.Ino, Name: "g", Excl: true, Size: 5}, syscall.EINVAL)
		if reclaimQueued(s, f1.Ino) {
			t.Fatal("another client's create used up a reservation")
		}
		errno(t, s, idem(7, 5, &proto.Create{Parent: RootIno, Name: "g", Excl: true, Reserved: f1.Ino, Size: 1}), syscall.EINVAL)
		if !reclaimQueued(s, f1.Ino) {
			t.Fatal("a refused create of a reserved inode left what its client wrote unreclaimed")
		}
		// A name that exists: EEXIST, and the reservation's objects go.
		errno(t, s, idem(7, 6, &proto.Create{Parent: d.Ino, Name: "f", Excl: true, Reserved: f2.Ino, Size: 10}), syscall.EEXIST)
		if !reclaimQueued(s, f2.Ino) {
			t.Fatal("a create of a reserved inode over an existing name left its objects unreclaimed")
		}
		// A retry of the first create (lost reply) gets the same answer.
		if a2 := call[*proto.AttrReply](t, s, idem(7, 3, &proto.Create{Parent: d.Ino, Name: "f", Mode: 0o640, Excl: true, Reserved: f0.Ino, Size: 4096})); a2.Attr.Ino != f0.Ino || !a2.Created {
			t.Fatalf("retried create: %+v", a2.Attr)
		}

		// Lapse: the sweep's command frees what is past its deadline.
		ctx := context.Background()
		if _, err := s.propose(ctx, &command{Kind: cmdUnreserve, Now: rr.Until, Inos: []uint64{f3.Ino}}); err != nil {
			t.Fatal(err)
		}
		if reclaimQueued(s, f3.Ino) {
			t.Fatal("a reservation lapsed at its deadline, not after it")
		}
		if _, err := s.propose(ctx, &command{Kind: cmdUnreserve, Now: rr.Until + 1, Inos: []uint64{f3.Ino}}); err != nil {
			t.Fatal(err)
		}
		if !reclaimQueued(s, f3.Ino) {
			t.Fatal("a lapsed reservation's objects are not queued for removal")
		}
		refs = call[*proto.RefsReply](t, s, &proto.RefCheck{Server: f3.Servers[0], Objs: []proto.ObjRef{{Ino: f3.Ino, Index: 0}}})
		if refs.Used[0] {
			t.Fatal("a lapsed reservation's object is still referenced")
		}
		errno(t, s, idem(7, 7, &proto.Create{Parent: d.Ino, Name: "h", Excl: true, Reserved: f3.Ino, Size: 1}), syscall.ESTALE)
	})
}
