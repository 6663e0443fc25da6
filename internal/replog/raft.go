package replog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// RaftConfig configures one member of a Raft group.
type RaftConfig struct {
	ID   uint64 // this member, > 0
	Addr string // this member's metadata-protocol address
	// Peers: every member of a new group, this one included, by ID
	// (bootstrap). Empty when the data directory already holds a log or
	// when joining (Join) a group an add brought this member into.
	Peers map[uint64]string
	Join  bool
	Dir   string // the log and received snapshots
	SM    StateMachine
	// Transport calls other members (a *proto.Pool authenticated by the
	// cluster secret).
	Transport Transport
	Log       *slog.Logger

	// Zero values take the defaults below.
	Tick          time.Duration // 100ms
	SnapshotEvery uint64        // 10000 applied entries between snapshots
	KeepEntries   uint64        // 1000 entries kept behind a snapshot for slow members
	Bound         time.Duration // 3s: longest wait for a leader or a quorum

	// LeaseReads: the leader answers reads under a lease (see leaseFor)
	// instead of confirming its leadership with a quorum round per read
	// batch. Safe while the members' clocks tick at rates within 20 % of
	// each other (docs/meta.md); false is the clock-free ReadIndex.
	LeaseReads bool
}

// Syncer is an optional StateMachine method. Under the Raft engine the log
// is durable before Apply runs, so a state machine may commit without its
// own fsync (one fsync per batch instead of two) if it implements Sync:
// the engine calls it before it compacts the log behind a snapshot, and
// after a crash replays from the log whatever Applied() lost.
type Syncer interface {
	Sync() error
}

// DurableLog is implemented by engines whose log holds every command
// durably before the state machine applies it and replays it after a
// crash: their state machine may defer its own fsync (Syncer).
type DurableLog interface {
	LogDurable()
}

// LogDurable implements DurableLog.
func (r *Raft) LogDurable() {}

// Transport carries requests to other members.
type Transport interface {
	Call(ctx context.Context, addr string, req proto.Msg) (proto.Msg, error)
}

const (
	// electionTicks: 7 (not etcd's 10) so that a follower's randomised
	// timeout, [7, 14) ticks = [0.7, 1.4) s, plus an election, the new
	// leader's wait for the old one's cache leases (0.6 s, docs/meta.md)
	// and a client's retry stays within the 2 s the group has to resume
	// after losing its leader (measured 1.3-1.8 s). PreVote and CheckQuorum
	// keep a stall-induced election cheap.
	electionTicks  = 7
	heartbeatTicks = 1
	maxBatchBytes  = 4 << 20

	// promoteSlack: a learner this close to the commit index is caught up
	// and becomes a voter.
	promoteSlack = 64
)

// Raft is the replicated engine over go.etcd.io/raft/v3.
//
// Safety choices: CheckQuorum and PreVote are on, so a leader that stops
// hearing from a quorum steps down within an election timeout and a
// partitioned member cannot disrupt the group when it comes back; reads use
// ReadIndex (ReadOnlySafe: the leader confirms its leadership with a
// quorum round before answering), so a partitioned old leader can neither
// commit nor serve a stale read. Proposals are not forwarded: a follower
// answers NotLeaderError and the client goes to the leader.
type Raft struct {
	cfg     RaftConfig
	log     *slog.Logger
	node    raft.Node
	storage *raft.MemoryStorage
	wal     *wal
	sm      StateMachine

	propc  chan *proposal
	readq  chan chan error
	readSt chan raft.ReadState
	done   chan struct{}
	ctx    context.Context // canceled by Close: bounds calls to members
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once

	lead, term, commit, applied atomic.Uint64

	mu        sync.Mutex
	waiters   map[uint64]*batchWait       // batch ID → proposals waiting for it
	confWait  map[uint64]chan error       // conf change ID → its waiter
	addrs     map[uint64]string           // every member's address
	confState raftpb.ConfState            // membership as of the last applied change
	changed   chan struct{}               // closed and replaced when leader or applied moves
	readyDone chan struct{}               // closed and replaced after each Ready is handled
	recv      map[uint64]*snapRecv        // snapshot transfers being received, by token
	received  map[uint64]string           // complete snapshot files by Raft index
	peers     map[uint64]*peerSender      // by member ID
	fatal     error                       // the state machine failed: nothing more applies
	progress  map[uint64]tracker.Progress // leader's view of the members, refreshed per tick
	heard     map[uint64]time.Time        // when the leader last saw each member active

	confMu sync.Mutex // one membership change at a time (Raft allows one pending)

	// owned by the run loop
	cmdIndex  uint64 // state machine command index of the last applied entry
	snapIndex uint64 // Raft index of the last snapshot
	snapCmd   uint64 // command index at that snapshot
	forceSnap bool   // a member was added: the next snapshot must name it
	abrupt    bool   // tests: Close without handing leadership over (a crash)
	// seeded: the state machine held commands before the log began (a
	// restored store). Until a snapshot compacts the log from its start,
	// a new member replaying from index 1 would miss them.
	seeded bool
	idBase uint64
	idNext atomic.Uint64

	// Lease reads (LeaseReads): times are monotonic, since epoch.
	epoch    time.Time
	lease    atomic.Pointer[leaseGrant]
	noLease  atomic.Uint64 // a term in which this leader handed its lease away
	renewing atomic.Bool   // a renewal is queued or under way
	// LeaseHits counts reads the lease answered without a quorum round.
	leaseHits atomic.Uint64
}

