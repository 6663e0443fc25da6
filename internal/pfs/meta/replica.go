package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	bolt "go.etcd.io/bbolt"
)

// reqIDKey carries a request's ID (from proto.Idem) to the command made
// for it.
type reqIDKey struct{}

type reqID struct{ client, seq, done uint64 }

// readOp: requests answered from the local store after a read barrier.
func readOp(op proto.Op) bool {
	switch op {
	case proto.OpLookup, proto.OpWalk, proto.OpWalkBeneath, proto.OpGetAttr, proto.OpReaddir, proto.OpReadlink,
		proto.OpGetXattr, proto.OpListXattr, proto.OpStatfs, proto.OpRefCheck, proto.OpGetStale:
		return true
	}
	return false
}

// leaderOp: requests about the I/O servers, whose liveness only the leader
// hears (heartbeats go to it); a follower sends the client there.
func leaderOp(op proto.Op) bool {
	switch op {
	case proto.OpRegister, proto.OpServers, proto.OpReplace, proto.OpLoseServer:
		return true
	}
	return false
}

// engineErr turns an engine failure into the error a client acts on: one
// it retries (elsewhere, or later), never a plain EIO it would give up on.
func engineErr(err error) error {
	var nl *replog.NotLeaderError
	switch {
	case errors.As(err, &nl):
		return proto.NotLeader(nl.Addr)
	case errors.Is(err, replog.ErrNoQuorum):
		return proto.Errorf(proto.ErrnoNoQuorum, err.Error())
	case errors.Is(err, replog.ErrStopped):
		// This member is shutting down: another one may lead.
		return proto.NotLeader("")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Gave up waiting for the group (commit or barrier): as good as
		// no quorum; the request ID makes a retry safe.
		return proto.Errorf(proto.ErrnoNoQuorum, "metadata log: "+err.Error()+" waiting for a quorum")
	}
	return err
}

// barrier makes the next local read linearizable.
func (s *Service) barrier(ctx context.Context) error {
	if err := s.eng.ReadBarrier(ctx); err != nil {
		return engineErr(err)
	}
	return nil
}

// proposeReq proposes a client request; decide, if not nil, adds the
// leader's decisions to the command. The request ID comes from ctx.
func (s *Service) proposeReq(ctx context.Context, req proto.Msg, decide func(*command)) (proto.Msg, error) {
	c := &command{Kind: cmdReq, Req: req, DefSize: s.defSize}
	if id, ok := ctx.Value(reqIDKey{}).(reqID); ok {
		c.Client, c.Seq, c.Done = id.client, id.seq, id.done
	}
	if decide != nil {
		decide(c)
	}
	return s.propose(ctx, c)
}

// propose appends c to the log (this member must lead), waits until it is
// applied and the caches it invalidates are dropped, and returns its reply;
// an errno refusal comes back as the error.
func (s *Service) propose(ctx context.Context, c *command) (proto.Msg, error) {
	if err := s.leaderReady(ctx, c.Kind == cmdInit); err != nil {
		return nil, err
	}
	if c.Now == 0 {
		c.Now = time.Now().UnixNano()
	}
	out, err := s.eng.Propose(ctx, c.encode())
	if err != nil {
		return nil, engineErr(err)
	}
	index, r, err := decodeResult(out)
	if err != nil {
		return nil, fmt.Errorf("metadata command of kind %d: %w", c.Kind, err)
	}
	switch r := r.(type) {
	case *proto.Error:
		return nil, r.Err()
	case *proto.OK:
		s.awaitInvalidated(ctx, index)
		return nil, nil
	}
	s.awaitInvalidated(ctx, index)
	return r, nil
}

// notLeader is nil on the leader, else the answer naming the leader. The
// common case reads the role the leadership loop last saw, not the
// engine's Status (which may wait for a batch being applied). Before
// refusing it asks the engine: for up to a tick after winning an election
// the cached role is stale, and the refusal would name this very member.
// A member that just lost the lead still proposes for a moment, and the
// engine refuses it.
func (s *Service) notLeader(ctx context.Context) error {
	return s.leaderReady(ctx, false)
}

