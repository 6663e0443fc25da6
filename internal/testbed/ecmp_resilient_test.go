package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestECMPResilient measures flow movement through a resilient nexthop
// group: K flows (fixed source ports) from a client through the router to
// three directors; d3 leaves (no flow of d1 or d2 may move, d3's spread
// over both) and joins again (at most 1/N of the flows may move, all of
// them to d3). For contrast it logs what the plain multipath route
// (SetECMP) moves.
func TestECMPResilient(t *testing.T) {
	needRoot(t)
	const k = 600
	name := fmt.Sprintf("h10r%d", time.Now().UnixNano()%10000)
	spec := NewSpecOn(name, netip.MustParsePrefix("10.92.0.0/25"), []string{"client", "router", "d1", "d2", "d3"}, "")
	t.Cleanup(func() { Down(name) })
	b, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.92.0.100")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dirs := []string{"d1", "d2", "d3"}
	m, err := b.MeasureECMPMovement(ctx, "router", "client", vip, dirs, k, true)
	if err != nil {
		t.Fatal(err)
	}
	bk, err := b.ECMPBucketOwners("router", vip)
	if err != nil {
		t.Fatal(err)
	}
	frac := float64(m.JoinMoved) / k
	// 1/N of the buckets move on a join (within one bucket, 1/128); with
	// K=600 flows hashed onto them the sampling spread is about 0.02, so
	// the tolerance is 0.06 (3 sigma plus the bucket).
	const tol = 0.06
	t.Logf("resilient, %d buckets %v: leave moved %d of the others' %d flows; d3's flows went to %v; join moved %d of %d = %.3f (1/N %.3f, limit %.3f), %d not to d3",
		ECMPBuckets, bk, m.OthersMoved, m.Others, m.Spread, m.JoinMoved, k, frac, 1.0/3, 1.0/3+tol, m.JoinMovedElsewhere)
	if m.OthersMoved != 0 {
		t.Errorf("d3 left: %d flows of d1/d2 moved, want 0", m.OthersMoved)
	}
	if m.Spread["d3"] != 0 || m.Spread["d1"] == 0 || m.Spread["d2"] == 0 {
		t.Errorf("d3 left: its flows went to %v, want spread over d1 and d2", m.Spread)
	}
	if frac > 1.0/3+tol {
		t.Errorf("d3 joined: %.3f of the flows moved, want <= 1/3 + %.2f", frac, tol)
	}
	if m.JoinMovedElsewhere != 0 {
		t.Errorf("d3 joined: %d flows moved between d1 and d2, want 0", m.JoinMovedElsewhere)
	}

	p, err := b.MeasureECMPMovement(ctx, "router", "client", vip, dirs, k, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plain multipath route for contrast: leave moved %d of the others' %d flows; join moved %d of %d = %.3f",
		p.OthersMoved, p.Others, p.JoinMoved, k, float64(p.JoinMoved)/k)
}