// leaseGrant: this member may answer reads alone in term until until.
type leaseGrant struct {
	term  uint64
	until time.Duration // since epoch
}

type batchWait struct {
	props []*proposal
	at    time.Time
}

// NewRaft opens (or creates) the member's log in cfg.Dir and starts it.
func NewRaft(cfg RaftConfig) (*Raft, error) {
	if cfg.ID == 0 {
		return nil, errors.New("raft member ID must be > 0")
	}
	if cfg.SM == nil || cfg.Transport == nil {
		return nil, errors.New("raft: a state machine and a transport are required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 10000
	}
	if cfg.KeepEntries == 0 {
		cfg.KeepEntries = 1000
	}
	if cfg.Bound <= 0 {
		cfg.Bound = 3 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, st, err := openWAL(cfg.Dir)
	if err != nil {
		return nil, err
	}
	r := &Raft{cfg: cfg, log: cfg.Log.With("member", cfg.ID), storage: raft.NewMemoryStorage(), wal: w, sm: cfg.SM,
		propc: make(chan *proposal, 4096), readq: make(chan chan error, 4096), readSt: make(chan raft.ReadState, 64),
		done: make(chan struct{}), waiters: map[uint64]*batchWait{}, confWait: map[uint64]chan error{},
		addrs: map[uint64]string{cfg.ID: cfg.Addr}, changed: make(chan struct{}), readyDone: make(chan struct{}), recv: map[uint64]*snapRecv{},
		received: map[uint64]string{}, heard: map[uint64]time.Time{}, peers: map[uint64]*peerSender{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.epoch = time.Now()
	// Snapshot files of transfers a crash interrupted.
	if old, _ := filepath.Glob(filepath.Join(cfg.Dir, "snap-*")); len(old) > 0 {
		for _, f := range old {
			os.Remove(f)
		}
	}
	var b [8]byte
	rand.Read(b[:])
	r.idBase = binary.LittleEndian.Uint64(b[:])
	rc := &raft.Config{ID: cfg.ID, ElectionTick: electionTicks, HeartbeatTick: heartbeatTicks, Storage: r.storage,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 1 << 30,
		CheckQuorum: true, PreVote: true, ReadOnlyOption: raft.ReadOnlySafe, DisableProposalForwarding: true,
		StepDownOnRemoval: true, Logger: raftLogger{r.log}}
	fail := func(err error) (*Raft, error) { w.close(); r.cancel(); return nil, err }
	switch {
	case !st.empty:
		if len(cfg.Peers) > 0 && cfg.Join {
			return fail(errors.New("--join with --peers: choose one"))
		}
		if err := r.load(st); err != nil {
			return fail(err)
		}
		r.node = raft.RestartNode(rc)
	case cfg.Join:
		// A member an add brought in: no configuration of its own, the
		// leader sends it the log or a snapshot. Its store must be empty:
		// the log it receives may start at the group's first command.
		if a := cfg.SM.Applied(); a > 0 {
			return fail(fmt.Errorf("member %d: --join needs an empty data directory, but its store holds %d commands (of another group, or restored: start a restored store with --peers as a group of one)", cfg.ID, a))
		}
		r.node = raft.RestartNode(rc)
	case len(cfg.Peers) > 0:
		if a, ok := cfg.Peers[cfg.ID]; !ok || a != cfg.Addr {
			return fail(fmt.Errorf("member %d: its address %s is not its own entry in the peers (%v)", cfg.ID, cfg.Addr, cfg.Peers))
		}
		base := cfg.SM.Applied()
		if base > 0 {
			// A store seeded by restore: its commands precede the log.
			if err := w.saveBase(base); err != nil {
				return fail(err)
			}
			r.cmdIndex = base
			r.seeded, r.forceSnap = true, true
		}
		var peers []raft.Peer
		for id, a := range cfg.Peers {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(a)})
		}
		sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
		r.node = raft.StartNode(rc, peers)
	default:
		return fail(fmt.Errorf("raft log %s is empty: give --peers to start a new group or --join to enter one", cfg.Dir))
	}
	if len(r.confState.Voters) == 1 && r.confState.Voters[0] == cfg.ID {
		// Alone: no one to wait for, lead at once instead of after an
		// election timeout (a restart of a single member serves sooner).
		go r.node.Campaign(r.ctx)
	}
	r.wg.Add(3)
	go r.run()
	go r.proposeLoop()
	go r.readLoop()
	return r, nil
}

// load restores the storage from the log read at start.
func (r *Raft) load(st walState) error {
	r.cmdIndex = st.base
	r.seeded = st.base > 0 && raft.IsEmptySnap(st.snap)
	r.forceSnap = r.seeded
	if !raft.IsEmptySnap(st.snap) {
		if err := r.storage.ApplySnapshot(st.snap); err != nil {
			return err
		}
		mk, err := decodeMarker(st.snap.Data)
		if err != nil {
			return fmt.Errorf("raft log %s: snapshot at %d: %w", r.cfg.Dir, st.snap.Metadata.Index, err)
		}
		r.cmdIndex, r.snapCmd = mk.cmdIndex, mk.cmdIndex
		for id, a := range mk.addrs {
			r.addrs[id] = a
		}
		r.addrs[r.cfg.ID] = r.cfg.Addr
		r.confState = st.snap.Metadata.ConfState
		r.snapIndex = st.snap.Metadata.Index
		r.applied.Store(r.snapIndex)
	}
	if a := r.sm.Applied(); a < r.cmdIndex {
		return fmt.Errorf("raft log %s: the state machine has applied %d commands but the log's snapshot covers %d: the store lost commits (restore it from a backup or start this member empty with --join)", r.cfg.Dir, a, r.cmdIndex)
	}
	if err := r.storage.Append(st.ents); err != nil {
		return err
	}
	return r.storage.SetHardState(st.hs)
}

// marker is a Raft snapshot's data: where the state machine stands at the
// snapshot's index, and every member's address (the conf change entries
// that carried them are compacted away).
type marker struct {
	cmdIndex uint64
	addrs    map[uint64]string
}

func encodeMarker(m marker) []byte {
	e := proto.Enc{}
	e.U64(m.cmdIndex)
	ids := make([]uint64, 0, len(m.addrs))
	for id := range m.addrs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	e.U32(uint32(len(ids)))
	for _, id := range ids {
		e.U64(id)
		e.Str(m.addrs[id])
	}
	return e.B
}

func decodeMarker(b []byte) (marker, error) {
	d := proto.Dec{B: b}
	m := marker{cmdIndex: d.U64(), addrs: map[uint64]string{}}
	n := d.Count(12)
	for i := 0; i < n; i++ {
		id := d.U64()
		m.addrs[id] = d.Str()
	}
	if err := d.Err(); err != nil {
		return m, fmt.Errorf("snapshot marker: %w", err)
	}
	return m, nil
}

// Batch entries: [u8 1][u64 batch ID][u32 n]([u32 len][cmd])*n. The ID
// routes results to the callers waiting on the member that proposed it.
func encodeBatch(id uint64, cmds [][]byte) []byte {
	e := proto.Enc{B: make([]byte, 0, 13+len(cmds)*16)}
	e.U8(1)
	e.U64(id)
	e.U32(uint32(len(cmds)))
	for _, c := range cmds {
		e.Bytes(c)
	}
	return e.B
}

func decodeBatch(b []byte) (uint64, [][]byte, error) {
	d := proto.Dec{B: b}
	if v := d.U8(); v != 1 {
		return 0, nil, fmt.Errorf("log entry of unknown kind %d", v)
	}
	id := d.U64()
	cmds := make([][]byte, d.Count(4))
	for i := range cmds {
		cmds[i] = d.Bytes()
	}
	return id, cmds, d.Err()
}

func (r *Raft) stopped() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// changedCh is closed at the next change of leader or applied index.
func (r *Raft) changedCh() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *Raft) broadcast() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *Raft) addrOf(id uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[id]
}

