package client

import (
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/layout"
)

// A replicated file's writes leave in pieces of at most replPiece: its head
// forwards a write only once all of it arrived, so whole 1 MiB units left
// the copies' links idle at the start and busy alone at the end of every
// flush. A file with one copy still sends whole stripe units.
func TestReplicatedWritesGoInPieces(t *testing.T) {
	unit := int64(1 << 20)
	for _, tc := range []struct {
		copies int
		want   int64
	}{{1, unit}, {2, replPiece}, {3, replPiece}} {
		lay := layout.Layout{StripeSize: uint32(unit), Servers: []uint32{1, 2, 3, 4}, Replicas: tc.copies}
		if tc.copies > 1 {
			for k := range lay.Servers {
				for c := 1; c < tc.copies; c++ {
					lay.Extra = append(lay.Extra, lay.Servers[(k+c)%len(lay.Servers)])
				}
			}
		}
		if err := lay.Validate(); err != nil {
			t.Fatal(err)
		}
		f := &File{wstate: &wstate{lay: lay}}
		for off := int64(0); off < 3*unit; {
			end := f.boundary(off)
			if end-off > tc.want || end <= off {
				t.Fatalf("%d copies: request at %d ends at %d: %d bytes, want at most %d", tc.copies, off, end, end-off, tc.want)
			}
			if off/unit != (end-1)/unit {
				t.Fatalf("%d copies: request [%d, %d) crosses a stripe unit", tc.copies, off, end)
			}
			if end%tc.want != 0 {
				t.Fatalf("%d copies: request [%d, %d) does not end on a %d-byte boundary", tc.copies, off, end, tc.want)
			}
			off = end
		}
	}
	if replPiece > unit || unit%replPiece != 0 {
		t.Fatalf("replPiece %d must divide the usual 1 MiB stripe unit", replPiece)
	}
}
