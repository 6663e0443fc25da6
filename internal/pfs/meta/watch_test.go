package meta

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/prometheus/client_golang/prometheus"
)

// openWatched opens a service whose leadership is old enough that no
// earlier leader's lease holds mutations up, with lease as the watchers'.
func openWatched(t *testing.T, lease time.Duration) *Service {
	s := open(t, func(cfg Config) (*Service, error) { return Open(cfg) })
	s.watchState.wmu.Lock()
	s.initWatch()
	s.watchState.lease = lease
	s.firstLeader.Store(false)
	s.leaderSince.Store(time.Now().Add(-2 * lease).UnixNano())
	s.watchState.wmu.Unlock()
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
	s.unwatch(context.Background(), &proto.Unwatch{Client: 7})
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
	s.watchState.wmu.Lock()
	defer s.watchState.wmu.Unlock()
	if _, ok := s.watchState.watchers[watcherKey{proto.KindFull, 11}]; ok {
		t.Fatal("expired watcher still registered")
	}
}

// A watcher further behind than the ring remembers is told to reset.
func TestRingOverflowResets(t *testing.T) {
	s := openWatched(t, time.Minute)
	s.watchState.wmu.Lock()
	s.watchState.ringCap = 4
	s.watchState.wmu.Unlock()
	r0 := addWatcher(t, s, 5)
	s.unwatch(context.Background(), &proto.Unwatch{Client: 5})
	for i := range 10 {
		call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: string(rune('a' + i)), Mode: 0o755})
	}
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 5, Since: r0.Index, Epoch: r0.Epoch})
	if !r.Reset {
		t.Fatalf("watch from before the ring: %+v, want Reset", r)
	}
	// From the reset's index on, changes are known again.
	s.unwatch(context.Background(), &proto.Unwatch{Client: 5})
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "z", Mode: 0o755})
	r2 := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 5, Since: r.Index, Epoch: r.Epoch})
	if r2.Reset || !slices.Contains(r2.Inos, RootIno) {
		t.Fatalf("watch after reset: %+v", r2)
	}
}

func TestWatchHeartbeat(t *testing.T) {
	s := openWatched(t, time.Minute)
	s.watchState.wmu.Lock()
	s.watchState.hb = 10 * time.Millisecond
	s.watchState.wmu.Unlock()
	r0 := addWatcher(t, s, 3)
	r := call[*proto.ChangesReply](t, s, &proto.Watch{Client: 3, Since: r0.Index, Epoch: r0.Epoch})
	if r.Reset || len(r.Inos) != 0 || r.Index != r0.Index {
		t.Fatalf("heartbeat: %+v, want empty at %d", r, r0.Index)
	}
}

// leadership is a switchable leader status for tests.
type leadership struct {
	mu     sync.Mutex
	leader bool
	since  time.Time
}

func (l *leadership) get() (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader, l.since
}

func (l *leadership) set(leader bool, since time.Time) {
	l.mu.Lock()
	l.leader, l.since = leader, since
	l.mu.Unlock()
}

// A follower answers not-leader; a poll held across a change of
// leadership is answered not-leader or, on a new leadership of the same
// member, Reset; and a young leader holds mutations until the leases of
// the previous leader's watchers have ended.
func TestWatchLeadershipChanges(t *testing.T) {
	s := openWatched(t, 300*time.Millisecond)
	l := &leadership{leader: false, since: time.Now().Add(-time.Hour)}
	s.watchState.wmu.Lock()
	s.watchState.leadership = l.get
	s.watchState.hb = time.Hour // a held poll returns only on a change
	s.watchState.wmu.Unlock()
	ctx := context.Background()
	if _, err := s.Handle(ctx, &proto.Watch{Client: 1}); err == nil {
		t.Fatal("a follower answered a watch")
	} else if _, ok := proto.LeaderHint(err); !ok {
		t.Fatalf("follower's answer: %v, want not-leader", err)
	}
	l.set(true, time.Now().Add(-time.Hour))
	r0 := addWatcher(t, s, 1)

	// Leadership lost while a poll is held: not-leader, never a renewal.
	held := make(chan error, 1)
	go func() {
		_, err := s.Handle(ctx, &proto.Watch{Client: 1, Since: r0.Index, Epoch: r0.Epoch})
		held <- err
	}()
	// Whether the poll is held yet or not, it is answered not-leader.
	l.set(false, time.Now().Add(-time.Hour))
	s.watchState.wmu.Lock()
	s.watchState.wake()
	s.watchState.wmu.Unlock()
	if err := <-held; err == nil {
		t.Fatal("a held poll was answered after leadership was lost")
	} else if _, ok := proto.LeaderHint(err); !ok {
		t.Fatalf("held poll: %v, want not-leader", err)
	}

	// Leading again, anew: the held poll of the old epoch resets.
	began := time.Now()
	l.set(true, began)
	reply := make(chan *proto.ChangesReply, 1)
	go func() {
		r, _ := s.Handle(ctx, &proto.Watch{Client: 1, Since: r0.Index, Epoch: r0.Epoch})
		reply <- r.(*proto.ChangesReply)
	}()
	if r := <-reply; !r.Reset || r.Epoch == r0.Epoch {
		t.Fatalf("watch from the old leadership: %+v, want Reset in a new epoch", r)
	}
	// The young leader's first mutation waits out the old leases.
	s.unwatch(context.Background(), &proto.Unwatch{Client: 1})
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
	if time.Since(began) < 300*time.Millisecond {
		t.Fatalf("a mutation %v after leadership began, before the old leases ended", time.Since(began))
	}
}

