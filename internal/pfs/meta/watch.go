package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"slices"
	"sync"
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
	watchers map[uint64]*watcher
	lease    time.Duration // server side: proto.CacheLease + leaseMargin
	hb       time.Duration
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

// watcher is one client caching metadata.
type watcher struct {
	acked    uint64    // every change up to acked is forgotten by the client
	answered time.Time // when the leader last answered its Watch (zero: never)
}

// initWatch readies the state; called under wmu.
func (w *watchState) initWatch() {
	if w.watchers != nil {
		return
	}
	w.watchers = map[uint64]*watcher{}
	w.changed = make(chan struct{})
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

// watcher returns watcher id, registering it; called under wmu.
func (w *watchState) watcher(id uint64) *watcher {
	wt := w.watchers[id]
	if wt == nil {
		wt = &watcher{}
		w.watchers[id] = wt
	}
	return wt
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
	wt := w.watcher(m.Client)
	since := m.Since
	if m.Epoch != epoch {
		since = 0 // acks nothing: the client's indexes mean nothing here
	} else if since > wt.acked && since <= w.last {
		wt.acked = since
		w.wake()
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
			wt = w.watcher(m.Client)
			wt.answered = time.Now()
			r := &proto.ChangesReply{Index: w.last, Epoch: epoch, Reset: true}
			w.wmu.Unlock()
			return r, nil
		}
		r := &proto.ChangesReply{Index: w.last, Epoch: epoch}
		if m.Epoch != epoch {
			r.Reset = true
		} else {
			r.Inos, r.Reset = w.changesAfter(since)
		}
		if r.Reset || len(r.Inos) > 0 || final {
			// A heartbeat's Index moves past changes without inodes.
			wt.answered = time.Now()
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
	logged := false
	for {
		w.wmu.Lock()
		now := time.Now()
		var wait time.Duration
		var slow []uint64
		for id, wt := range w.watchers {
			if wt.answered.IsZero() || wt.acked >= index {
				continue
			}
			end := wt.answered.Add(w.lease)
			if !now.Before(end) {
				// Lease over: the client trusts nothing cached any more.
				delete(w.watchers, id)
				continue
			}
			slow = append(slow, id)
			if d := end.Sub(now); wait == 0 || d < wait {
				wait = d
			}
		}
		ch := w.changed
		w.wmu.Unlock()
		if len(slow) == 0 {
			return
		}
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
func (s *Service) unwatch(m *proto.Unwatch) {
	w := &s.watchState
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.initWatch()
	if _, ok := w.watchers[m.Client]; ok {
		delete(w.watchers, m.Client)
		w.wake()
	}
}

// handleWatch serves the watch requests (ops 66-67); ok is false for any
// other request.
func (s *Service) handleWatch(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch m := req.(type) {
	case *proto.Watch:
		r, err = s.watch(ctx, m)
		return r, err, true
	case *proto.Unwatch:
		s.unwatch(m)
		return &proto.OK{}, nil, true
	}
	return nil, nil, false
}
