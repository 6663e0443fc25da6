package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"

	"github.com/corral-cluster/corral/internal/replog"
	bolt "go.etcd.io/bbolt"
)

// opener opens a Service on the engine under test (cfg.Engine is set).
type opener func(cfg Config) (*Service, error)

// engineCase is one engine the meta suite runs over. engine returns the
// Config.Engine for a service whose data directory is data (nil: Open's
// default, the single engine).
type engineCase struct {
	name   string
	engine func(t *testing.T, data string) func(replog.StateMachine) (replog.Engine, error)
}

// engines lists the engines every suite test runs over: the one-process
// engine, the replay check of determinism, and Raft with one member and
// with three over loopback (the service under test is member 1).
var engines = []engineCase{
	{"single", nil},
	{"replay", replayEngine},
	{"raft1", raftEngine(1)},
	{"raft3", raftEngine(3)},
}

// raftEngine runs the service under test as member 1 of a Raft group of n
// members over loopback; the others are state machines of their own
// behind real proto servers. Member 1 ticks ten times faster, so it is
// the one elected and the suite's requests find it leading; the
// constructor returns once it leads.
func raftEngine(n int) func(t *testing.T, data string) func(replog.StateMachine) (replog.Engine, error) {
	return func(t *testing.T, data string) func(replog.StateMachine) (replog.Engine, error) {
		return func(sm replog.StateMachine) (replog.Engine, error) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			groupsMu.Lock()
			g := groups[data]
			groupsMu.Unlock()
			if g == nil { // first open: start every member
				var err error
				if g, err = startGroup(t, data, n, quiet); err != nil {
					return nil, err
				}
				groupsMu.Lock()
				groups[data] = g
				groupsMu.Unlock()
				t.Cleanup(func() { groupsMu.Lock(); delete(groups, data); groupsMu.Unlock() })
			}
			// Member 1 (re)starts on its own directory; the others go on.
			self, err := replog.NewRaft(replog.RaftConfig{ID: 1, Addr: g.peers[1], Peers: g.peers, Dir: filepath.Join(data, "raft1"),
				SM: sm, Transport: g.pool, Log: quiet, Tick: 100 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			g.hs[1].eng.Store(self)
			// A reopened member 1 finds another leading (its Close handed
			// leadership over): it takes it back.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := self.TransferLeadership(ctx, 1); err != nil {
				self.Close()
				return nil, err
			}
			for end := time.Now().Add(20 * time.Second); !self.Status().IsLeader(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(end) {
					self.Close()
					return nil, errors.New("member 1 not elected within 20 s")
				}
			}
			return self, nil
		}
	}
}

// raftGroup is a test's Raft group: member 1 is the service under test, so
// a reopened service rejoins the members that went on.
type raftGroup struct {
	peers map[uint64]string
	hs    map[uint64]*raftWiring
	pool  *proto.Pool
	ms    []*machine // members 2..n's state machines
}

var (
	groupsMu sync.Mutex
	groups   = map[string]*raftGroup{} // by the service's data directory
)

// startGroup serves n members on loopback and starts members 2..n, each
// over a state machine of its own; member 1 is started by the caller.
func startGroup(t *testing.T, data string, n int, quiet *slog.Logger) (*raftGroup, error) {
	cred, err := proto.NewSecret()
	if err != nil {
		return nil, err
	}
	sec := proto.Security{Cred: cred}
	g := &raftGroup{peers: map[uint64]string{}, hs: map[uint64]*raftWiring{}, pool: &proto.Pool{Security: sec}}
	t.Cleanup(g.pool.Close)
	for id := uint64(1); id <= uint64(n); id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		h := &raftWiring{}
		srv := &proto.Server{Handler: h, Log: quiet, Security: sec}
		go srv.Serve(l)
		t.Cleanup(srv.Close)
		g.peers[id], g.hs[id] = l.Addr().String(), h
	}
	for id := uint64(2); id <= uint64(n); id++ {
		other, err := openMachine(filepath.Join(data, fmt.Sprintf("member%d.db", id)))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { other.close() })
		g.ms = append(g.ms, other)
		// A slower tick: member 1 is the one elected.
		e, err := replog.NewRaft(replog.RaftConfig{ID: id, Addr: g.peers[id], Peers: g.peers, Dir: filepath.Join(data, fmt.Sprintf("raft%d", id)),
			SM: other, Transport: g.pool, Log: quiet, Tick: time.Second})
		if err != nil {
			return nil, err
		}
		g.hs[id].eng.Store(e)
		t.Cleanup(func() { e.Close() })
	}
	return g, nil
}

// raftWiring passes Raft traffic to a member's engine.
type raftWiring struct{ eng atomic.Pointer[replog.Raft] }

func (w *raftWiring) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	e := w.eng.Load()
	if e == nil {
		return nil, errors.New("member not started")
	}
	if r, err, ok := e.Handle(ctx, req); ok {
		return r, err
	}
	return nil, fmt.Errorf("unexpected %T", req)
}

// forEachEngine runs f once per engine, as a subtest.
func forEachEngine(t *testing.T, f func(t *testing.T, o opener)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			f(t, func(cfg Config) (*Service, error) {
				if e.engine != nil {
					cfg.Engine = e.engine(t, cfg.Data)
				}
				return Open(cfg)
			})
		})
	}
}

// replayEngine is the single engine over a tee: every command is applied
// to the service's state machine and to a shadow one (DATA/shadow.db), and
// their replies must be identical; at Close, so must every key and value
// of the two stores. That proves Apply deterministic: what it did depends
// on the state and the command only.
func replayEngine(t *testing.T, data string) func(replog.StateMachine) (replog.Engine, error) {
	return func(sm replog.StateMachine) (replog.Engine, error) {
		shadow, err := openMachine(filepath.Join(data, "shadow.db"))
		if err != nil {
			return nil, err
		}
		tee := &teeMachine{t: t, a: sm.(*machine), b: shadow}
		return &replayed{Single: replog.NewSingle(tee, "127.0.0.1:0"), tee: tee}, nil
	}
}

type teeMachine struct {
	t    *testing.T
	mu   sync.Mutex
	a, b *machine
}

func (m *teeMachine) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ra, err := m.a.Apply(first, cmds)
	if err != nil {
		return nil, err
	}
	rb, err := m.b.Apply(first, cmds)
	if err != nil {
		m.t.Errorf("replay: shadow failed where the store applied commands %d..: %v", first, err)
		return ra, nil
	}
	for i := range ra {
		if !bytes.Equal(ra[i], rb[i]) {
			m.t.Errorf("replay: command %d: replies differ:\n%x\n%x", first+uint64(i), ra[i], rb[i])
		}
	}
	return ra, nil
}

func (m *teeMachine) Applied() uint64 { return m.a.Applied() }

func (m *teeMachine) Snapshot(w io.Writer) error { return m.a.Snapshot(w) }

func (m *teeMachine) Restore(r io.Reader) error {
	var buf bytes.Buffer
	if err := m.a.Restore(io.TeeReader(r, &buf)); err != nil {
		return err
	}
	return m.b.Restore(&buf)
}

type replayed struct {
	*replog.Single
	tee *teeMachine
}

// Close compares the two stores once nothing applies any more.
func (r *replayed) Close() error {
	err := r.Single.Close()
	a, b := dump(r.tee.t, r.tee.a), dump(r.tee.t, r.tee.b)
	if a != b {
		r.tee.t.Errorf("replay: the stores differ after the same commands:\n%s\n----\n%s", a, b)
	}
	r.tee.b.close()
	return err
}

// dump lists every bucket, key and value of a store, in order.
func dump(t *testing.T, m *machine) string {
	var lines []string
	err := m.view(func(btx *bolt.Tx) error {
		return btx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				lines = append(lines, fmt.Sprintf("%s %x=%x", name, k, v))
				return nil
			})
		})
	})
	if err != nil {
		t.Errorf("dump store: %v", err)
	}
	sort.Strings(lines)
	return fmt.Sprint(lines)
}
