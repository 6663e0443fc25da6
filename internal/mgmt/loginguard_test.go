package mgmt

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A full table forgets stale keys first, then the oldest key not locked
// out; a locked-out key goes last.
func TestFailTableEvictsUnpenalisedFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tb := newFailTable(3, 2)
	for i := 0; i < 3; i++ {
		tb.fail("victim", now)
	}
	if d := tb.lockedFor("victim", now); d != loginLockBase {
		t.Fatalf("victim after 3 failures (2 free): locked %v, want %v", d, loginLockBase)
	}
	for i := 0; i < 1000; i++ {
		tb.fail(fmt.Sprintf("junk-%d", i), now.Add(time.Duration(i)*time.Millisecond))
		if len(tb.m) > 3 {
			t.Fatalf("table holds %d keys, max 3", len(tb.m))
		}
	}
	if tb.lockedFor("victim", now.Add(time.Millisecond)) == 0 {
		t.Error("a flood of junk keys erased a lockout")
	}
	// Doubling, capped.
	tb = newFailTable(0, 0)
	var last time.Duration
	for i := 0; i < 40; i++ {
		last, _ = tb.fail("k", now)
	}
	if last != loginLockMax {
		t.Errorf("lockout after 40 failures: %v, want the cap %v", last, loginLockMax)
	}
	// A key with no failure for loginFailWindow (and no lockout left)
	// starts afresh.
	later := now.Add(loginLockMax + loginFailWindow + time.Second)
	if d := tb.lockedFor("k", later); d != 0 || len(tb.m) != 0 {
		t.Errorf("stale key: locked %v, %d keys", d, len(tb.m))
	}
}

// One check per user at a time; a source's checks and the queue are
// bounded; each refusal says when to come back.
func TestLoginGuardBounds(t *testing.T) {
	g := newLoginGuard()
	ctx := context.Background()
	tk, _, err := g.admit(ctx, "rob", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, reason, err := g.admit(ctx, "rob", "192.0.2.9"); reason != "busy" || err == nil {
		t.Errorf("second check for rob while one runs: %q %v, want busy", reason, err)
	}
	tk.release()
	// Lock out a source: its next try is refused as locked, with the
	// lockout's Retry-After.
	for i := 0; i < loginSourceFree+1; i++ {
		tk, _, err := g.admit(ctx, fmt.Sprintf("u%d", i), "192.0.2.2")
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		tk.failed(false)
		tk.release()
	}
	_, reason, err := g.admit(ctx, "anyone", "192.0.2.2")
	tm, _ := err.(*tooManyError)
	if reason != "locked" || tm == nil || tm.retry < time.Second {
		t.Errorf("locked-out source: %q %v, want locked with a Retry-After", reason, err)
	}
	if got := loginSource("[2001:db8::1]:443"); got != "2001:db8::/64" {
		t.Errorf("IPv6 source key %q, want its /64", got)
	}
}