// awaitLeadership returns nil on the leader, *NotLeaderError on a member
// that knows another leader, and ErrNoQuorum when no leader emerges within
// the bound.
func (r *Raft) awaitLeadership(ctx context.Context) error {
	t := time.NewTimer(r.cfg.Bound)
	defer t.Stop()
	for {
		ch := r.changedCh()
		if err := r.fatalErr(); err != nil {
			return err
		}
		switch l := r.lead.Load(); {
		case l == r.cfg.ID:
			return nil
		case l != 0:
			return &NotLeaderError{Leader: l, Addr: r.addrOf(l)}
		}
		select {
		case <-ch:
		case <-t.C:
			return fmt.Errorf("%w (no leader elected within %v)", ErrNoQuorum, r.cfg.Bound)
		case <-ctx.Done():
			return ctxErr(ctx)
		case <-r.done:
			return ErrStopped
		}
	}
}

// ctxErr is the error of a wait the caller's deadline ended: no quorum
// answered in time (errors.Is matches both ErrNoQuorum and the context's
// error); a cancel is just the cancel.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (nothing confirmed before the caller's deadline): %w", ErrNoQuorum, ctx.Err())
	}
	return ctx.Err()
}

func (r *Raft) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// Propose implements Engine. A command that was handed to Raft but is not
// applied within the bound fails with ErrNoQuorum: its outcome is unknown
// (it may still commit), which request IDs make safe to retry.
func (r *Raft) Propose(ctx context.Context, cmd []byte) ([]byte, error) {
	if err := r.awaitLeadership(ctx); err != nil {
		return nil, err
	}
	p := &proposal{cmd: cmd, res: make(chan result, 1), at: time.Now()}
	select {
	case r.propc <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrStopped
	}
	t := time.NewTimer(r.cfg.Bound)
	defer t.Stop()
	select {
	case res := <-p.res:
		return res.out, res.err
	case <-t.C:
		return nil, fmt.Errorf("%w (proposal not committed within %v)", ErrNoQuorum, r.cfg.Bound)
	case <-ctx.Done():
		return nil, ctxErr(ctx)
	case <-r.done:
		return nil, ErrStopped
	}
}

