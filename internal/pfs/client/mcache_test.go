package client

import (
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func trusted(max int) *mcache {
	cc := newMcache(max, time.Hour)
	cc.answered(&proto.ChangesReply{Index: 1, Epoch: 1, Reset: true}, time.Now())
	return cc
}

func TestMcacheInvalidation(t *testing.T) {
	cc := trusted(100)
	tok := cc.begin()
	cc.putAttr(tok, proto.Attr{Ino: 5, Size: 1})
	cc.putEntry(tok, 1, "f", 5)
	if a, ok := cc.attr(5); !ok || a.Size != 1 {
		t.Fatalf("attr 5: %+v %v", a, ok)
	}
	// A change to the directory drops its entries, not the file's attrs.
	cc.answered(&proto.ChangesReply{Index: 2, Epoch: 1, Inos: []uint64{1}}, time.Now())
	if _, ok := cc.get(ckey{kEnt, 1, "f"}); ok {
		t.Fatal("entry survived its directory's change")
	}
	if _, ok := cc.attr(5); !ok {
		t.Fatal("attrs dropped by the directory's change")
	}
	// A read begun before a change to its inode must not insert.
	tok = cc.begin()
	cc.invalidate([]uint64{7})
	cc.putAttr(tok, proto.Attr{Ino: 7})
	if _, ok := cc.attr(7); ok {
		t.Fatal("answer read before an invalidation was inserted")
	}
	cc.putAttr(tok, proto.Attr{Ino: 8}) // another inode: fine
	if _, ok := cc.attr(8); !ok {
		t.Fatal("unrelated answer refused")
	}
	// Reset drops everything and refuses every read begun before it.
	tok = cc.begin()
	cc.answered(&proto.ChangesReply{Index: 9, Epoch: 2, Reset: true}, time.Now())
	if _, ok := cc.attr(5); ok {
		t.Fatal("attrs survived a reset")
	}
	cc.putAttr(tok, proto.Attr{Ino: 9})
	if _, ok := cc.attr(9); ok {
		t.Fatal("answer read before a reset was inserted")
	}
	if cc.since != 9 || cc.epoch != 2 {
		t.Fatalf("since %d epoch %d after reset", cc.since, cc.epoch)
	}
}

func TestMcacheLeaseAndBound(t *testing.T) {
	cc := trusted(3)
	for ino := uint64(1); ino <= 5; ino++ {
		cc.putAttr(cc.begin(), proto.Attr{Ino: ino})
	}
	if len(cc.items) != 3 {
		t.Fatalf("%d items, bound 3", len(cc.items))
	}
	if _, ok := cc.attr(1); ok {
		t.Fatal("least recently used item kept")
	}
	if _, ok := cc.attr(5); !ok {
		t.Fatal("most recent item dropped")
	}
	// A lease that ended: nothing is trusted nor inserted.
	cc.answered(&proto.ChangesReply{Index: 2, Epoch: 1}, time.Now().Add(-2*time.Hour))
	if _, ok := cc.attr(5); ok {
		t.Fatal("served after the lease ended")
	}
	cc.putAttr(cc.begin(), proto.Attr{Ino: 6})
	if _, ok := cc.attr(6); ok || len(cc.items) != 0 {
		t.Fatalf("inserted after the lease ended (%d items)", len(cc.items))
	}
	cc.answered(&proto.ChangesReply{Index: 3, Epoch: 1}, time.Now())
	cc.putAttr(cc.begin(), proto.Attr{Ino: 6})
	if _, ok := cc.attr(6); !ok {
		t.Fatal("not trusted after a new answer")
	}
	cc.expire()
	if _, ok := cc.attr(6); ok {
		t.Fatal("served after the watch failed")
	}
}
