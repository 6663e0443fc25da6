package replog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// A leader cut off from the others keeps believing it leads until
// CheckQuorum steps it down; meanwhile the others elect a leader and commit.
// Under a lease, no read on the old leader may succeed after that commit:
// it would miss an acknowledged change.
func TestRaftLeaseDeposedLeaderNoStaleRead(t *testing.T) {
	c := newClusterOpt(t, 3, 0, true)
	l := c.leader(5 * time.Second)
	if _, err := l.eng.Load().Propose(context.Background(), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// The lease serves reads without a quorum round (bounded wait for the
	// first renewal).
	deadline := time.Now().Add(5 * time.Second)
	for l.eng.Load().leaseHits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read was answered under the lease")
		}
		if err := l.eng.Load().ReadBarrier(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	old := l.eng.Load()

	// Readers on the old leader all along: each success records when the
	// read began.
	var committedAt atomic.Int64 // unix ns of the new leader's ack, 0 before
	stopReaders := staleReaders(old, &committedAt)
	l.cut.Store(true)
	nl := c.leader(5 * time.Second)
	if nl == l {
		t.Fatal("the cut member still counts as leader")
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := nl.eng.Load().Propose(ctx, []byte("v2"))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal(err)
		}
		nl = c.leader(5 * time.Second)
	}
	committedAt.Store(time.Now().UnixNano())
	// Read on until the old leader has surely stepped down (CheckQuorum:
	// within two election timeouts) and then some.
	time.Sleep(time.Duration(3*electionTicks) * old.cfg.Tick)
	if n := stopReaders(); n > 0 {
		t.Fatalf("the deposed leader answered %d reads that began after the new leader committed, without the change", n)
	}
	if old.Status().IsLeader() {
		t.Error("the cut leader never stepped down")
	}
}

// A member that restarts holds its votes for an election timeout: it may
// have confirmed a lease it no longer remembers. Transfers pass.
func TestRaftLeaseRestartHoldsVotes(t *testing.T) {
	c := newClusterOpt(t, 3, 0, true)
	l := c.leader(5 * time.Second)
	var f *member
	for _, m := range c.ms {
		if m != l {
			f = m
			break
		}
	}
	f.stop()
	f.start(t, nil, false, 0)
	e := f.eng.Load()
	for _, tc := range []struct {
		typ  string
		hold bool
	}{{"vote", true}, {"prevote", true}, {"transfer", false}, {"heartbeat", false}} {
		m := voteMsg(tc.typ)
		if got := e.holdVote(m); got != tc.hold {
			t.Errorf("%s right after a restart: held %v, want %v", tc.typ, got, tc.hold)
		}
	}
	time.Sleep(time.Duration(electionTicks+1) * e.cfg.Tick)
	if e.holdVote(voteMsg("vote")) {
		t.Error("votes still held after an election timeout")
	}
	// Without leases nothing is held.
	if (&Raft{cfg: RaftConfig{Tick: time.Second}, epoch: time.Now()}).holdVote(voteMsg("vote")) {
		t.Error("a member without lease reads held a vote")
	}
}

// A leadership transfer ends the old leader's lease before the target can
// win (the target's election overrides the others' lease): an old leader
// that hears nothing after sending the transfer must not answer reads
// without the change the new leader committed.
func TestRaftLeaseEndsOnTransfer(t *testing.T) {
	// Slow ticks: a lease longer than the transfer's election, so that a
	// lease the transfer did not end would still hold at the commit.
	c := &cluster{t: t, ms: map[uint64]*member{}}
	peers := map[uint64]string{}
	for i := uint64(1); i <= 3; i++ {
		m := newMember(t, i)
		m.lease, m.tick = true, 400*time.Millisecond
		c.ms[i], peers[i] = m, m.addr
	}
	for _, m := range c.ms {
		m.start(t, peers, false, 0)
	}
	l := c.leader(15 * time.Second)
	if _, err := l.eng.Load().Propose(context.Background(), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	old := l.eng.Load()
	deadline := time.Now().Add(10 * time.Second)
	for !old.leaseValid() {
		if time.Now().After(deadline) {
			t.Fatal("the leader never got a lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var to uint64
	for id := range c.ms {
		if id != l.id {
			to = id
			break
		}
	}
	// The old leader sends the transfer but hears nothing after it.
	l.deaf.Store(true)
	deadline = time.Now().Add(10 * time.Second)
	old.node.TransferLeadership(context.Background(), l.id, to)
	var committedAt atomic.Int64
	stopReaders := staleReaders(old, &committedAt)
	nt := c.ms[to]
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := nt.eng.Load().Propose(ctx, []byte("v2"))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("the transfer target never committed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	committedAt.Store(time.Now().UnixNano())
	time.Sleep(old.leaseFor() + 200*time.Millisecond)
	if n := stopReaders(); n > 0 {
		t.Fatalf("the old leader answered %d reads without the change its transfer target committed", n)
	}
}

// staleReaders reads on old from 4 goroutines until stopped. A read that
// began after *committedAt (unix ns, 0 until the new leader committed "v2")
// and succeeded while old had not applied that command is stale; stop ends
// the readers and returns how many there were.
func staleReaders(old *Raft, committedAt *atomic.Int64) (stop func() int64) {
	var stale atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				began := time.Now().UnixNano()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err := old.ReadBarrier(ctx)
				cancel()
				if at := committedAt.Load(); err == nil && at != 0 && began > at && old.sm.Applied() < 2 {
					stale.Add(1)
				}
				if errors.Is(err, ErrStopped) {
					return
				}
			}
		}()
	}
	return func() int64 {
		close(done)
		wg.Wait()
		return stale.Load()
	}
}

func voteMsg(typ string) raftpb.Message {
	switch typ {
	case "vote":
		return raftpb.Message{Type: raftpb.MsgVote, Term: 9}
	case "prevote":
		return raftpb.Message{Type: raftpb.MsgPreVote, Term: 9}
	case "transfer":
		return raftpb.Message{Type: raftpb.MsgVote, Term: 9, Context: transferCtx}
	}
	return raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 9}
}