// proposeLoop drains queued commands into one batch entry per Propose.
func (r *Raft) proposeLoop() {
	defer r.wg.Done()
	for {
		var batch []*proposal
		select {
		case p := <-r.propc:
			batch = append(batch, p)
		case <-r.done:
			return
		}
		size := len(batch[0].cmd)
	drain:
		for size < maxBatchBytes {
			select {
			case p := <-r.propc:
				batch = append(batch, p)
				size += len(p.cmd)
			default:
				break drain
			}
		}
		cmds := make([][]byte, len(batch))
		for i, p := range batch {
			cmds[i] = p.cmd
		}
		id := r.idBase + r.idNext.Add(1)
		now := time.Now()
		for _, p := range batch {
			if !p.at.IsZero() {
				queueWait.Observe(now.Sub(p.at).Seconds())
			}
		}
		r.mu.Lock()
		r.waiters[id] = &batchWait{props: batch, at: now}
		r.mu.Unlock()
		r.mu.Lock()
		next := r.readyDone
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Bound)
		err := r.node.Propose(ctx, encodeBatch(id, cmds))
		cancel()
		if err == nil {
			// Group commit: while the log write under way finishes,
			// commands queue up for the next batch (one entry, one
			// fsync for all of them) instead of trickling in one by one.
			select {
			case <-next:
			case <-time.After(r.cfg.Tick):
			case <-r.done:
			}
		}
		if err != nil {
			if errors.Is(err, raft.ErrProposalDropped) {
				err = r.leaderGone(r.lead.Load())
			} else if errors.Is(err, context.DeadlineExceeded) {
				err = ErrNoQuorum
			} else if errors.Is(err, raft.ErrStopped) {
				err = ErrStopped
			}
			r.failBatch(id, err)
		}
	}
}

// leaderGone is the error of a proposal this member can no longer commit.
func (r *Raft) leaderGone(lead uint64) error {
	if lead == 0 {
		return fmt.Errorf("%w (the leader stepped down: it lost contact with a quorum)", ErrNoQuorum)
	}
	return &NotLeaderError{Leader: lead, Addr: r.addrOf(lead)}
}

func (r *Raft) failBatch(id uint64, err error) {
	r.mu.Lock()
	w := r.waiters[id]
	delete(r.waiters, id)
	r.mu.Unlock()
	if w != nil {
		for _, p := range w.props {
			p.res <- result{err: err}
		}
	}
}

// failAll answers every waiting proposal with err (leadership lost, stop).
func (r *Raft) failAll(err error) {
	r.mu.Lock()
	ws := r.waiters
	r.waiters = map[uint64]*batchWait{}
	r.mu.Unlock()
	for _, w := range ws {
		for _, p := range w.props {
			p.res <- result{err: err}
		}
	}
}

// ReadBarrier implements Engine through a batched ReadIndex: readers that
// arrive together share one leadership confirmation.
func (r *Raft) ReadBarrier(ctx context.Context) error {
	if err := r.awaitLeadership(ctx); err != nil {
		return err
	}
	if r.cfg.LeaseReads {
		if ok, err := r.leaseRead(ctx); ok || err != nil {
			return err
		}
	}
	ch := make(chan error, 1)
	select {
	case r.readq <- ch:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrStopped
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-r.done:
		return ErrStopped
	}
}

func (r *Raft) readLoop() {
	defer r.wg.Done()
	var n uint64
	for {
		var batch []chan error
		select {
		case ch := <-r.readq:
			batch = append(batch, ch)
		case <-r.done:
			return
		}
	drain:
		for {
			select {
			case ch := <-r.readq:
				batch = append(batch, ch)
			default:
				break drain
			}
		}
		n++
		// The lease runs from before the request: the quorum's
		// heartbeats that confirm it are sent after this instant.
		start, term := time.Since(r.epoch), r.term.Load()
		err := r.readIndex(n)
		if err == nil && r.cfg.LeaseReads {
			r.grantLease(start, term)
		}
		r.renewing.Store(false)
		for _, ch := range batch {
			ch <- err
		}
	}
}

