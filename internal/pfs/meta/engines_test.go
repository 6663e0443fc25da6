package meta

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
	"testing"

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

// engines lists the engines every suite test runs over. The Raft engine
// (replog.NewRaft, one member or three over loopback) joins here at merge.
var engines = []engineCase{
	{"single", nil},
	{"replay", replayEngine},
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
