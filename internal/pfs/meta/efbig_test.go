package meta

import (
	"context"
	"errors"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Meta refuses, over the wire, a size no I/O server could hold: EFBIG for
// setattr (truncate and size extension) past the layout's largest file,
// sizes up to it pass.
func TestSetAttrSizePastLayoutIsEFBIG(t *testing.T) {
	s := open(t, func(cfg Config) (*Service, error) { return Open(cfg) })
	addr := serveWire(t, s)
	p := &proto.Pool{Security: s.sec}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	one := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "one", Mode: 0o644, StripeCount: 1}).Attr
	three := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "three", Mode: 0o644, StripeCount: 3}).Attr
	for _, tc := range []struct {
		a    proto.Attr
		mask uint32
		size uint64
		ok   bool
	}{
		{one, proto.SetSize, layout.MaxObjectSize, true},
		{one, proto.SetSize, layout.MaxObjectSize + 1, false},
		{one, proto.SetSizeExtend, layout.MaxObjectSize + 1, false},
		{three, proto.SetSize, math.MaxInt64, true},
		{three, proto.SetSize, math.MaxInt64 + 1, false}, // a negative int64
		{three, proto.SetSizeExtend, math.MaxUint64, false},
		{one, proto.SetSize, math.MaxUint64, false},
	} {
		r, err := p.Call(ctx, addr, &proto.SetAttr{Ino: tc.a.Ino, Mask: tc.mask, Size: tc.size})
		switch {
		case tc.ok && err != nil:
			t.Errorf("ino %d (%d columns) size %d: %v", tc.a.Ino, len(tc.a.Servers), tc.size, err)
		case !tc.ok && !errors.Is(err, syscall.EFBIG):
			t.Errorf("ino %d (%d columns) size %d: %v %v, want EFBIG", tc.a.Ino, len(tc.a.Servers), tc.size, r, err)
		}
	}
	// A refused size changed nothing.
	if a := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: one.Ino}).Attr; a.Size != layout.MaxObjectSize {
		t.Fatalf("size after refusals: %d", a.Size)
	}
}
