package meta

import (
	"slices"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A heal's sources are the copies current when the healer read the record.
// If one of them is marked stale over the range while the heal runs, the
// target may have copied its older bytes over a write it had taken itself
// (forwarded by another head): the clear must keep the target's record
// there, so that it is healed again from a copy current now.
//
// Copies 1,2,3; server 3 is stale and healed from [1 2]. Meanwhile a client
// that skips server 1 (down in its view) writes [0,100) through head 2,
// forwarded to 3, and marks 1 stale. The heal copies from server 1.
func TestHealKeepsRecordWhenSourceMarkedStaleMeanwhile(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s, fakes := openWithIODs(t, o, Config{}, 3)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, a.Ino, 3, []uint32{1}, []uint32{2, 3})
		col := []uint32{1, 2, 3}
		gate := make(chan struct{})
		fakes[2].mu.Lock()
		fakes[2].gate = gate
		fakes[2].mu.Unlock()
		opened := false
		t.Cleanup(func() {
			if !opened {
				close(gate)
			}
		})
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{3}, Off: 0, Len: 8192})
		s.kickHealer()
		// The pass has read the record (its heal now waits in server 3).
		waitFor(t, s, "the heal pass to read server 3's record", func() bool {
			s.hl.mu.Lock()
			defer s.hl.mu.Unlock()
			return s.hl.pending > 0
		})
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{1}, Off: 0, Len: 100})
		close(gate)
		opened = true
		waitFor(t, s, "server 3's heal", func() bool {
			return !slices.ContainsFunc(staleRecs(t, s, a.Ino), func(r proto.StaleRec) bool { return r.Server == 3 })
		})
		hs := fakes[2].got()
		last := hs[len(hs)-1]
		if slices.ContainsFunc(last.From, func(p proto.Peer) bool { return p.ID == 1 }) {
			t.Fatalf("server 3's record was cleared after a heal from %v, but server 1 was marked stale over [0,100) during it (heals %d, records now %+v)",
				last.From, len(hs), staleRecs(t, s, a.Ino))
		}
		if len(hs) < 2 || last.From[0].ID != 2 {
			t.Fatalf("heals of server 3: %+v, want a second one from server 2", hs)
		}
	})
}
