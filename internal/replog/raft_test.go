package replog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Behaviour tests of the Raft engine in the style of etcd's
// raft_paper_test.go, but for what this package adds around the library:
// real members over loopback on the metadata protocol, a durable log, the
// state machine contract, membership and snapshots.

// listSM is a toy state machine that keeps every command, so a test can
// check that each acknowledged command is applied exactly once everywhere.
// It is "durable": a restarted engine gets the same value back.
type listSM struct {
	mu      sync.Mutex
	cmds    [][]byte
	applied uint64 // command index
	fed     atomic.Int64
}

func (s *listSM) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first != s.applied+1 {
		return nil, fmt.Errorf("gap in the log: applied %d, got %d", s.applied, first)
	}
	out := make([][]byte, len(cmds))
	for i, c := range cmds {
		s.cmds = append(s.cmds, append([]byte(nil), c...))
		out[i] = binary.LittleEndian.AppendUint64(nil, first+uint64(i))
	}
	s.applied += uint64(len(cmds))
	s.fed.Add(int64(len(cmds)))
	return out, nil
}

func (s *listSM) Applied() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.applied }

func (s *listSM) Snapshot(w io.Writer) error {
	s.mu.Lock()
	cmds := append([][]byte(nil), s.cmds...)
	s.mu.Unlock()
	e := proto.Enc{}
	e.U32(uint32(len(cmds)))
	for _, c := range cmds {
		e.Bytes(c)
	}
	_, err := w.Write(e.B)
	return err
}

func (s *listSM) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	d := proto.Dec{B: b}
	cmds := make([][]byte, d.Count(4))
	for i := range cmds {
		cmds[i] = append([]byte(nil), d.Bytes()...)
	}
	if err := d.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.cmds, s.applied = cmds, uint64(len(cmds))
	s.mu.Unlock()
	return nil
}

func (s *listSM) has() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for _, c := range s.cmds {
		m[string(c)]++
	}
	return m
}

var testSec = func() proto.Security {
	c, err := proto.NewSecret()
	if err != nil {
		panic(err)
	}
	return proto.Security{Cred: c}
}()

// member is one engine with its server; cut drops its traffic both ways.
type member struct {
	id   uint64
	addr string
	dir  string
	sm   *listSM
	eng  atomic.Pointer[Raft]
	srv  *proto.Server
	pool *proto.Pool
	cut  atomic.Bool
	deaf atomic.Bool // drops what it receives, still sends
	// lease: start the engine with LeaseReads.
	lease bool
	tick  time.Duration // 0: the default
}

func (m *member) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if m.cut.Load() || m.deaf.Load() {
		return nil, errors.New("partitioned")
	}
	e := m.eng.Load()
	if e == nil {
		return nil, errors.New("member down")
	}
	r, err, ok := e.Handle(ctx, req)
	if !ok {
		return nil, fmt.Errorf("unexpected request %T", req)
	}
	return r, err
}

// Call is the member's transport: the pool, unless cut.
func (m *member) Call(ctx context.Context, addr string, req proto.Msg) (proto.Msg, error) {
	if m.cut.Load() {
		return nil, errors.New("partitioned")
	}
	return m.pool.Call(ctx, addr, req)
}

type cluster struct {
	t  *testing.T
	ms map[uint64]*member
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLog(t *testing.T) *slog.Logger {
	if os.Getenv("RAFT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

// newMember listens on a loopback address and serves the member's engine
// once started.
func newMember(t *testing.T, id uint64) *member {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, addr: l.Addr().String(), dir: t.TempDir(), sm: &listSM{},
		pool: &proto.Pool{Security: testSec}}
	m.srv = &proto.Server{Handler: m, Log: quiet, Security: testSec}
	go m.srv.Serve(l)
	t.Cleanup(func() {
		m.stop()
		m.srv.Close()
		m.pool.Close()
	})
	return m
}

func (m *member) start(t *testing.T, peers map[uint64]string, join bool, snapEvery uint64) {
	e, err := NewRaft(RaftConfig{ID: m.id, Addr: m.addr, Peers: peers, Join: join, Dir: m.dir, SM: m.sm,
		Transport: m, Log: testLog(t).With("m", m.id), SnapshotEvery: snapEvery, KeepEntries: 5, LeaseReads: m.lease, Tick: m.tick})
	if err != nil {
		t.Fatalf("member %d: %v", m.id, err)
	}
	m.eng.Store(e)
}

// stop stops the member as a crash would: no leadership hand-over.
func (m *member) stop() {
	if e := m.eng.Swap(nil); e != nil {
		e.abrupt = true
		e.Close()
	}
}

func newCluster(t *testing.T, n int, snapEvery uint64) *cluster {
	return newClusterOpt(t, n, snapEvery, false)
}

func newClusterOpt(t *testing.T, n int, snapEvery uint64, lease bool) *cluster {
	c := &cluster{t: t, ms: map[uint64]*member{}}
	peers := map[uint64]string{}
	for i := 1; i <= n; i++ {
		m := newMember(t, uint64(i))
		m.lease = lease
		c.ms[m.id] = m
		peers[m.id] = m.addr
	}
	for _, m := range c.ms {
		m.start(t, peers, false, snapEvery)
	}
	return c
}

// leader waits (bounded) for one running, uncut member to lead, and
// returns it.
func (c *cluster) leader(within time.Duration) *member {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, m := range c.ms {
			if e := m.eng.Load(); e != nil && !m.cut.Load() && e.Status().IsLeader() {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", within)
	return nil
}

// propose sends n commands tagged with prefix to m, concurrently, and
// returns the ones acknowledged.
func propose(m *member, prefix string, n int) (acked []string, errs []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmd := fmt.Sprintf("%s-%d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := m.eng.Load().Propose(ctx, []byte(cmd))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			acked = append(acked, cmd)
		}(i)
	}
	wg.Wait()
	return acked, errs
}

// converge waits until every listed member holds every acked command once.
func (c *cluster) converge(acked []string, ids ...uint64) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for {
			has := c.ms[id].sm.has()
			missing := ""
			for _, a := range acked {
				if has[a] != 1 {
					missing = fmt.Sprintf("%s (%d times)", a, has[a])
					break
				}
			}
			if missing == "" {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("member %d: acknowledged command %s", id, missing)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestRaftReplicates(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	acked, errs := propose(l, "a", 300)
	if len(errs) > 0 || len(acked) != 300 {
		t.Fatalf("%d acked, errors %v", len(acked), errs)
	}
	c.converge(acked, 1, 2, 3)
	// Results come back to the right callers: each is the command's index.
	out, err := l.eng.Load().Propose(context.Background(), []byte("last"))
	if err != nil || binary.LittleEndian.Uint64(out) != l.sm.Applied() {
		t.Fatalf("result %v err %v, applied %d", out, err, l.sm.Applied())
	}
	// Batching: 300 concurrent proposals took far fewer log entries.
	if st := l.eng.Load().Status(); st.Commit > 200 {
		t.Errorf("commit index %d for 301 commands: proposals not batched", st.Commit)
	}
	// A follower refuses at once and names the leader.
	for _, m := range c.ms {
		if m == l {
			continue
		}
		_, err := m.eng.Load().Propose(context.Background(), []byte("x"))
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Addr != l.addr {
			t.Errorf("follower %d: %v, want NotLeaderError naming %s", m.id, err, l.addr)
		}
		if err := m.eng.Load().ReadBarrier(context.Background()); !errors.As(err, &nl) {
			t.Errorf("follower %d read barrier: %v", m.id, err)
		}
	}
	if err := l.eng.Load().ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The leader's view: every member, its address, progress and activity
	// (refreshed per tick: polled, bounded).
	var st Status
	for i := 0; i < 50; i++ {
		st = l.eng.Load().Status()
		ok := len(st.Members) == 3 && st.LeaderAddr() == l.addr
		for _, m := range st.Members {
			ok = ok && m.Addr == c.ms[m.ID].addr && m.Active && !m.Learner && m.Match > 0
		}
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("status %+v", st)
}

func TestRaftReadBarrierBatches(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.eng.Load().ReadBarrier(context.Background()); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d read barriers failed", failed.Load())
	}
}

func TestRaftLeaderStopNewLeader(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	acked, _ := propose(l, "before", 50)
	l.stop()
	start := time.Now()
	nl := c.leader(2 * time.Second)
	t.Logf("new leader %d after %v", nl.id, time.Since(start).Round(time.Millisecond))
	more, errs := propose(nl, "after", 50)
	if len(errs) > 0 {
		t.Fatalf("proposals after the change: %v", errs)
	}
	var ids []uint64
	for id, m := range c.ms {
		if m != l {
			ids = append(ids, id)
		}
	}
	c.converge(append(acked, more...), ids...)
	// The old leader comes back as a follower and catches up.
	l.start(t, nil, false, 0)
	c.converge(append(acked, more...), l.id)
}

func TestRaftNoQuorum(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	for _, m := range c.ms {
		if m != l {
			m.stop()
		}
	}
	for _, try := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := l.eng.Load().Propose(ctx, []byte("x")); return err },
		func(ctx context.Context) error { return l.eng.Load().ReadBarrier(ctx) },
	} {
		start := time.Now()
		err := try(context.Background())
		if !errors.Is(err, ErrNoQuorum) {
			t.Errorf("got %v, want ErrNoQuorum", err)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("took %v", d)
		}
	}
}

func TestRaftPartitionedLeaderCannotAck(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	l.cut.Store(true)
	_, err := l.eng.Load().Propose(context.Background(), []byte("lost"))
	if err == nil {
		t.Fatal("a partitioned leader acknowledged a proposal")
	}
	if err := l.eng.Load().ReadBarrier(context.Background()); err == nil {
		t.Fatal("a partitioned leader confirmed a read")
	}
	nl := c.leader(3 * time.Second)
	if nl == l {
		t.Fatal("the partitioned member still leads")
	}
	acked, errs := propose(nl, "majority", 20)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	l.cut.Store(false)
	c.converge(acked, 1, 2, 3)
	for id, m := range c.ms {
		if m.sm.has()["lost"] != 0 {
			t.Errorf("member %d applied the command the partitioned leader refused", id)
		}
	}
}

func TestRaftRestartReplaysTail(t *testing.T) {
	c := newCluster(t, 3, 40)
	l := c.leader(5 * time.Second)
	var all []string
	for i := 0; i < 10; i++ { // many entries: several snapshots
		a, errs := propose(l, fmt.Sprintf("r%d", i), 10)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		all = append(all, a...)
	}
	c.converge(all, 1, 2, 3)
	var f *member
	for _, m := range c.ms {
		if m != l {
			f = m
			break
		}
	}
	f.stop()
	fedBefore := f.sm.fed.Load()
	f.start(t, nil, false, 40)
	time.Sleep(500 * time.Millisecond)
	a, errs := propose(c.leader(5*time.Second), "post", 5)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c.converge(append(all, a...), f.id)
	// The restart fed the state machine only commands it did not hold.
	if got := f.sm.fed.Load() - fedBefore; got != int64(len(a)) {
		t.Errorf("restart fed %d commands to the state machine, want %d (only the new ones)", got, len(a))
	}
	// And the log it read back is bounded by the snapshot interval.
	_, st, err := openWALForTest(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ents) > 80 {
		t.Errorf("log holds %d entries after compaction every 40", len(st.ents))
	}
}

// openWALForTest reads a running member's log without opening it.
func openWALForTest(dir string) (*wal, walState, error) {
	var st walState
	b, err := os.ReadFile(dir + "/" + walName)
	if err != nil {
		return nil, st, err
	}
	_, err = readWAL(bytes.NewReader(b), &st)
	return nil, st, err
}

func TestRaftAddMemberCatchesUpBySnapshot(t *testing.T) {
	defer func(n int) { snapChunk = n }(snapChunk)
	snapChunk = 50 // the image crosses several chunks
	c := newCluster(t, 3, 20)
	l := c.leader(5 * time.Second)
	var all []string
	for i := 0; i < 30; i++ { // one at a time: many entries, so the log is compacted
		a, errs := propose(l, fmt.Sprintf("s%d", i), 1)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		all = append(all, a...)
	}
	n := newMember(t, 4)
	c.ms[4] = n
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.eng.Load().ChangeMember(ctx, MemberChange{Op: AddMember, ID: 4, Addr: n.addr}); err != nil {
		t.Fatal(err)
	}
	n.start(t, nil, true, 20)
	c.converge(all, 4)
	if first, _ := l.eng.Load().storage.FirstIndex(); first <= 1 {
		t.Errorf("the leader's log was not compacted (first index %d): no snapshot was needed", first)
	}
	// It is promoted to a voter once caught up.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := l.eng.Load().Status()
		voter := false
		for _, m := range st.Members {
			voter = voter || (m.ID == 4 && !m.Learner)
		}
		if voter {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member 4 not promoted: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n.eng.Load().Status().LeaderAddr() != l.addr {
		t.Errorf("new member does not know the leader's address: %+v", n.eng.Load().Status())
	}
	a, errs := propose(l, "after-add", 10)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c.converge(a, 1, 2, 3, 4)
}

func TestRaftRemoveMember(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	var gone *member
	for _, m := range c.ms {
		if m != l {
			gone = m
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.eng.Load().ChangeMember(ctx, MemberChange{Op: RemoveMember, ID: gone.id}); err != nil {
		t.Fatal(err)
	}
	if st := l.eng.Load().Status(); len(st.Members) != 2 {
		t.Fatalf("members after remove: %+v", st.Members)
	}
	if err := l.eng.Load().ChangeMember(ctx, MemberChange{Op: RemoveMember, ID: gone.id}); err == nil {
		t.Error("removing a member twice succeeded")
	}
	// Two members left: the removed one's absence does not block.
	gone.stop()
	a, errs := propose(l, "two", 10)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var ids []uint64
	for id := range c.ms {
		if id != gone.id {
			ids = append(ids, id)
		}
	}
	c.converge(a, ids...)
}

func TestWALTornTail(t *testing.T) {
	dir := t.TempDir()
	w, st, err := openWAL(dir)
	if err != nil || !st.empty {
		t.Fatal(err, st.empty)
	}
	_ = w.saveBase(7)
	w.close()
	f, _ := os.OpenFile(dir+"/"+walName, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{9, 0, 0, 0, 1, 2}) // a record cut by a crash
	f.Close()
	w, st, err = openWAL(dir)
	if err != nil || st.base != 7 {
		t.Fatalf("reopen: %v base %d", err, st.base)
	}
	w.close()
	if fi, _ := os.Stat(dir + "/" + walName); fi.Size() != 8+9 {
		t.Errorf("torn tail not cut: %d bytes", fi.Size())
	}
}

// One member is a group too: it leads alone, and a restart keeps its log.
func TestRaftSingleMember(t *testing.T) {
	c := newCluster(t, 1, 10)
	l := c.leader(5 * time.Second)
	a, errs := propose(l, "one", 50)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	l.stop()
	l.start(t, nil, false, 10)
	l = c.leader(5 * time.Second)
	if err := l.eng.Load().ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, errs := propose(l, "two", 5)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c.converge(append(a, b...), 1)
}

// A group bootstrapped on a restored store (state machine ahead of an
// empty log) hands that state to members added later.
func TestRaftSeededStoreReachesNewMembers(t *testing.T) {
	m := newMember(t, 1)
	for i := 0; i < 7; i++ {
		m.sm.Apply(uint64(i+1), [][]byte{[]byte(fmt.Sprintf("restored-%d", i))})
	}
	m.start(t, map[uint64]string{1: m.addr}, false, 0)
	c := &cluster{t: t, ms: map[uint64]*member{1: m}}
	l := c.leader(5 * time.Second)
	a, errs := propose(l, "new", 3)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	n := newMember(t, 2)
	c.ms[2] = n
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.eng.Load().ChangeMember(ctx, MemberChange{Op: AddMember, ID: 2, Addr: n.addr}); err != nil {
		t.Fatal(err)
	}
	n.start(t, nil, true, 0)
	want := append([]string{}, a...)
	for i := 0; i < 7; i++ {
		want = append(want, fmt.Sprintf("restored-%d", i))
	}
	c.converge(want, 1, 2)
	// Restarted, the seeded member neither reapplies nor loses anything.
	m.stop()
	m.start(t, nil, false, 0)
	c.leader(5 * time.Second)
	c.converge(want, 1)
}

func TestRaftFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	sm := &listSM{}
	for _, cfg := range []RaftConfig{
		{ID: 1, Addr: "127.0.0.1:1", Dir: dir, SM: sm, Transport: &member{}},                                             // no peers, no join, empty log
		{ID: 1, Addr: "127.0.0.1:1", Dir: dir, SM: sm, Transport: &member{}, Peers: map[uint64]string{1: "127.0.0.1:2"}}, // own address differs
		{ID: 0, Addr: "127.0.0.1:1", Dir: dir, SM: sm, Transport: &member{}, Peers: map[uint64]string{1: "127.0.0.1:1"}},
		{ID: 2, Addr: "127.0.0.1:1", Dir: dir, SM: &listSM{applied: 3}, Transport: &member{}, Join: true}, // join with a store
	} {
		if e, err := NewRaft(cfg); err == nil {
			e.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// TestRaftRestartMeasure (opt-in: RAFT_RESTART_MEASURE=1) fills a
// one-member log with 10^6 commands (snapshots every 10000, the default)
// and times a restart until a linearizable read succeeds. The toy state
// machine restarts for free: this measures the log's share (replay is
// bounded by the snapshot interval).
func TestRaftRestartMeasure(t *testing.T) {
	if os.Getenv("RAFT_RESTART_MEASURE") == "" {
		t.Skip("set RAFT_RESTART_MEASURE=1")
	}
	m := newMember(t, 1)
	m.sm = &listSM{}
	e, err := NewRaft(RaftConfig{ID: 1, Addr: m.addr, Peers: map[uint64]string{1: m.addr}, Dir: m.dir, SM: m.sm, Transport: m, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m.eng.Store(e)
	c := &cluster{t: t, ms: map[uint64]*member{1: m}}
	c.leader(5 * time.Second)
	start := time.Now()
	const total, par = 1000000, 512
	var wg sync.WaitGroup
	var fails atomic.Int64
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < total; i += par {
				cmd := fmt.Sprintf("create /dir/file-%07d mode=0644 uid=1000 layout=65536x3", i)
				if _, err := e.Propose(context.Background(), []byte(cmd)); err != nil {
					fails.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	t.Logf("%d commands in %v (%d failed)", total, time.Since(start).Round(time.Millisecond), fails.Load())
	m.stop()
	fed := m.sm.fed.Load()
	fi, _ := os.Stat(m.dir + "/" + walName)
	start = time.Now()
	m.start(t, nil, false, 0)
	c.leader(10 * time.Second)
	if err := m.eng.Load().ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart with a %d-byte log: %v to a linearizable read; %d commands re-fed", fi.Size(), time.Since(start).Round(time.Millisecond), m.sm.fed.Load()-fed)
}

// FuzzRaftDecode: the decoders of bytes from the network and the log never
// panic, and what they accept re-encodes to the same bytes.
func FuzzRaftDecode(f *testing.F) {
	r := &Raft{cfg: RaftConfig{ID: 3, Addr: "127.0.0.3:7400"}}
	f.Add(r.encodeMsgs(nil))
	f.Add(encodeBatch(7, [][]byte{[]byte("a"), {}}))
	f.Add(encodeMarker(marker{cmdIndex: 9, addrs: map[uint64]string{1: "127.0.0.1:7400"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if from, addr, ms, err := decodeMsgs(b); err == nil {
			r := &Raft{cfg: RaftConfig{ID: from, Addr: addr}}
			if _, _, ms2, err := decodeMsgs(r.encodeMsgs(ms)); err != nil || len(ms2) != len(ms) {
				t.Fatalf("messages do not round-trip: %v", err)
			}
		}
		if id, cmds, err := decodeBatch(b); err == nil && !bytes.Equal(encodeBatch(id, cmds), b) {
			t.Fatal("batch does not round-trip")
		}
		if m, err := decodeMarker(b); err == nil {
			if _, err := decodeMarker(encodeMarker(m)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRaftThroughputMeasure (opt-in: RAFT_THROUGHPUT_MEASURE=1): commands
// per second through three members over loopback, 512 callers, with the
// toy state machine (the engine's ceiling, not the metadata server's).
func TestRaftThroughputMeasure(t *testing.T) {
	if os.Getenv("RAFT_THROUGHPUT_MEASURE") == "" {
		t.Skip("set RAFT_THROUGHPUT_MEASURE=1")
	}
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	e := l.eng.Load()
	const total, par = 200000, 512
	start := time.Now()
	var wg sync.WaitGroup
	var fails atomic.Int64
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < total; i += par {
				if _, err := e.Propose(context.Background(), []byte(fmt.Sprintf("create /d/f-%07d mode=0644 layout=65536x3", i))); err != nil {
					fails.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	d := time.Since(start)
	t.Logf("3 members: %d commands in %v = %.0f/s (%d failed), %d log entries", total, d.Round(time.Millisecond), float64(total)/d.Seconds(), fails.Load(), e.Status().Commit)
	start = time.Now()
	const reads = 100000
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < reads; i += par {
				if err := e.ReadBarrier(context.Background()); err != nil {
					fails.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	d = time.Since(start)
	t.Logf("3 members: %d read barriers in %v = %.0f/s", reads, d.Round(time.Millisecond), float64(reads)/d.Seconds())
}

// A caller's deadline shorter than the bound ends the wait with an error
// that is both ErrNoQuorum and the deadline.
func TestRaftDeadlineIsNoQuorum(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	for _, m := range c.ms {
		if m != l {
			m.stop()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := l.eng.Load().Propose(ctx, []byte("x"))
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

// Damage inside the log (good records after it) is refused, not cut: the
// records after it were acknowledged.
func TestWALDamageRefused(t *testing.T) {
	dir := t.TempDir()
	w, _, err := openWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.saveBase(1)
	w.saveBase(2)
	w.close()
	path := dir + "/" + walName
	b, _ := os.ReadFile(path)
	b[10] ^= 0xff // inside the first record's data
	os.WriteFile(path, b, 0o644)
	if _, _, err := openWAL(dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged log opened: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(b)) {
		t.Error("damaged log was cut")
	}
}

// PreVote: a follower cut off long enough to time out does not, when it
// comes back, depose the leader (its term does not run ahead).
func TestRaftReturningFollowerDoesNotDisrupt(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	term := l.eng.Load().Status().Term
	var f *member
	for _, m := range c.ms {
		if m != l {
			f = m
			break
		}
	}
	f.cut.Store(true)
	a, errs := propose(l, "while-cut", 10) // the other two still make a majority
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	time.Sleep(2500 * time.Millisecond) // over an election timeout: f campaigns (pre-vote only)
	f.cut.Store(false)
	c.converge(a, f.id)
	st := l.eng.Load().Status()
	if !st.IsLeader() || st.Term != term {
		t.Fatalf("the returning follower disrupted the leader: term %d -> %d, leader %d", term, st.Term, st.Leader)
	}
}

// A leader stopped on purpose hands leadership over: the group goes on
// without waiting for an election timeout.
func TestRaftCloseHandsOver(t *testing.T) {
	c := newCluster(t, 3, 0)
	l := c.leader(5 * time.Second)
	a, _ := propose(l, "before", 10)
	time.Sleep(300 * time.Millisecond) // the leader's view of the others refreshes per tick
	e := l.eng.Swap(nil)
	start := time.Now()
	e.Close()
	var nl *member
	for _, m := range c.ms {
		if en := m.eng.Load(); en != nil && en.Status().IsLeader() {
			nl = m
		}
	}
	if nl == nil {
		t.Fatalf("no leader right after the old one closed (%v)", time.Since(start))
	}
	b, errs := propose(nl, "after", 10)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c.converge(append(a, b...), nl.id)
}

// syncSM "loses" what it applied since its last Sync on a crash, like a
// store committing without fsync.
type syncSM struct {
	listSM
	durable []byte // a snapshot at the last Sync
	syncs   atomic.Int32
}

func (s *syncSM) Sync() error {
	var b bytes.Buffer
	s.Snapshot(&b)
	s.mu.Lock()
	s.durable = b.Bytes()
	s.mu.Unlock()
	s.syncs.Add(1)
	return nil
}

func (s *syncSM) crash() {
	s.mu.Lock()
	d := s.durable
	s.mu.Unlock()
	s.listSM = listSM{}
	if d != nil {
		s.listSM.Restore(bytes.NewReader(d))
	}
}

// A state machine that does not fsync (Syncer) loses its tail in a crash;
// the log gives it back, and compaction never outruns its last Sync.
func TestRaftSyncerCrash(t *testing.T) {
	m := newMember(t, 1)
	sm := &syncSM{}
	start := func(peers map[uint64]string) {
		e, err := NewRaft(RaftConfig{ID: 1, Addr: m.addr, Peers: peers, Dir: m.dir, SM: sm, Transport: m, Log: quiet, SnapshotEvery: 20, KeepEntries: 2})
		if err != nil {
			t.Fatal(err)
		}
		m.eng.Store(e)
	}
	start(map[uint64]string{1: m.addr})
	c := &cluster{t: t, ms: map[uint64]*member{1: m}}
	var all []string
	for i := 0; i < 50; i++ {
		c.leader(5 * time.Second)
		out, err := m.eng.Load().Propose(context.Background(), []byte(fmt.Sprintf("c%d", i)))
		if err != nil || out == nil {
			t.Fatal(err)
		}
		all = append(all, fmt.Sprintf("c%d", i))
	}
	if sm.syncs.Load() == 0 {
		t.Fatal("the log was compacted without syncing the state machine")
	}
	e := m.eng.Swap(nil)
	e.abrupt = true
	e.Close()
	sm.crash()
	if sm.Applied() == 50 {
		t.Fatal("the crash lost nothing: the test proves nothing")
	}
	start(nil)
	c.leader(5 * time.Second)
	if err := m.eng.Load().ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	has := sm.has()
	for _, a := range all {
		if has[a] != 1 {
			t.Fatalf("after the crash %s is there %d times", a, has[a])
		}
	}
}
