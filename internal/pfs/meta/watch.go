package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Client cache invalidation (docs/meta.md, "Client cache"): callbacks with
// leases, as AFS does. Every member keeps the last changes in a ring; the
// leader answers the clients' long polls (Watch) from it and, before it
// acknowledges a change, waits until every watcher has acknowledged it or
// lost its lease (awaitInvalidated).

const (
	// leaseMargin covers the clock rate difference between a client and
	// the leader over one lease: the leader's view of a lease ends later.
	leaseMargin = 100 * time.Millisecond
	// watchHeartbeat: a Watch with nothing to report is answered after
	// this long, so the client renews its lease well before it ends.
	watchHeartbeat = 150 * time.Millisecond
	// changeRing bounds the changes remembered; a watcher further behind
	// gets Reset.
	changeRing = 64 << 10
	// slowWatcher: awaitInvalidated logs a watcher that holds a change up
	// for longer.
	slowWatcher = time.Second

	// Bounds on what peers may register, whatever they send (random
	// client IDs would otherwise grow the map without end). A member runs
	// one watcher per client.Client on a connection of its own; a node
	// one per process.
	maxWatchers         = 4096 // in all
	maxReadOnlyWatchers = 1024 // registered by read-only peers (nodes)
	maxConnWatchers     = 16   // registered over one connection
)

// watchState is the Service's part for cache invalidation (one field of
// Service, embedded).
type watchState struct {
	wmu      sync.Mutex
	changed  chan struct{} // closed (and replaced) on every change and ack
	ring     []ringChange  // the last changes, oldest first, at most ringCap
	ringCap  int
	last     uint64 // index of the last change notified (0: none yet)
	floor    uint64 // changes after floor are all in ring (this epoch)
	epoch    uint64 // random per leadership: a Since of another epoch resets
	epochOf  time.Time
	watchers map[watcherKey]*watcher
	lease    time.Duration // server side: proto.CacheLease + leaseMargin
	hb       time.Duration
	// Caps (zero: the constants above) and counters for metrics.
	maxAll, maxRO, maxConn int
	revoked, refused       uint64
	swept                  time.Time // last sweep of ended leases
	// leadership, if set, replaces the engine's isLeader and leaderSince
	// here (tests of a leader change).
	leadership func() (leader bool, since time.Time)
}

// leads reports whether this member leads and since when.
func (s *Service) leads() (bool, time.Time) {
	if f := s.watchState.leadership; f != nil {
		return f()
	}
	return s.isLeader(), s.leaderFrom()
}

type ringChange struct {
	index uint64
	inos  []uint64
}

// watcherKey names a watcher: a peer's client ID within the kind of
// credential it proved, so a read-only peer cannot acknowledge or Unwatch
// for a full one.
type watcherKey struct {
	kind proto.Kind
	id   uint64
}

// watcher is one client caching metadata.
type watcher struct {
	acked    uint64    // every change up to acked is forgotten by the client
	answered time.Time // when the leader last answered its Watch (zero: never)
	// sent is the Index of the last answer; owed when the first answer
	// not yet acknowledged went out (zero: all acknowledged). A watcher
	// owing for a whole lease is revoked (see overdue).
	sent    uint64
	owed    time.Time
	revoked bool // counted as revoked (until it acknowledges)
	born    time.Time
	conn    uint64
}

// overdue reports whether wt has left an answer unacknowledged for a
// whole lease. An honest client acknowledges each answer with its next
// Watch, and one that sends none keeps no lease longer than that; so a
// watcher overdue is either gone (its lease has ended anyway) or renews
// its lease without acknowledging, which no one must wait for. Writers
// stop waiting for it, and its Watches are answered Reset until it
// acknowledges one. Called under wmu.
func (s *Service) overdue(wt *watcher, key watcherKey, now time.Time) bool {
	w := &s.watchState
	if wt.owed.IsZero() || now.Sub(wt.owed) < w.lease {
		return false
	}
	if !wt.revoked {
		wt.revoked = true
		w.revoked++
		s.log.Warn("cache invalidation: watcher revoked: it left a change unacknowledged for a whole lease", "client", key.id, "credential", key.kind.String(), "lease", w.lease)
	}
	return true
}

// initWatch readies the state; called under wmu.
func (w *watchState) initWatch() {
	if w.watchers != nil {
		return
	}
	w.watchers = map[watcherKey]*watcher{}
	w.changed = make(chan struct{})
	if w.maxAll == 0 {
		w.maxAll, w.maxRO, w.maxConn = maxWatchers, maxReadOnlyWatchers, maxConnWatchers
	}
	if w.ringCap == 0 {
		w.ringCap = changeRing
	}
	if w.lease == 0 {
		w.lease = proto.CacheLease + leaseMargin
	}
	if w.hb == 0 {
		w.hb = watchHeartbeat
	}
}

// peerKey is the key of the watcher with client ID id of the peer of ctx
// (in-process callers count as full).
func peerKey(ctx context.Context, id uint64) watcherKey {
	k := proto.PeerKind(ctx)
	if k == 0 {
		k = proto.KindFull
	}
	return watcherKey{k, id}
}

// watcher returns the watcher key, registering it for a peer on
// connection conn unless that would pass a cap; called under wmu.
func (w *watchState) watcher(key watcherKey, conn uint64) (*watcher, error) {
	if wt := w.watchers[key]; wt != nil {
		return wt, nil
	}
	now := time.Now()
	if len(w.watchers) >= w.maxAll || now.Sub(w.swept) >= w.lease {
		w.sweep(now)
	}
	nRO, nConn := 0, 0
	for k, wt := range w.watchers {
		if k.kind == proto.KindReadOnly {
			nRO++
		}
		if conn != 0 && wt.conn == conn {
			nConn++
		}
	}
	var why string
	switch {
	case len(w.watchers) >= w.maxAll:
		why = fmt.Sprintf("%d cache watchers registered (limit %d)", len(w.watchers), w.maxAll)
	case key.kind == proto.KindReadOnly && nRO >= w.maxRO:
		why = fmt.Sprintf("%d cache watchers of read-only peers registered (limit %d)", nRO, w.maxRO)
	case conn != 0 && nConn >= w.maxConn:
		why = fmt.Sprintf("%d cache watchers registered over this connection (limit %d)", nConn, w.maxConn)
	}
	if why != "" {
		w.refused++
		// EAGAIN: the client runs uncached and tries again later.
		return nil, proto.Errorf(syscall.EAGAIN, "watch refused: "+why)
	}
	wt := &watcher{born: now, conn: conn}
	w.watchers[key] = wt
	return wt, nil
}

// sweep forgets watchers whose lease has ended (they hold no one up, and
// cache nothing the leader must tell them about); called under wmu.
func (w *watchState) sweep(now time.Time) {
	w.swept = now
	for k, wt := range w.watchers {
		ref := wt.answered
		if ref.IsZero() {
			ref = wt.born
		}
		if !now.Before(ref.Add(w.lease)) {
			delete(w.watchers, k)
		}
	}
}

// watchCounts reports the watchers registered by kind of credential, and
// how many were revoked and refused since the start.
func (s *Service) watchCounts() (full, readOnly int, revoked, refused uint64) {
	w := &s.watchState
	w.wmu.Lock()
	defer w.wmu.Unlock()
	for k := range w.watchers {
		if k.kind == proto.KindReadOnly {
			readOnly++
		} else {
			full++
		}
	}
	return full, readOnly, w.revoked, w.refused
}

// wake tells every waiter (held Watches, awaitInvalidated) to look again.
func (w *watchState) wake() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// notify is called on every member after a command applied at index
// changed the inodes inos (attributes, entries of a directory, layout).
func (s *Service) notify(index uint64, inos []uint64) {
	w := &s.watchState
	w.wmu.Lock()
	defer w.wmu.Unlock()
	s.notifyLocked(index, inos)
}

