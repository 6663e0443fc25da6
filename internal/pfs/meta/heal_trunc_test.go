package meta

import (
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A stale extent to the end of the object (Len 0) that starts past 0 is
// what a copy that missed a truncate gets: its heal must also set the
// copy's size to the source's (Whole on the extent's last piece), else the
// copy keeps its old tail, which reads again once the file grows. Pieces
// before the last and bounded extents do not carry Whole.
func TestHealToTheEndSetsSize(t *testing.T) {
	copyEngines(t, func(t *testing.T, o opener) {
		s, fakes := openWithIODs(t, o, Config{}, 2)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{2})
		call[*proto.AttrReply](t, s, &proto.SetAttr{Ino: a.Ino, Mask: proto.SetSize, Size: 10 << 20})
		col := []uint32{1, 2}
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{2}, Off: 0, Len: 10})
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{2}, Off: 4096, Len: 0})
		s.kickHealer()
		waitFor(t, s, "the heal", func() bool { return len(staleRecs(t, s, a.Ino)) == 0 })
		hs := fakes[1].got()
		var toEnd, whole int
		for _, h := range hs {
			for _, x := range h.Ranges {
				if x.Len == 0 {
					toEnd++
				}
				if h.Whole && (x.Len != 0 || len(h.Ranges) != 1) {
					t.Fatalf("heal %+v carries Whole on a bounded range", h)
				}
			}
			if h.Whole {
				whole++
			}
		}
		if toEnd != 1 || whole != 1 || len(hs) < 3 || !hs[len(hs)-1].Whole {
			t.Fatalf("heals %+v: want [0,10), [4096, 10 MiB) in pieces, the last to the end with Whole", hs)
		}
	})
}
