package iod

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Replicas (docs/pfs-protocol.md, "Replicas"): the I/O server's part.
// A client sends each write of a replicated column to its head copy as a
// ReplWrite; the head applies it and forwards it to the other copies under
// a per-object range lock, so every copy sees overlapping writes in one
// order. Heal, sent by meta's leader, copies ranges from a current copy
// under the same lock.

// replState is the I/O server's replica machinery; its zero value serves
// (with no peers to forward to: Run sets them).
type replState struct {
	peers  *proto.Pool // to the other I/O servers, with the cluster credential
	zone   string      // failure domain (--zone), sent with every heartbeat
	locks  rangeLocks
	load   loadMeter
	headed headedObjs    // objects this server lately took client writes for as head
	healed atomic.Uint64 // bytes written by Heal
	fwdErr atomic.Uint64 // forwards of ReplWrite that failed

	probes   *proto.Pool // liveness probes to peers, apart from bulk data
	liveOnce sync.Once
	live     *proto.Liveness
	clock    freezeClock
}

// forwardBudget, freezeGap, forwardLimit: a client gives a head up only
// when it shows no sign of life for client.Patience (3 s: stopped, a VM
// paused) or no progress for client.Stall (30 s). A head that froze for
// freezeGap or more after a write arrived, and is forwardBudget past its
// arrival, may have been given up: it does not forward it (its client may
// have sent a newer write elsewhere since). A head that ran all along (a
// wait for a range lock or a disk under load) forwards it up to
// forwardLimit, well inside client.Stall: slowness is not a failure.
const (
	forwardBudget = 1500 * time.Millisecond
	freezeGap     = time.Second
	forwardLimit  = 15 * time.Second
)

// fwdPatience and fwdStall judge a copy a head forwards to, as
// client.Patience and client.Stall judge the head (proto.Liveness): a copy
// that is busy behind a saturated link is waited for; one silent for
// fwdPatience, or that completes nothing for fwdStall, missed the write.
// fwdStall is below client.Stall so that the head answers (naming the
// copy) before its client gives the head up.
const (
	fwdPatience = 3 * time.Second
	fwdStall    = 20 * time.Second
)

// freezeClock notices when this process did not run for a while (SIGSTOP,
// a paused VM): its ticker saw a gap. Starved of CPU for under freezeGap
// is not a freeze.
type freezeClock struct {
	last    atomic.Int64 // unix ns of the last tick (0: not running)
	frozeAt atomic.Int64 // unix ns of the end of the last gap
}

func (c *freezeClock) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano() // not the tick's time: it may be from before the gap
		if prev := c.last.Swap(now); prev != 0 && now-prev > int64(freezeGap) {
			c.frozeAt.Store(now)
		}
	}
}

// frozeSince reports whether the process froze after t, or is in a freeze
// its ticker has not seen the end of yet.
func (c *freezeClock) frozeSince(t time.Time) bool {
	if c.frozeAt.Load() >= t.UnixNano() {
		return true
	}
	last := c.last.Load()
	return last != 0 && time.Now().UnixNano()-last > int64(freezeGap)
}

// liveness is how a head judges the copies it forwards to, made on first
// use: probes go on a pool of their own (Run sets it; else the peers').
func (r *replState) liveness() *proto.Liveness {
	r.liveOnce.Do(func() {
		probes := r.probes
		if probes == nil {
			probes = r.peers
		}
		r.live = &proto.Liveness{Patience: fwdPatience, Stall: fwdStall, Probe: func(ctx context.Context, addr string) error {
			if probes == nil {
				return errors.New("no connection pool to peers")
			}
			_, err := probes.Call(ctx, addr, &proto.Identify{})
			return err
		}}
	})
	return r.live
}

// headedFor: after taking a client's write as head, the server refuses
// forwards from other heads that overlap its range for this long.
const headedFor = 30 * time.Second

// headedObjs remembers which ranges of which objects this server lately
// took clients' writes for as head; bounded (old entries are dropped past
// maxHeaded). By range, not by object: a client that failed over to this
// copy for some writes while other writes of the same object still went
// through the old head (many writes are in flight at once) would otherwise
// have each copy refuse every forward of the other for headedFor, and mark
// both stale over neighbouring ranges until no current copy is left. A late
// forward can only undo a newer write it overlaps, and every write a client
// gave up on at the old head it resent here, so its range is noted.
type headedObjs struct {
	mu sync.Mutex
	at map[objKey][]headedRange
	n  int // ranges held, all objects
}