func (s *Service) notifyLocked(index uint64, inos []uint64) {
	w := &s.watchState
	w.initWatch()
	if index < w.last {
		// Indexes went back (a restored snapshot): no Since before this
		// can be trusted. A new epoch resets every watcher. (The same
		// index again adds to that change.)
		s.log.Warn("cache invalidation: change index went back; every client cache is reset", "index", index, "last", w.last)
		w.epoch = 0
	}
	w.last = index
	if len(inos) == 0 {
		return
	}
	if len(w.ring) >= w.ringCap {
		// Drop the oldest block (amortised): a Since before the last
		// dropped change is answered Reset.
		n := min(len(w.ring), 1+w.ringCap/16)
		w.floor = w.ring[n-1].index
		w.ring = slices.Delete(w.ring, 0, n)
	}
	w.ring = append(w.ring, ringChange{index, slices.Clone(inos)})
	w.wake()
}

// currentEpoch returns the epoch of this leadership, starting a new one
// when leadership began after the last; called under wmu.
func (s *Service) currentEpoch() uint64 {
	w := &s.watchState
	_, since := s.leads()
	if w.epoch == 0 || !since.Equal(w.epochOf) {
		var b [8]byte
		rand.Read(b[:])
		w.epoch = binary.LittleEndian.Uint64(b[:]) | 1
		w.epochOf = since
		// Watchers of an earlier epoch start over; only what this
		// leadership notified counts from here.
		w.floor = w.last
		w.ring = w.ring[:0]
		clear(w.watchers)
	}
	return w.epoch
}

// changesAfter collects the inodes changed after since, or reports reset
// when they are not all known; called under wmu.
func (w *watchState) changesAfter(since uint64) (inos []uint64, reset bool) {
	if since < w.floor || since > w.last {
		return nil, true
	}
	i, _ := slices.BinarySearchFunc(w.ring, since+1, func(c ringChange, idx uint64) int {
		switch {
		case c.index < idx:
			return -1
		case c.index > idx:
			return 1
		}
		return 0
	})
	seen := map[uint64]bool{}
	for _, c := range w.ring[i:] {
		for _, ino := range c.inos {
			if !seen[ino] {
				if len(inos) == proto.MaxChangedInos {
					return nil, true
				}
				seen[ino] = true
				inos = append(inos, ino)
			}
		}
	}
	return inos, false
}

// watch serves one long poll.
func (s *Service) watch(ctx context.Context, m *proto.Watch) (proto.Msg, error) {
	r, err := s.watchOnce(ctx, m)
	if err != nil {
		return nil, err
	}
	// An answer renews the client's lease, so only a confirmed leader may
	// give it (Raft's ReadIndex: a quorum still follows this member). A
	// deposed leader that has not noticed yet cannot renew a lease after
	// its successor was elected, which is what the successor's wait
	// (leaderFrom + lease) counts on.
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Service) watchOnce(ctx context.Context, m *proto.Watch) (proto.Msg, error) {
	w := &s.watchState
	w.wmu.Lock()
	w.initWatch()
	if leader, _ := s.leads(); !leader {
		w.wmu.Unlock()
		return nil, proto.NotLeader(s.leaderAddr())
	}
	epoch := s.currentEpoch()
	key, conn := peerKey(ctx, m.Client), proto.PeerConn(ctx)
	wt, err := w.watcher(key, conn)
	if err != nil {
		w.wmu.Unlock()
		return nil, err
	}
	since := m.Since
	if m.Epoch != epoch {
		since = 0 // acks nothing: the client's indexes mean nothing here
	} else if since <= w.last {
		if since > wt.acked {
			wt.acked = since
			w.wake()
		}
		if since >= wt.sent {
			wt.owed, wt.revoked = time.Time{}, false
		}
	}
	// answer records what is sent to the watcher: the lease it renews and
	// the acknowledgement it now owes.
	answer := func(r *proto.ChangesReply) *proto.ChangesReply {
		now := time.Now()
		wt.answered, wt.sent = now, r.Index
		if r.Index > wt.acked && wt.owed.IsZero() {
			wt.owed = now
		}
		return r
	}
	timer := time.NewTimer(w.hb)
	defer timer.Stop()
	final := false
	for {
		// Only a leader may renew a lease: a member that lost leadership
		// while the poll was held must not answer it (its ring is not
		// what the new leader acknowledges).
		leader, began := s.leads()
		if !leader {
			w.wmu.Unlock()
			return nil, proto.NotLeader(s.leaderAddr())
		}
		if w.epoch != epoch || !began.Equal(w.epochOf) {
			// A new leadership began while the poll was held: register
			// with it (so its mutations wait for this watcher) and reset.
			epoch = s.currentEpoch()
			if wt, err = w.watcher(key, conn); err != nil {
				w.wmu.Unlock()
				return nil, err
			}
			r := answer(&proto.ChangesReply{Index: w.last, Epoch: epoch, Reset: true})
			w.wmu.Unlock()
			return r, nil
		}
		r := &proto.ChangesReply{Index: w.last, Epoch: epoch}
		if m.Epoch != epoch || s.overdue(wt, key, time.Now()) {
			r.Reset = true
		} else {
			r.Inos, r.Reset = w.changesAfter(since)
		}
		if r.Reset || len(r.Inos) > 0 || final {
			// A heartbeat's Index moves past changes without inodes.
			answer(r)
			w.wmu.Unlock()
			return r, nil
		}
		ch := w.changed
		w.wmu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			final = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		w.wmu.Lock()
	}
}

