package client

import (
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Done is the lowest sequence number still awaiting its reply.
func TestReqIDsDone(t *testing.T) {
	r := newReqIDs()
	a, doneA := r.wrap(&proto.Unlink{})
	b, doneB := r.wrap(&proto.Unlink{})
	if a.Client == 0 || a.Client != b.Client || a.Seq != 1 || b.Seq != 2 || a.Done != 1 || b.Done != 1 {
		t.Fatalf("first two: %+v %+v", a, b)
	}
	doneB()
	c, doneC := r.wrap(&proto.Unlink{})
	if c.Seq != 3 || c.Done != 1 {
		t.Fatalf("with 1 outstanding: seq %d done %d, want 3 and 1", c.Seq, c.Done)
	}
	doneA()
	d, _ := r.wrap(&proto.Unlink{})
	if d.Done != 3 {
		t.Fatalf("with 3 outstanding: done %d, want 3", d.Done)
	}
	doneC()
	if newReqIDs().client == r.client {
		t.Error("two clients drew the same ID")
	}
}