// headedRange is [lo, hi) of an object, headed last at t.
type headedRange struct {
	lo, hi uint64
	t      time.Time
}

const (
	maxHeaded = 1 << 16
	// maxHeadedPerObj: past it an object's ranges fold into their hull
	// (refusing more forwards, never fewer).
	maxHeadedPerObj = 64
)

func (h *headedObjs) note(k objKey, lo, hi uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = map[objKey][]headedRange{}
	}
	if h.n >= maxHeaded {
		h.n = 0
		for o, rs := range h.at {
			rs = slices.DeleteFunc(rs, func(r headedRange) bool { return now.Sub(r.t) > headedFor })
			if len(rs) == 0 {
				delete(h.at, o)
				continue
			}
			h.at[o] = rs
			h.n += len(rs)
		}
		if h.n >= maxHeaded {
			clear(h.at) // all recent: forget them (forwards then apply as before)
			h.n = 0
		}
	}
	rs := h.at[k]
	h.n -= len(rs)
	rs = slices.DeleteFunc(rs, func(r headedRange) bool { return now.Sub(r.t) > headedFor })
	merged := false
	for i := range rs {
		if r := &rs[i]; lo <= r.hi && r.lo <= hi { // overlaps or touches
			r.lo, r.hi, r.t = min(r.lo, lo), max(r.hi, hi), now
			merged = true
			break
		}
	}
	if !merged {
		rs = append(rs, headedRange{lo, hi, now})
	}
	if len(rs) > maxHeadedPerObj {
		all := headedRange{rs[0].lo, rs[0].hi, now}
		for _, r := range rs[1:] {
			all.lo, all.hi = min(all.lo, r.lo), max(all.hi, r.hi)
		}
		rs = []headedRange{all}
	}
	h.at[k] = rs
	h.n += len(rs)
}

// recent reports whether this server headed a write of object k
// overlapping [lo, hi) within headedFor (an empty range: any write of k).
func (h *headedObjs) recent(k objKey, lo, hi uint64, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.at[k] {
		if now.Sub(r.t) < headedFor && (lo == hi || (lo < r.hi && r.lo < hi)) {
			return true
		}
	}
	return false
}

// healPiece is the largest read of a heal from its source.
const healPiece = 1 << 20

// handleRedundancy serves the replica requests (ReplWrite, Scrub, Heal),
// and Truncate, Punch and Alloc under the range lock; ok is false for any
// other request. It also meters the load of every request it sees.
func (s *Store) handleRedundancy(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	s.r.load.note(req)
	switch m := req.(type) {
	case *proto.ReplWrite:
		r, err := s.replWrite(ctx, m)
		return r, err, true
	case *proto.Heal:
		r, err := s.heal(ctx, m)
		return r, err, true
	case *proto.Scrub:
		r, err := s.scrub(objKey{m.Handle, m.Index})
		return r, err, true
	case *proto.Truncate:
		return nil, s.lockedChange(ctx, objKey{m.Handle, m.Index}, 0, toEnd, func() error {
			return s.truncateObj(objKey{m.Handle, m.Index}, int64(m.Size))
		}), true
	case *proto.Punch:
		return nil, s.lockedChange(ctx, objKey{m.Handle, m.Index}, m.Off, m.Off+m.Len, func() error { return s.punch(m) }), true
	case *proto.Alloc:
		return nil, s.lockedChange(ctx, objKey{m.Handle, m.Index}, m.Off, m.Off+m.Len, func() error { return s.alloc(m) }), true
	}
	return nil, nil, false
}

// lockedChange runs a Truncate, Punch or Alloc under the range lock over
// [off, end) (to the end when end wraps or is not past off), so a heal in
// progress there cannot lay older bytes over it, and like a write it is
// dropped when its sender left while it waited.
func (s *Store) lockedChange(ctx context.Context, k objKey, off, end uint64, change func() error) error {
	if end <= off {
		end = toEnd
	}
	unlock, err := s.r.locks.lock(ctx, k, off, end)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	return change()
}

// replWrite applies m under the object's range lock and, on the head (Fwd
// not empty), forwards it to every Fwd copy in parallel before letting the
// next overlapping write in. A local failure is the error (the client
// takes another head); failed forwards are listed in the reply.
func (s *Store) replWrite(ctx context.Context, m *proto.ReplWrite) (*proto.ReplReply, error) {
	arrived := time.Now()
	k := objKey{m.Handle, m.Index}
	if err := s.checkFwd(m); err != nil {
		return nil, err
	}
	lo, hi := m.Off, m.Off+uint64(len(m.Data))
	if m.Head != 0 && s.r.headed.recent(k, lo, hi, arrived) {
		// A forward from another head over bytes this server lately
		// headed writes of itself: clients failed over to here, and the
		// other head may be a stopped server going on with a write they
		// gave up on. Applying it could lay old bytes over newer ones;
		// refused, this copy is at worst marked stale by a writer still
		// waiting.
		return nil, proto.Errorf(syscall.EAGAIN, fmt.Sprintf("file %d stripe %d: a forward from server %d of bytes [%d, %d), but this server heads writes of them now", m.Handle, m.Index, m.Head, lo, hi))
	}
	if m.Head == 0 {
		s.r.headed.note(k, lo, hi, arrived)
	}
	unlock, err := s.r.locks.lock(ctx, k, m.Off, m.Off+uint64(len(m.Data)))
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The connection went away while this waited: the client resends it,
	// perhaps after a newer write; applying this one now could undo that.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.writeObj(k, m.Data, int64(m.Off)); err != nil {
		return nil, err
	}
	rep := &proto.ReplReply{}
	// Sync: this copy's fsync runs beside the forwards (each copy syncs
	// its own before answering).
	synced := make(chan error, 1)
	if m.Sync {
		go func() { synced <- s.sync(k) }()
	} else {
		synced <- nil
	}
	if len(m.Fwd) == 0 {
		return rep, <-synced
	}
	self, _ := s.identity()
	if d := time.Since(arrived); d > forwardBudget && s.r.clock.frozeSince(arrived) || d > forwardLimit {
		// Too late to forward: this server froze (or waited past
		// forwardLimit), so the client may have given this head up; a
		// forward now could reach a copy after the newer write the client
		// sent through another head.
		<-synced
		return nil, proto.Errorf(syscall.ETIMEDOUT, fmt.Sprintf("file %d stripe %d: not forwarded, %v after it arrived (this server froze or waited too long)", m.Handle, m.Index, d.Round(time.Millisecond)))
	}
	fwd := &proto.ReplWrite{Handle: m.Handle, Index: m.Index, Off: m.Off, Head: self.id, Data: m.Data, Sync: m.Sync}
	errs := make([]error, len(m.Fwd))
	var wg sync.WaitGroup
	for i, p := range m.Fwd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The forwards finish even if the client goes: a copy must not
			// miss a write the others have because its sender hung up.
			// A copy is waited for while it shows progress or life
			// (busy behind a saturated link is not failed), within
			// forwardLimit+fwdStall at most.
			lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), forwardLimit+fwdStall)
			defer lcancel()
			fctx, cancel := s.r.liveness().Bound(lctx, p.Addr, nil)
			defer cancel()
			errs[i] = proto.Why(fctx, s.callPeer(fctx, p, fwd))
		}()
	}
	wg.Wait()
	if err := <-synced; err != nil {
		return nil, err
	}
	for i, err := range errs {
		if err != nil {
			s.r.fwdErr.Add(1)
			rep.Failed = append(rep.Failed, m.Fwd[i].ID)
			rep.Why = append(rep.Why, err.Error())
		}
	}
	if len(rep.Failed) > 0 {
		s.log.Warn("replica missed a write", "server", self.id, "file", m.Handle, "stripe", m.Index,
			"off", m.Off, "len", len(m.Data), "failed", rep.Failed, "why", strings.Join(rep.Why, "; "))
	}
	return rep, nil
}

// checkFwd refuses a Fwd list no layout gives: more copies than a
// column has, this server itself or one server twice (a client could
// otherwise make a head dial any number of addresses, or apply a write
// twice).
func (s *Store) checkFwd(m *proto.ReplWrite) error {
	if len(m.Fwd) == 0 {
		return nil
	}
	where := fmt.Sprintf("write of file %d stripe %d", m.Handle, m.Index)
	if len(m.Fwd) > layout.MaxReplicas-1 {
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s: %d copies to forward to, more than the %d other copies a column has at most", where, len(m.Fwd), layout.MaxReplicas-1))
	}
	self, _ := s.identity()
	for i, p := range m.Fwd {
		if p.ID == self.id {
			return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s: copy to forward to is this server (%d) itself", where, p.ID))
		}
		for _, q := range m.Fwd[:i] {
			if q.ID == p.ID {
				return proto.Errorf(syscall.EINVAL, fmt.Sprintf("%s: server %d is listed twice among the copies to forward to", where, p.ID))
			}
		}
	}
	return nil
}

// callPeer sends a forwarded write to copy p and checks its answer.
func (s *Store) callPeer(ctx context.Context, p proto.Peer, req *proto.ReplWrite) error {
	if s.r.peers == nil {
		return fmt.Errorf("I/O server %d at %s: this server has no connection pool to its peers", p.ID, p.Addr)
	}
	r, err := s.r.peers.Call(ctx, p.Addr, req)
	var re *proto.RemoteError
	if err == nil || errors.As(err, &re) {
		s.r.liveness().Replied(p.Addr) // it answered: progress
	}
	if err != nil {
		return fmt.Errorf("I/O server %d at %s: %w", p.ID, p.Addr, err)
	}
	if _, ok := r.(*proto.ReplReply); !ok {
		return fmt.Errorf("I/O server %d at %s: unexpected reply %T to a forwarded write", p.ID, p.Addr, r)
	}
	return nil
}

// source is the copy a heal reads from: the first of From that answers,
// moving on when one fails (EBADMSG, EIO, no answer).
type source struct {
	s    *Store
	k    objKey
	from []proto.Peer
	cur  int
	held uint64 // the object size the file's size implies (Heal.Held)
}

// call sends req to the current source, moving to the next on failure
// until every one has failed once for this call.
func (src *source) call(ctx context.Context, req proto.Msg, n int) (proto.Msg, error) {
	if src.s.r.peers == nil {
		return nil, proto.Errorf(syscall.EIO, "heal: this server has no connection pool to its peers")
	}
	var errs []string
	for range src.from {
		p := src.from[src.cur]
		cctx, cancel := context.WithTimeout(ctx, proto.ReplicaTimeout(n))
		r, err := src.s.r.peers.Call(cctx, p.Addr, req)
		cancel()
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, fmt.Sprintf("I/O server %d at %s: %v", p.ID, p.Addr, err))
		src.cur = (src.cur + 1) % len(src.from)
	}
	return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("heal of file %d stripe %d: no source answered: %s",
		src.k.ino, src.k.idx, strings.Join(errs, "; ")))
}

// size is the source object's size (0 when it does not exist).
func (src *source) size(ctx context.Context) (uint64, error) {
	if src.held > 0 {
		// An absent object stats as size 0, which would cut this copy to
		// nothing: an empty read carrying Held answers missing instead,
		// and moves on to a source that has it.
		if _, err := src.call(ctx, &proto.Read{Handle: src.k.ino, Index: src.k.idx, Held: src.held}, 0); err != nil {
			return 0, err
		}
	}
	r, err := src.call(ctx, &proto.ObjStat{Handle: src.k.ino, Index: src.k.idx}, 0)
	if err != nil {
		return 0, err
	}
	sr, ok := r.(*proto.SizeReply)
	if !ok {
		return 0, fmt.Errorf("heal: unexpected reply %T to ObjStat", r)
	}
	return sr.Size, nil
}