// readIndex confirms leadership with a quorum and waits until the state
// machine holds everything committed when the request was made.
func (r *Raft) readIndex(n uint64) error {
	rctx := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, r.idBase), n)
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Bound)
	defer cancel()
	noQuorum := fmt.Errorf("%w (leadership not confirmed within %v)", ErrNoQuorum, r.cfg.Bound)
	if err := r.node.ReadIndex(ctx, rctx); err != nil {
		return noQuorum
	}
	var index uint64
wait:
	for {
		select {
		case rs := <-r.readSt:
			if string(rs.RequestCtx) == string(rctx) {
				index = rs.Index
				break wait
			}
		case <-ctx.Done():
			if l := r.lead.Load(); l != r.cfg.ID && l != 0 {
				return &NotLeaderError{Leader: l, Addr: r.addrOf(l)}
			}
			return noQuorum
		case <-r.done:
			return ErrStopped
		}
	}
	for {
		ch := r.changedCh()
		if r.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return noQuorum
		case <-r.done:
			return ErrStopped
		}
	}
}

// run is the Raft loop: tick, persist each Ready with one fsync, send,
// apply, advance.
func (r *Raft) run() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-t.C:
			r.node.Tick()
			ticks++
			if r.lead.Load() == r.cfg.ID {
				rs := r.node.Status()
				now := time.Now()
				r.mu.Lock()
				r.progress = rs.Progress
				for id, pr := range rs.Progress {
					if pr.RecentActive {
						r.heard[id] = now
					}
				}
				r.mu.Unlock()
			}
			if r.cfg.LeaseReads {
				r.renewLease()
			}
			if ticks%electionTicks == 0 {
				r.expire()
				if r.lead.Load() == r.cfg.ID {
					go r.promote()
				}
			}
		case rd := <-r.node.Ready():
			if err := r.ready(rd); err != nil {
				r.log.Error("replicated log stops: the state machine or the log failed", "err", err)
				r.mu.Lock()
				r.fatal = err
				r.mu.Unlock()
				r.failAll(err)
				r.broadcast()
				return
			}
			r.node.Advance()
			r.mu.Lock()
			close(r.readyDone)
			r.readyDone = make(chan struct{})
			r.mu.Unlock()
		case <-r.done:
			return
		}
	}
}