// awaitInvalidated returns once every client caching metadata has dropped
// what the command at index changed (or lost its lease), so a reply never
// precedes the invalidation (close-to-open across clients).
func (s *Service) awaitInvalidated(ctx context.Context, index uint64) {
	w := &s.watchState
	w.wmu.Lock()
	w.initWatch()
	// Clients of an earlier leader were never registered here: a young
	// leader waits until their leases have ended.
	_, since := s.leads()
	young := time.Until(since.Add(w.lease))
	w.wmu.Unlock()
	if young > 0 {
		t := time.NewTimer(young)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	start := time.Now()
	// Each watcher holds the change up for at most about two leases (see
	// overdue); this bound holds whatever the bookkeeping says.
	limit := start.Add(2*w.lease + w.hb)
	logged := false
	for {
		w.wmu.Lock()
		now := time.Now()
		var wait time.Duration
		var slow []uint64
		for key, wt := range w.watchers {
			if wt.answered.IsZero() || wt.acked >= index {
				continue
			}
			if wt.born.After(start) {
				// Registered after the change: its first answer carries
				// the change, and it cached nothing older it could trust.
				continue
			}
			end := wt.answered.Add(w.lease)
			if !now.Before(end) {
				// Lease over: the client trusts nothing cached any more.
				delete(w.watchers, key)
				continue
			}
			if s.overdue(wt, key, now) {
				continue
			}
			if !wt.owed.IsZero() {
				end = minTime(end, wt.owed.Add(w.lease))
			}
			slow = append(slow, key.id)
			if d := end.Sub(now); wait == 0 || d < wait {
				wait = d
			}
		}
		ch := w.changed
		w.wmu.Unlock()
		if len(slow) == 0 {
			return
		}
		if !now.Before(limit) {
			s.log.Warn("cache invalidation: stopped waiting for clients", "index", index, "clients", len(slow), "waited", now.Sub(start).Round(time.Millisecond))
			return
		}
		wait = min(wait, limit.Sub(now))
		if !logged && time.Since(start) > slowWatcher {
			s.log.Warn("cache invalidation: clients slow to acknowledge a change", "index", index, "clients", len(slow), "waited", time.Since(start).Round(time.Millisecond))
			logged = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.log.Warn("cache invalidation: gave up waiting for clients", "index", index, "clients", len(slow), "err", ctx.Err())
			return
		}
		t.Stop()
	}
}

// unwatch forgets a watcher that caches nothing any more.
func (s *Service) unwatch(ctx context.Context, m *proto.Unwatch) {
	w := &s.watchState
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.initWatch()
	if key := peerKey(ctx, m.Client); w.watchers[key] != nil {
		delete(w.watchers, key)
		w.wake()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// handleWatch serves the watch requests (ops 66-67); ok is false for any
// other request.
func (s *Service) handleWatch(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch m := req.(type) {
	case *proto.Watch:
		r, err = s.watch(ctx, m)
		return r, err, true
	case *proto.Unwatch:
		s.unwatch(ctx, m)
		return &proto.OK{}, nil, true
	}
	return nil, nil, false
}