// heal makes ranges of the local copy equal to a current copy's, each
// under the range lock (writes to it wait, so the bytes copied never
// overwrite a newer write), and with Whole cuts or extends the object to
// the source's size.
func (s *Store) heal(ctx context.Context, m *proto.Heal) (*proto.HealReply, error) {
	k := objKey{m.Handle, m.Index}
	if len(m.From) == 0 {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("heal of file %d stripe %d: no source copy given", k.ino, k.idx))
	}
	src := &source{s: s, k: k, from: m.From, held: m.Held}
	rep := &proto.HealReply{}
	whole := m.Whole
	for _, x := range m.Ranges {
		// A range to the source's end also ends where the source ends: a
		// local tail past it (a truncate this copy missed) is cut below,
		// or it would come back as old bytes once the file grows again.
		whole = whole || x.Len == 0 || x.Off+x.Len < x.Off
		n, err := s.healRange(ctx, src, x)
		rep.Copied += n
		s.r.healed.Add(n)
		if err != nil {
			return nil, err
		}
	}
	if whole {
		// The size is read under a lock over the whole object: a write
		// that extends the object waits here, so the cut cannot undo it.
		unlock, err := s.r.locks.lock(ctx, k, 0, toEnd)
		if err != nil {
			return nil, err
		}
		defer unlock()
		size, err := src.size(ctx)
		if err != nil {
			return nil, err
		}
		// Below its to-the-end range this copy is current, the source
		// maybe not (stale there, and shorter): never cut below it.
		local, _, err := s.objSize(k)
		if err != nil {
			return nil, fmt.Errorf("heal of file %d stripe %d: %w", k.ino, k.idx, err)
		}
		for _, x := range m.Ranges {
			if x.Len == 0 || x.Off+x.Len < x.Off {
				size = max(size, min(x.Off, uint64(max(local, 0))))
			}
		}
		err = s.truncateObj(k, int64(size))
		if isMismatch(err) {
			// The new last block is bad here: it is taken whole first.
			if err = s.healEdges(ctx, src, size, size); err == nil {
				err = s.truncateObj(k, int64(size))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("heal of file %d stripe %d: set size %d: %w", k.ino, k.idx, size, err)
		}
	}
	// Meta counts this copy current again once the reply arrives: it must
	// be on disk by then (with its name, if the heal made the object), or a
	// power cut here would bring the stale bytes back unmarked.
	if err := s.sync(k); err != nil {
		return nil, fmt.Errorf("heal of file %d stripe %d: sync: %w", k.ino, k.idx, err)
	}
	return rep, nil
}

// healRange copies [x.Off, x.Off+x.Len) (Len 0: to the source's end) from
// src to the local object, each piece of at most healPiece under the range
// lock, so writes wait for one piece at most, never for a whole heal.
// Bytes of the range past the source's end read as zeros there, so they
// are zeroed here too.
func (s *Store) healRange(ctx context.Context, src *source, x proto.Extent) (uint64, error) {
	end := x.Off + x.Len
	if x.Len == 0 || end < x.Off {
		var err error
		if end, err = src.size(ctx); err != nil {
			return 0, err
		}
	}
	var copied uint64
	for pos := x.Off; pos < end; {
		n := min(end-pos, healPiece)
		got, err := s.healPiece(ctx, src, pos, n)
		copied += got
		if err != nil {
			return copied, err
		}
		pos += got
		if got < n { // the source ends at pos
			z, err := s.zeroRange(ctx, src, pos, end)
			return copied + z, err
		}
	}
	return copied, nil
}

// healPiece copies [pos, pos+n) from src under the range lock: the bytes
// copied (fewer than n where the source ends).
func (s *Store) healPiece(ctx context.Context, src *source, pos, n uint64) (uint64, error) {
	k := src.k
	// Locked over whole blocks: a bad block met here is rewritten whole.
	unlock, err := s.r.locks.lock(ctx, k, blockDown(pos), blockUp(pos+n))
	if err != nil {
		return 0, err
	}
	defer unlock()
	r, err := src.call(ctx, &proto.Read{Handle: k.ino, Index: k.idx, Off: pos, Len: uint32(n), Held: src.held}, int(n))
	if err != nil {
		return 0, err
	}
	d, ok := r.(*proto.DataReply)
	if !ok {
		return 0, fmt.Errorf("heal: unexpected reply %T to Read", r)
	}
	if len(d.Data) > 0 {
		err := s.writeObj(k, d.Data, int64(pos))
		if isMismatch(err) {
			if err = s.healEdges(ctx, src, pos, pos+uint64(len(d.Data))); err == nil {
				err = s.writeObj(k, d.Data, int64(pos))
			}
		}
		if err != nil {
			return 0, fmt.Errorf("heal of file %d stripe %d at %d: %w", k.ino, k.idx, pos, err)
		}
	}
	return uint64(len(d.Data)), nil
}