func (r *Raft) ready(rd raft.Ready) error {
	if rd.SoftState != nil {
		old := r.lead.Swap(rd.SoftState.Lead)
		if old != rd.SoftState.Lead {
			r.log.Info("metadata leader changed", "leader", rd.SoftState.Lead, "was", old)
			if old == r.cfg.ID {
				// Entries proposed here may be replaced by the new leader's:
				// the callers learn at once and retry there. Stepping down
				// with no successor is CheckQuorum: too few members answer.
				r.failAll(r.leaderGone(rd.SoftState.Lead))
			}
			r.broadcast()
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		r.term.Store(rd.HardState.Term)
		r.commit.Store(rd.HardState.Commit)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if err := r.wal.save(rd.Snapshot, rd.Entries, rd.HardState, rd.MustSync); err != nil {
		return err
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.storage.ApplySnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	if err := r.storage.Append(rd.Entries); err != nil {
		return err
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		r.storage.SetHardState(rd.HardState)
	}
	r.send(rd.Messages) // only after the fsync above: nothing is acked before it is durable
	for _, rs := range rd.ReadStates {
		select {
		case r.readSt <- rs:
		default:
		}
	}
	if err := r.apply(rd.CommittedEntries); err != nil {
		return err
	}
	return r.maybeSnapshot()
}

// apply hands committed entries to the state machine: the commands of
// consecutive batch entries go in one Apply (one store transaction).
// Commands the state machine already holds (a restart, a snapshot newer
// than its Raft index) are skipped by their command index; membership
// changes always reach Raft.
func (r *Raft) apply(ents []raftpb.Entry) error {
	var (
		cmds  [][]byte
		first uint64
		owner []uint64 // batch ID of cmds[i]
		pos   []int
		done  []uint64 // batch IDs fully applied
	)
	have := r.sm.Applied()
	flush := func() error {
		if len(cmds) > 0 {
			t := time.Now()
			outs, err := r.sm.Apply(first, cmds)
			applyTime.Observe(since(t))
			applied.Add(float64(len(cmds)))
			if err != nil {
				return fmt.Errorf("applying commands %d-%d: %w", first, first+uint64(len(cmds))-1, err)
			}
			r.mu.Lock()
			for i := range cmds {
				if w := r.waiters[owner[i]]; w != nil && pos[i] < len(w.props) {
					w.props[pos[i]].res <- result{out: outs[i]}
				}
			}
			r.mu.Unlock()
			have = first + uint64(len(cmds)) - 1
			cmds, owner, pos = nil, nil, nil
		}
		r.mu.Lock()
		for _, id := range done {
			delete(r.waiters, id)
		}
		r.mu.Unlock()
		done = nil
		return nil
	}
	for _, e := range ents {
		if e.Index <= r.applied.Load() {
			continue
		}
		switch e.Type {
		case raftpb.EntryNormal:
			if len(e.Data) == 0 {
				break // a new leader's empty entry
			}
			id, bc, err := decodeBatch(e.Data)
			if err != nil {
				return fmt.Errorf("log entry %d: %w", e.Index, err)
			}
			r.mu.Lock()
			if w := r.waiters[id]; w != nil {
				commitWait.Observe(since(w.at))
			}
			r.mu.Unlock()
			for i, c := range bc {
				r.cmdIndex++
				if r.cmdIndex <= have {
					continue
				}
				if len(cmds) == 0 {
					first = r.cmdIndex
				}
				cmds = append(cmds, c)
				owner = append(owner, id)
				pos = append(pos, i)
			}
			done = append(done, id)
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			if err := flush(); err != nil {
				return err
			}
			w := r.applyConf(e)
			r.applied.Store(e.Index)
			if w != nil {
				w <- nil // after the index moved: the caller's Status shows the change applied
			}
		}
		r.applied.Store(e.Index)
	}
	if err := flush(); err != nil {
		return err
	}
	if len(ents) > 0 {
		r.broadcast()
	}
	return nil
}

// applyConf applies a membership change to Raft and returns the channel
// of the caller waiting for it, if any.
func (r *Raft) applyConf(e raftpb.Entry) chan error {
	var cc raftpb.ConfChange
	if e.Type == raftpb.EntryConfChangeV2 {
		var v2 raftpb.ConfChangeV2
		if err := v2.Unmarshal(e.Data); err != nil {
			r.log.Error("undecodable membership change", "index", e.Index, "err", err)
			return nil
		}
		cs := r.node.ApplyConfChange(v2)
		r.mu.Lock()
		r.confState = *cs
		r.mu.Unlock()
		return nil
	}
	if err := cc.Unmarshal(e.Data); err != nil {
		r.log.Error("undecodable membership change", "index", e.Index, "err", err)
		return nil
	}
	cs := r.node.ApplyConfChange(cc)
	r.mu.Lock()
	r.confState = *cs
	switch cc.Type {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		if len(cc.Context) > 0 && cc.NodeID != r.cfg.ID {
			r.addrs[cc.NodeID] = string(cc.Context)
		}
		// A member refuses a snapshot whose configuration lacks it: the
		// one it may need must be taken after its addition.
		r.forceSnap = r.snapIndex > 0 || r.cmdIndex > 0
	case raftpb.ConfChangeRemoveNode:
		delete(r.addrs, cc.NodeID)
		if p := r.peers[cc.NodeID]; p != nil {
			p.stop()
			delete(r.peers, cc.NodeID)
		}
	}
	w := r.confWait[cc.ID]
	delete(r.confWait, cc.ID)
	r.mu.Unlock()
	r.log.Info("membership changed", "change", cc.Type.String(), "member", cc.NodeID, "addr", string(cc.Context), "index", e.Index)
	if cc.Type == raftpb.ConfChangeRemoveNode && cc.NodeID == r.cfg.ID {
		r.log.Warn("this member was removed from the metadata group; it no longer takes part")
	}
	return w
}

// maybeSnapshot takes a snapshot every SnapshotEvery applied entries: its
// data is only the marker (the state machine persists itself), and the log
// behind it is compacted, keeping KeepEntries for members a little behind.
func (r *Raft) maybeSnapshot() error {
	applied := r.applied.Load()
	// Every SnapshotEvery entries or commands, whichever comes first:
	// batch entries can hold hundreds of commands, and replay costs
	// commands.
	due := applied-r.snapIndex >= r.cfg.SnapshotEvery || r.cmdIndex-r.snapCmd >= r.cfg.SnapshotEvery
	if applied <= r.snapIndex || (!due && !r.forceSnap) {
		return nil
	}
	r.forceSnap = false
	// The log behind the snapshot goes: the state machine must hold
	// everything up to it durably first (see Syncer).
	if sy, ok := r.sm.(Syncer); ok {
		if err := sy.Sync(); err != nil {
			return fmt.Errorf("syncing the state machine before compacting the log at %d: %w", applied, err)
		}
	}
	r.mu.Lock()
	addrs := make(map[uint64]string, len(r.addrs))
	for id, a := range r.addrs {
		addrs[id] = a
	}
	cs := r.confState
	r.mu.Unlock()
	snap, err := r.storage.CreateSnapshot(applied, &cs, encodeMarker(marker{cmdIndex: r.cmdIndex, addrs: addrs}))
	if err != nil {
		return fmt.Errorf("snapshot at %d: %w", applied, err)
	}
	compact := uint64(0)
	if applied > r.cfg.KeepEntries {
		compact = applied - r.cfg.KeepEntries
	}
	if r.seeded {
		compact, r.seeded = applied, false
	}
	if compact > 0 {
		if err := r.storage.Compact(compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	last, _ := r.storage.LastIndex()
	var ents []raftpb.Entry
	if last > applied {
		if ents, err = r.storage.Entries(applied+1, last+1, 1<<62); err != nil {
			return err
		}
	}
	hs, _, _ := r.storage.InitialState()
	if err := r.wal.rewrite(snap, hs, ents); err != nil {
		return err
	}
	r.snapIndex, r.snapCmd = applied, r.cmdIndex
	r.log.Debug("snapshot and log compaction", "index", applied, "commands", r.cmdIndex)
	return nil
}

// installSnapshot restores the state machine from a snapshot the leader
// streamed (RaftSnap chunks) before Raft's own state moves to it.
func (r *Raft) installSnapshot(s raftpb.Snapshot) error {
	idx := s.Metadata.Index
	r.mu.Lock()
	path := r.received[idx]
	for i, p := range r.received { // this one, and older ones Raft turned down
		if i <= idx {
			delete(r.received, i)
			if i != idx {
				os.Remove(p)
			}
		}
	}
	r.mu.Unlock()
	if path == "" {
		return fmt.Errorf("snapshot at %d: its data never arrived", idx)
	}
	mk, err := decodeMarker(s.Data)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = r.sm.Restore(f)
	f.Close()
	os.Remove(path)
	if err != nil {
		return fmt.Errorf("restoring the state from the leader's snapshot at %d: %w", idx, err)
	}
	r.mu.Lock()
	for id, a := range mk.addrs {
		if id != r.cfg.ID {
			r.addrs[id] = a
		}
	}
	r.confState = s.Metadata.ConfState
	r.mu.Unlock()
	r.cmdIndex, r.snapCmd = mk.cmdIndex, mk.cmdIndex
	r.snapIndex = idx
	r.applied.Store(idx)
	r.log.Info("state restored from the leader's snapshot", "index", idx, "commands", r.sm.Applied())
	return nil
}

// expire answers proposals stuck longer than twice the bound (their
// entries were lost with a leader change): their callers have given up.
func (r *Raft) expire() {
	r.mu.Lock()
	var old []uint64
	for id, w := range r.waiters {
		if time.Since(w.at) > 2*r.cfg.Bound {
			old = append(old, id)
		}
	}
	r.mu.Unlock()
	for _, id := range old {
		r.failBatch(id, ErrNoQuorum)
	}
}

// promote makes a caught-up learner a voter (leader only).
func (r *Raft) promote() {
	if !r.confMu.TryLock() {
		return
	}
	defer r.confMu.Unlock()
	st := r.node.Status()
	if st.Progress == nil {
		return
	}
	for id := range st.Config.Learners {
		pr, ok := st.Progress[id]
		// Not RecentActive: CheckQuorum clears it every election timeout;
		// a learner close to the commit index has just been heard from.
		if !ok || pr.Match+promoteSlack < st.Commit {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Bound)
		err := r.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id, Context: []byte(r.addrOf(id))})
		cancel()
		if err != nil {
			r.log.Warn("promoting a caught-up learner failed; will retry", "member", id, "err", err)
		} else {
			r.log.Info("learner caught up: now a voting member", "member", id)
		}
		return
	}
}

// ChangeMember implements Engine. An added member enters as a learner (it
// does not count for the quorum while it catches up) and is promoted to a
// voter automatically once within promoteSlack entries of the commit index;
// ChangeMember returns once it is a learner. Replace is an add, then a
// remove of the old member.
func (r *Raft) ChangeMember(ctx context.Context, c MemberChange) error {
	if err := r.awaitLeadership(ctx); err != nil {
		return err
	}
	if c.ID == 0 {
		return errors.New("member ID must be > 0")
	}
	r.confMu.Lock()
	defer r.confMu.Unlock()
	r.mu.Lock()
	isMember := false
	for _, id := range append(append([]uint64{}, r.confState.Voters...), r.confState.Learners...) {
		isMember = isMember || id == c.ID
	}
	r.mu.Unlock()
	switch c.Op {
	case AddMember:
		if c.Addr == "" {
			return fmt.Errorf("adding member %d: an address is required", c.ID)
		}
		if isMember {
			return fmt.Errorf("member %d is already in the group (at %s)", c.ID, r.addrOf(c.ID))
		}
		return r.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: c.ID, Context: []byte(c.Addr)})
	case RemoveMember:
		if !isMember {
			return fmt.Errorf("member %d is not in the group", c.ID)
		}
		return r.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: c.ID})
	}
	return fmt.Errorf("unknown membership change %d", c.Op)
}

