package replog

import (
	"bytes"
	"context"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Leader leases (RaftConfig.LeaseReads): a read on the leader costs no
// quorum round while the leader holds a lease.
//
// Why it is safe: with CheckQuorum a follower refuses to vote (and to
// pre-vote) in an election other than a leadership transfer while it has
// heard from its leader within an election timeout of its own ticks; a
// heartbeat resets that count, and the E-th tick after it comes at least
// (E-2) tick periods later. A ReadIndex round confirmed by a quorum
// proves that a quorum received a heartbeat sent after the round began
// (start): no other leader can be elected before start + (E-2) ticks as
// any member of that quorum measures them. The lease ends sooner,
// (E-2) ticks × 0.8, which leaves the clocks 20 % of disagreement in
// rate (the only clock assumption: no synchronisation of absolute time,
// monotonic clocks everywhere). The lease is renewed by a round every
// tick in the background, so readers find it valid.
//
// The three ways around the followers' refusal are closed here:
//   - a leadership transfer (MsgTimeoutNow) ends the lease for the term
//     before the message leaves;
//   - a member that restarts has forgotten its leader: it holds back its
//     votes for an election timeout after it starts (holdVote);
//   - a new leader gets a lease only from a ReadIndex round, which Raft
//     answers once the leader has committed an entry of its term (so it
//     holds everything committed before it), and it applies up to that
//     index first.
//
// go.etcd.io/raft's own ReadOnlyLeaseBased is not used: its lease is the
// leader's CheckQuorum, which can let it lead up to two election timeouts
// after the last quorum contact, longer than the followers' refusal.

// leaseFor is how long after the start of a confirmed round the lease
// holds.
func (r *Raft) leaseFor() time.Duration {
	return time.Duration(electionTicks-2) * r.cfg.Tick * 4 / 5
}

// leaseRead answers a read barrier under the lease: ok when the lease
// holds and everything committed is applied here; !ok (nil error) sends
// the caller to a quorum round.
func (r *Raft) leaseRead(ctx context.Context) (bool, error) {
	if !r.leaseValid() {
		return false, nil
	}
	// Everything committed anywhere up to now is committed here (this is
	// the only leader): apply up to the commit index.
	c := r.commit.Load()
	for {
		ch := r.changedCh()
		if r.applied.Load() >= c {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctxErr(ctx)
		case <-r.done:
			return false, ErrStopped
		}
	}
	// Still the leader of the lease's term after the wait? Otherwise a
	// quorum round decides.
	if !r.leaseValid() {
		return false, nil
	}
	r.leaseHits.Add(1)
	return true, nil
}

func (r *Raft) leaseValid() bool {
	g := r.lease.Load()
	if g == nil || r.lead.Load() != r.cfg.ID {
		return false
	}
	t := r.term.Load()
	return g.term == t && r.noLease.Load() != t && time.Since(r.epoch) < g.until
}

// grantLease records a lease after a ReadIndex round that began at start
// in term succeeded.
func (r *Raft) grantLease(start time.Duration, term uint64) {
	if r.lead.Load() != r.cfg.ID || r.term.Load() != term || r.noLease.Load() == term {
		return
	}
	g := &leaseGrant{term: term, until: start + r.leaseFor()}
	for {
		old := r.lease.Load()
		if old != nil && old.term == term && old.until >= g.until {
			return
		}
		if r.lease.CompareAndSwap(old, g) {
			return
		}
	}
}

// revokeLease ends the lease for term (a transfer under way); renewals in
// that term are refused.
func (r *Raft) revokeLease(term uint64) {
	r.noLease.Store(term)
	r.lease.Store(nil)
}

// renewLease queues a confirmation round on the leader when none is under
// way and the lease was not renewed within the last half tick: a round per
// tick, so that a slow round (a loaded machine) still renews it in time.
func (r *Raft) renewLease() {
	if r.lead.Load() != r.cfg.ID {
		return
	}
	if g := r.lease.Load(); g != nil && g.term == r.term.Load() && g.until-time.Since(r.epoch) > r.leaseFor()-r.cfg.Tick/2 {
		return
	}
	if !r.renewing.CompareAndSwap(false, true) {
		return
	}
	select {
	case r.readq <- make(chan error, 1):
	default:
		r.renewing.Store(false)
	}
}

var transferCtx = []byte("CampaignTransfer") // go.etcd.io/raft's campaignTransfer

// holdVote reports whether a (pre-)vote request must be dropped: for an
// election timeout after this member started, it may have acknowledged a
// leader's lease before a restart and forgotten it, and must not help
// elect another leader while that lease may hold. Transfers are let
// through (their leader ended its lease first).
func (r *Raft) holdVote(m raftpb.Message) bool {
	if !r.cfg.LeaseReads || (m.Type != raftpb.MsgVote && m.Type != raftpb.MsgPreVote) {
		return false
	}
	if bytes.Equal(m.Context, transferCtx) {
		return false
	}
	return time.Since(r.epoch) < time.Duration(electionTicks)*r.cfg.Tick
}