// zeroRange zeroes the local object over [pos, end) under the range lock,
// as far as the object exists; src gives the whole blocks it finds bad at
// the range's edges.
func (s *Store) zeroRange(ctx context.Context, src *source, pos, end uint64) (uint64, error) {
	k := src.k
	unlock, err := s.r.locks.lock(ctx, k, blockDown(pos), blockUp(end))
	if err != nil {
		return 0, err
	}
	defer unlock()
	n, err := s.zeroFrom(k, pos, end)
	if isMismatch(err) {
		if err = s.healEdges(ctx, src, pos, end); err == nil {
			n, err = s.zeroFrom(k, pos, end)
		}
	}
	return n, err
}

func blockDown(off uint64) uint64 { return off &^ (csBlock - 1) }

func blockUp(off uint64) uint64 {
	if off > toEnd-csBlock {
		return toEnd
	}
	return (off + csBlock - 1) &^ (csBlock - 1)
}

func isMismatch(err error) bool {
	var re *proto.RemoteError
	return errors.As(err, &re) && re.Errno == syscall.EBADMSG
}

// healEdges rewrites whole from src the local blocks at the edges of
// [pos, end) that a heal changes in part (pos or end inside them): one of
// them failed its checksum, and a heal is what repairs bad blocks. The
// caller holds the range lock over them.
func (s *Store) healEdges(ctx context.Context, src *source, pos, end uint64) error {
	for i, at := range []uint64{pos, end} {
		if at%csBlock == 0 || (i == 1 && blockDown(end) == blockDown(pos) && pos%csBlock != 0) {
			continue // aligned, or the block of pos, healed already
		}
		if err := s.healBlock(ctx, src, blockDown(at)); err != nil {
			return err
		}
	}
	return nil
}

// healBlock makes local block bs equal the source's: its bytes there,
// zeros past the source's end as far as the local object goes, written
// from the block's start to its end or the object's, so none of the old
// bytes is kept or checked.
func (s *Store) healBlock(ctx context.Context, src *source, bs uint64) error {
	k := src.k
	r, err := src.call(ctx, &proto.Read{Handle: k.ino, Index: k.idx, Off: bs, Len: csBlock, Held: src.held}, csBlock)
	if err != nil {
		return err
	}
	d, ok := r.(*proto.DataReply)
	if !ok {
		return fmt.Errorf("heal: unexpected reply %T to Read", r)
	}
	size, _, err := s.objSize(k)
	if err != nil {
		return err
	}
	data := d.Data
	if want := min(int64(bs)+csBlock, size) - int64(bs); int64(len(data)) < want {
		data = append(data[:len(data):len(data)], make([]byte, want-int64(len(data)))...)
	}
	if len(data) == 0 {
		return nil
	}
	if err := s.writeObj(k, data, int64(bs)); err != nil {
		return fmt.Errorf("heal of file %d stripe %d: rewrite of bad block at %d: %w", k.ino, k.idx, bs, err)
	}
	return nil
}

// zeroFrom zeroes the local object over [pos, end), as far as it exists.
func (s *Store) zeroFrom(k objKey, pos, end uint64) (uint64, error) {
	size, ok, err := s.objSize(k)
	if err != nil || !ok || uint64(size) <= pos {
		return 0, err
	}
	end = min(end, uint64(size))
	zero := make([]byte, min(end-pos, healPiece))
	var n uint64
	for pos < end {
		// Pieces end on block edges, so only the range's edges are
		// blocks written in part.
		c := min(end-pos, healPiece-pos%healPiece)
		if err := s.writeObj(k, zero[:c], int64(pos)); err != nil {
			return n, fmt.Errorf("heal of file %d stripe %d: zero at %d: %w", k.ino, k.idx, pos, err)
		}
		pos += c
		n += c
	}
	return n, nil
}