// confChange proposes cc and waits until it is applied here (confMu held).
func (r *Raft) confChange(ctx context.Context, cc raftpb.ConfChange) error {
	cc.ID = r.idBase + r.idNext.Add(1)
	ch := make(chan error, 1)
	r.mu.Lock()
	r.confWait[cc.ID] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.confWait, cc.ID)
		r.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Bound)
	defer cancel()
	if err := r.node.ProposeConfChange(ctx, cc); err != nil {
		return fmt.Errorf("membership change: %w", ErrNoQuorum)
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w (membership change not applied within %v)", ErrNoQuorum, r.cfg.Bound)
	case <-r.done:
		return ErrStopped
	}
}

// Status implements Engine. Cheap (no round trip through Raft's goroutine):
// the metadata service asks it per request; the leader's view of the
// others' progress is refreshed every tick.
func (r *Raft) Status() Status {
	st := Status{ID: r.cfg.ID, Leader: r.lead.Load(), Term: r.term.Load(), Commit: r.commit.Load(), Applied: r.applied.Load()}
	r.mu.Lock()
	defer r.mu.Unlock()
	add := func(id uint64, learner bool) {
		m := Member{ID: id, Addr: r.addrs[id], Learner: learner}
		if st.Leader == r.cfg.ID {
			if pr, ok := r.progress[id]; ok {
				// RecentActive is cleared every election timeout
				// (CheckQuorum): active means seen within ~1.5 of them.
				m.Match = pr.Match
				m.Active = id == r.cfg.ID || time.Since(r.heard[id]) < 15*r.cfg.Tick
			}
		}
		st.Members = append(st.Members, m)
	}
	for _, id := range r.confState.Voters {
		add(id, false)
	}
	for _, id := range r.confState.Learners {
		add(id, true)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st
}

// Close implements Engine. A leader first hands its leadership to the
// most caught-up voter (bounded by an election timeout), so a planned stop
// costs the group a round trip instead of an election timeout.
func (r *Raft) Close() error {
	r.closed.Do(func() {
		if !r.abrupt && r.lead.Load() == r.cfg.ID && r.fatalErr() == nil {
			r.handOver(time.Duration(electionTicks) * r.cfg.Tick)
		}
		close(r.done)
		r.cancel()
		r.wg.Wait()
		r.node.Stop()
		r.mu.Lock()
		for _, p := range r.peers {
			p.stop()
		}
		for _, s := range r.recv {
			s.f.Close()
			os.Remove(s.f.Name())
		}
		for _, p := range r.received {
			os.Remove(p)
		}
		r.mu.Unlock()
		r.failAll(ErrStopped)
		r.wal.close()
	})
	return nil
}

// TransferLeadership asks the group to make member to the leader and waits
// (bounded by ctx) until it leads; on a follower the request is forwarded
// to the leader. For planned moves (maintenance of the leader's machine).
func (r *Raft) TransferLeadership(ctx context.Context, to uint64) error {
	for {
		ch := r.changedCh()
		l := r.lead.Load()
		if l == to {
			return nil
		}
		if l != 0 {
			r.node.TransferLeadership(ctx, l, to)
		}
		select {
		case <-ch:
		case <-time.After(5 * r.cfg.Tick): // a transfer that was dropped is asked again
		case <-ctx.Done():
			return fmt.Errorf("leadership transfer to member %d: %w", to, ErrNoQuorum)
		case <-r.done:
			return ErrStopped
		}
	}
}

// handOver transfers leadership to the voter with the highest match that
// was heard from lately and waits (bounded) until another member leads.
func (r *Raft) handOver(bound time.Duration) {
	r.mu.Lock()
	var to, best uint64
	for _, id := range r.confState.Voters {
		pr, ok := r.progress[id]
		if id == r.cfg.ID || !ok || time.Since(r.heard[id]) > 15*r.cfg.Tick {
			continue
		}
		if to == 0 || pr.Match > best {
			to, best = id, pr.Match
		}
	}
	r.mu.Unlock()
	if to == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, bound)
	defer cancel()
	r.node.TransferLeadership(ctx, r.cfg.ID, to)
	for {
		ch := r.changedCh()
		if l := r.lead.Load(); l != r.cfg.ID {
			r.log.Info("leadership handed over before stopping", "to", l)
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.log.Warn("leadership hand-over did not finish before stopping; the others will elect a leader", "to", to)
			return
		}
	}
}

// raftLogger sends the library's log to slog: its info lines (elections)
// at debug level, warnings and errors as such.
type raftLogger struct{ l *slog.Logger }

func (g raftLogger) Debug(v ...interface{})                   {}
func (g raftLogger) Debugf(format string, v ...interface{})   {}
func (g raftLogger) Info(v ...interface{})                    { g.l.Debug(fmt.Sprint(v...)) }
func (g raftLogger) Infof(format string, v ...interface{})    { g.l.Debug(fmt.Sprintf(format, v...)) }
func (g raftLogger) Warning(v ...interface{})                 { g.l.Warn(fmt.Sprint(v...)) }
func (g raftLogger) Warningf(format string, v ...interface{}) { g.l.Warn(fmt.Sprintf(format, v...)) }
func (g raftLogger) Error(v ...interface{})                   { g.l.Error(fmt.Sprint(v...)) }
func (g raftLogger) Errorf(format string, v ...interface{})   { g.l.Error(fmt.Sprintf(format, v...)) }
func (g raftLogger) Fatal(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (g raftLogger) Fatalf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }
func (g raftLogger) Panic(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (g raftLogger) Panicf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }
