package meta

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestIdemRetiredRefused: a late duplicate below the client's Done (its
// reply forgotten), or from a client since expired, is refused ESTALE,
// not applied again.
func TestIdemRetiredRefused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		ctx := context.Background()
		mkdir := func(c, seq, done uint64, name string) *proto.Idem {
			return &proto.Idem{Client: c, Seq: seq, Done: done, Req: &proto.Mkdir{Parent: RootIno, Name: name, Mode: 0o755}}
		}
		call[*proto.AttrReply](t, s, mkdir(42, 1, 0, "d"))
		call[*proto.OK](t, s, &proto.Idem{Client: 42, Seq: 2, Done: 2, Req: &proto.Rmdir{Parent: RootIno, Name: "d"}})
		errno(t, s, mkdir(42, 1, 0, "d"), syscall.ESTALE)
		errno(t, s, &proto.Walk{Path: "/d"}, syscall.ENOENT)
		// Expiry: the client's IDs are retired, its next ones still served.
		call[*proto.AttrReply](t, s, mkdir(43, 1, 0, "e"))
		call[*proto.OK](t, s, &proto.Idem{Client: 43, Seq: 2, Req: &proto.Rmdir{Parent: RootIno, Name: "e"}})
		if err := s.expireClients(ctx, time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
		errno(t, s, mkdir(43, 1, 0, "e"), syscall.ESTALE)
		errno(t, s, &proto.Walk{Path: "/e"}, syscall.ENOENT)
		call[*proto.AttrReply](t, s, mkdir(43, 3, 0, "f"))
	})
}

// TestIdemDoneAboveSeqAndReuse: a Done above the request's own seq does
// not forget that request's reply; the same ID with another request is
// refused EINVAL, not answered with the first one's reply.
func TestIdemDoneAboveSeqAndReuse(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		req := &proto.Idem{Client: 9, Seq: 1, Done: 2, Req: &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}}
		first := call[*proto.AttrReply](t, s, req)
		if again := call[*proto.AttrReply](t, s, req); again.Attr.Ino != first.Attr.Ino {
			t.Fatalf("retry answered %+v, want the first reply %+v", again.Attr, first.Attr)
		}
		call[*proto.AttrReply](t, s, &proto.Idem{Client: 10, Seq: 1, Req: &proto.Mkdir{Parent: RootIno, Name: "e", Mode: 0o755}})
		errno(t, s, &proto.Idem{Client: 10, Seq: 1, Req: &proto.Unlink{Parent: RootIno, Name: "zzz"}}, syscall.EINVAL)
	})
}