// serveWire serves s on a loopback TCP port and returns its address.
func serveWire(t *testing.T, s *Service) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &proto.Server{Handler: s, Log: quiet, Security: s.sec}
	go srv.Serve(l)
	t.Cleanup(srv.Close)
	return l.Addr().String()
}

// A peer holding only the read-only credential registers a watch over
// the wire, renews it without end and never acknowledges what it is told:
// a full client's mutations still complete within the bound (about two
// leases), and once the watcher is revoked they no longer wait for it.
func TestReadOnlyWatcherCannotStallWrites(t *testing.T) {
	// A lease well above a loaded machine's mkdir time (689 ms seen at a
	// load of 40 on 2 cores), so "held up by the watcher" is told from slow.
	lease := 3 * time.Second
	s := openWatched(t, lease)
	addr := serveWire(t, s)
	ro := &proto.Pool{PerServer: 1, Security: proto.Security{Cred: s.sec.Cred.ReadOnly()}}
	t.Cleanup(ro.Close)
	full := &proto.Pool{Security: s.sec}
	t.Cleanup(full.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := ro.Call(ctx, addr, &proto.Watch{Client: 77})
	if err != nil {
		t.Fatal(err)
	}
	r0 := r.(*proto.ChangesReply)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for end := time.Now().Add(50 * time.Second); time.Now().Before(end); {
			select {
			case <-stop:
				return
			default:
			}
			// Renews its lease, acknowledges nothing after r0.
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			ro.Call(c, addr, &proto.Watch{Client: 77, Since: r0.Index, Epoch: r0.Epoch})
			cancel()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	bound := 2*lease + watchHeartbeat + time.Second // slack for a busy machine
	for i := range 5 {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		_, err := full.Call(c, addr, &proto.Mkdir{Parent: RootIno, Name: fmt.Sprintf("d%d", i), Mode: 0o755})
		cancel()
		if err != nil {
			t.Fatalf("mkdir %d: %v (after %v)", i, err, time.Since(start))
		}
		d := time.Since(start)
		t.Logf("mkdir %d with a hostile read-only watcher: %v", i, d.Round(time.Millisecond))
		if d > bound {
			t.Fatalf("mkdir %d took %v with a read-only watcher that never acknowledges; bound %v", i, d, bound)
		} else if i > 0 && d > lease {
			t.Fatalf("mkdir %d took %v: the revoked watcher still holds mutations up", i, d)
		}
	}
	if _, _, revoked, _ := s.watchCounts(); revoked != 1 {
		t.Fatalf("revoked watchers %d, want 1", revoked)
	}
}

// Random client IDs do not grow the watcher map past its caps: in all,
// for read-only peers, and per connection; the refused get EAGAIN.
func TestWatcherCaps(t *testing.T) {
	s := openWatched(t, time.Minute)
	for i := range maxWatchers + 1000 {
		_, err := s.Handle(context.Background(), &proto.Watch{Client: uint64(i) + 1})
		if i < maxWatchers && err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		if i >= maxWatchers && !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("watch %d past the cap: %v, want EAGAIN", i, err)
		}
	}
	if full, _, _, refused := s.watchCounts(); full != maxWatchers || refused != 1000 {
		t.Fatalf("%d watchers (cap %d), %d refused (want 1000)", full, maxWatchers, refused)
	}

	// Over the wire, with small caps: per connection, then read-only.
	s = openWatched(t, time.Minute)
	s.watchState.wmu.Lock()
	s.watchState.maxAll, s.watchState.maxRO, s.watchState.maxConn = 20, 10, 4
	s.watchState.wmu.Unlock()
	addr := serveWire(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(cred *proto.Credential, conns int) (ok int) {
		for c := range conns {
			p := &proto.Pool{PerServer: 1, Security: proto.Security{Cred: cred}}
			defer p.Close()
			for id := range 10 {
				_, err := p.Call(ctx, addr, &proto.Watch{Client: uint64(1000*c + id + 1)})
				switch {
				case err == nil:
					ok++
				case !errors.Is(err, syscall.EAGAIN):
					t.Fatalf("watch: %v, want EAGAIN", err)
				}
			}
		}
		return ok
	}
	if n := register(s.sec.Cred.ReadOnly(), 5); n != 10 {
		t.Fatalf("read-only peers registered %d watchers over 5 connections, want 10 (cap)", n)
	}
	if n := register(s.sec.Cred, 5); n != 10 {
		t.Fatalf("full peers registered %d more watchers, want 10 (20 in all)", n)
	}
	full, ro, _, _ := s.watchCounts()
	if full != 10 || ro != 10 {
		t.Fatalf("watchers full %d read-only %d, want 10 and 10", full, ro)
	}
	// The same counts in the metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(watchCollector{s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, v := range map[string]float64{"corral_meta_cache_watchers/full": 10, "corral_meta_cache_watchers/read-only": 10,
		"corral_meta_cache_watches_refused_total": 80, "corral_meta_cache_watchers_revoked_total": 0} {
		if got[name] != v {
			t.Errorf("metric %s = %v, want %v (all: %v)", name, got[name], v, got)
		}
	}
}
