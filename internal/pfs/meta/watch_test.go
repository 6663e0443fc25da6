package meta

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// openWatched opens a service whose leadership is old enough that no
// earlier leader's lease holds mutations up, with lease as the watchers'.
func openWatched(t *testing.T, lease time.Duration) *Service {
	s := open(t)
	s.wmu.Lock()
	s.initWatch()
	s.lease = lease
	s.started = time.Now().Add(-2 * lease)
	s.wmu.Unlock()
	return s
}

// addWatcher makes watcher id known and returns its first (Reset) answer.
func addWatcher(t *testing.T, s *Service, id uint64) *proto.ChangesReply {
	t.Helper()
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: id})
	if !r.Reset || r.Epoch == 0 {
		t.Fatalf("first watch: %+v, want Reset with an epoch", r)
	}
	return r
}

func TestWatchReportsChanges(t *testing.T) {
	s := openWatched(t, time.Minute)
	r0 := addWatcher(t, s, 7)
	// Without a watcher that lags, the mutation is not held up.
	s.unwatch(&proto.Unwatch{Client: 7})
	d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 7, Since: r0.Index, Epoch: r0.Epoch})
	if r.Reset || !slices.Contains(r.Inos, RootIno) || !slices.Contains(r.Inos, d.Attr.Ino) || r.Index <= r0.Index {
		t.Fatalf("after mkdir: %+v, want inodes %d and %d", r, RootIno, d.Attr.Ino)
	}
	// A watch of another epoch (a client of an earlier leader) resets.
	if r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 7, Since: r.Index, Epoch: r.Epoch + 2}); !r.Reset {
		t.Fatalf("watch of another epoch: %+v, want Reset", r)
	}
}

// A mutation is answered only after every watcher acknowledged it.
func TestMutationWaitsForWatchers(t *testing.T) {
	s := openWatched(t, time.Minute)
	d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
	r0 := addWatcher(t, s, 9)
	done := make(chan error, 1)
	go func() {
		_, err := s.Handle(context.Background(), &proto.SetAttr{Ino: d.Attr.Ino, Mask: proto.SetMode, Mode: 0o700})
		done <- err
	}()
	// The held watch is answered with the change: the mutation is applied.
	var r *proto.ChangesReply
	for i := 0; i < 100 && (r == nil || len(r.Inos) == 0); i++ {
		r = call[*proto.ChangesReply](t, s, &proto.Watch{Client: 9, Since: r0.Index, Epoch: r0.Epoch})
	}
	if !slices.Contains(r.Inos, d.Attr.Ino) {
		t.Fatalf("watch: %+v, want inode %d", r, d.Attr.Ino)
	}
	select {
	case err := <-done:
		t.Fatalf("setattr answered (%v) before the watcher acknowledged", err)
	default:
	}
	// The next poll acknowledges; the mutation's reply follows.
	go s.Handle(context.Background(), &proto.Watch{Client: 9, Since: r.Index, Epoch: r.Epoch})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A watcher that stops polling holds mutations up only until its lease
// ends at the leader.
func TestSilentWatcherExpires(t *testing.T) {
	s := openWatched(t, 300*time.Millisecond)
	addWatcher(t, s, 11)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Handle(ctx, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the mutation waited for the deadline, not for the lease")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, ok := s.watchers[11]; ok {
		t.Fatal("expired watcher still registered")
	}
}

// A watcher further behind than the ring remembers is told to reset.
func TestRingOverflowResets(t *testing.T) {
	s := openWatched(t, time.Minute)
	s.wmu.Lock()
	s.ringCap = 4
	s.wmu.Unlock()
	r0 := addWatcher(t, s, 5)
	s.unwatch(&proto.Unwatch{Client: 5})
	for i := range 10 {
		call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: string(rune('a' + i)), Mode: 0o755})
	}
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 5, Since: r0.Index, Epoch: r0.Epoch})
	if !r.Reset {
		t.Fatalf("watch from before the ring: %+v, want Reset", r)
	}
	// From the reset's index on, changes are known again.
	s.unwatch(&proto.Unwatch{Client: 5})
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "z", Mode: 0o755})
	r2 := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 5, Since: r.Index, Epoch: r.Epoch})
	if r2.Reset || !slices.Contains(r2.Inos, RootIno) {
		t.Fatalf("watch after reset: %+v", r2)
	}
}

func TestWatchHeartbeat(t *testing.T) {
	s := openWatched(t, time.Minute)
	s.wmu.Lock()
	s.hb = 10 * time.Millisecond
	s.wmu.Unlock()
	r0 := addWatcher(t, s, 3)
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 3, Since: r0.Index, Epoch: r0.Epoch})
	if r.Reset || len(r.Inos) != 0 || r.Index != r0.Index {
		t.Fatalf("heartbeat: %+v, want empty at %d", r, r0.Index)
	}
}
