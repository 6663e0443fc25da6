package cli

import (
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestReplicaTexts: what layout get and fs servers print for replicas.
func TestReplicaTexts(t *testing.T) {
	a := proto.Attr{Mode: syscall.S_IFREG | 0o644, StripeSize: 1 << 20, StripeCount: 2, Servers: []uint32{1, 2},
		Replicas: 2, Extra: []uint32{2, 3}, Stale: 4}
	if got, want := layoutText(a), "stripe-size 1MiB stripe-count 2 servers [1 2] replicas 2 copies [1 2] [2 3] stale-records 4"; got != want {
		t.Errorf("layoutText = %q, want %q", got, want)
	}
	a.Replicas, a.Extra, a.Stale = 1, nil, 0
	if got, want := layoutText(a), "stripe-size 1MiB stripe-count 2 servers [1 2]"; got != want {
		t.Errorf("one copy: layoutText = %q, want %q", got, want)
	}
	p := layoutPolicy{dir: "/d", size: 4096, sizeFrom: "/d", replicas: 3, replFrom: "/", place: proto.PlaceWhole, placeFrom: "/d"}
	if got, want := p.String(), "stripe-size 4KiB (set here) stripe-count all (default) replicas 3 (inherited from /) placement whole (set here)"; got != want {
		t.Errorf("policy = %q, want %q", got, want)
	}
	for _, c := range []struct {
		stale, healed uint64
		want          string
	}{{0, 0, "-"}, {0, 5, "done"}, {300, 100, "25%"}, {1, 0, "0%"}} {
		if got := healProgress(c.stale, c.healed); got != c.want {
			t.Errorf("healProgress(%d, %d) = %q, want %q", c.stale, c.healed, got, c.want)
		}
	}
}