// leaderReady is notLeader that lets through, when init is set, the
// command that initialises a new store. Until that command is applied a
// new file system has no cluster ID: a registration answered then would
// carry none (and be refused by the iod after it was recorded), so every
// other request is refused "not leader" naming no one, and retried.
func (s *Service) leaderReady(ctx context.Context, init bool) error {
	// A member that leads but is not ready yet (catching up after its
	// election, or its new store not initialised) is ready within moments:
	// wait for that (bounded) rather than send the client around.
	end := time.Now().Add(3 * time.Second)
	for {
		err := s.leaderReadyOnce(ctx, init)
		if err == nil {
			return nil
		}
		if addr, ok := proto.LeaderHint(err); !ok || addr != "" || !s.eng.Status().IsLeader() || time.Now().After(end) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-s.done:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Service) leaderReadyOnce(ctx context.Context, init bool) error {
	if s.leaderSince.Load() == 0 {
		if err := s.becomeLeader(ctx); err != nil {
			return err
		}
	}
	if !init && s.Cluster() == "" {
		return proto.NotLeader("")
	}
	return nil
}

// becomeLeader starts this member's term as the leader (once per term:
// whoever of the leadership loop and notLeader gets there first), or says
// why it cannot. A new Raft leader may hold entries committed in earlier
// terms that it has not applied: the I/O server records, layouts and
// request IDs leader-only decisions read. So the term starts only after a
// read barrier (Raft's ReadIndex: everything committed before is applied
// here) and with Applied >= Commit; until then requests are refused
// "not leader" naming no one (clients ask around and retry: nothing was
// applied). Later decisions in the term need no barrier each: every entry
// committed since was proposed through this leader.
func (s *Service) becomeLeader(ctx context.Context) error {
	st := s.eng.Status()
	if !st.IsLeader() {
		return proto.NotLeader(st.LeaderAddr())
	}
	if err := s.barrier(ctx); err != nil {
		return err
	}
	if st = s.eng.Status(); !st.IsLeader() || st.Applied < st.Commit {
		if st.IsLeader() {
			return proto.NotLeader("") // still catching up: naming itself would loop the client here
		}
		return proto.NotLeader(st.LeaderAddr())
	}
	s.iodsMu.Lock()
	defer s.iodsMu.Unlock()
	if s.leaderSince.Load() != 0 {
		return nil
	}
	// Heartbeats heard as a follower (none: they are refused) or in an
	// earlier term prove nothing now: wait for servers afresh.
	s.heard = map[uint32]int64{}
	s.firstLeader.Store(s.Cluster() == "")
	s.leaderSince.Store(time.Now().UnixNano())
	s.kickReclaimer()
	return nil
}

// leadership follows this member's role: leader-only work starts when it
// becomes the leader and stops when it no longer is.
func (s *Service) leadership() {
	defer s.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if err := s.checkLeader(); err != nil {
			s.log.Warn("initialise the new store", "err", err)
		}
	}
}

// checkLeader notes a change of role; a leader of a store without a
// cluster ID or root directory (a new one) proposes them.
func (s *Service) checkLeader() error {
	lead := s.eng.Status().IsLeader()
	was := s.leaderSince.Load() != 0
	switch {
	case lead && !was:
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		err := s.becomeLeader(ctx)
		cancel()
		if err != nil {
			s.log.Debug("won the election, not serving yet", "err", err)
			return nil // the next tick tries again
		}
	case !lead && was:
		s.leaderSince.Store(0)
	}
	if !lead || s.Cluster() != "" && s.hasDefSize() {
		return nil
	}
	id, err := newClusterID()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	_, err = s.propose(ctx, &command{Kind: cmdInit, Cluster: id, DefSize: s.defSize})
	return err
}

// hasDefSize reports whether the store holds the default stripe size.
func (s *Service) hasDefSize() bool {
	var ok bool
	s.m.view(func(btx *bolt.Tx) error {
		ok = btx.Bucket(bSys).Get(kDefSize) != nil
		return nil
	})
	return ok
}
