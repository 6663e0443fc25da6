package meta

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// A store that commits without fsync goes back to its last checkpoint
// whatever of its later writes reached the disk before a power cut: only
// the later meta pages (the worst case: a commit's meta page ahead of its
// data), only the later data pages (pages of the checkpointed state
// reused by later commits would show here), or all of them. The harness
// of the power-cut tests drops every unsynced write, so these partial
// images are built here from the file's bytes.
func TestDeferredStoreGoesBackToItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.db")
	m, err := openMachineMode(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	next := uint64(1)
	apply := func(cmds ...*command) {
		t.Helper()
		raw := make([][]byte, len(cmds))
		for i, c := range cmds {
			raw[i] = c.encode()
		}
		if _, err := m.Apply(next, raw); err != nil {
			t.Fatal(err)
		}
		next += uint64(len(raw))
	}
	op := func(req proto.Msg) *command { return &command{Kind: cmdReq, Now: int64(next), Req: req} }
	apply(&command{Kind: cmdInit, Now: 1, Cluster: "c"})
	for b := 0; b < 20; b++ {
		var cs []*command
		for i := 0; i < 10; i++ {
			cs = append(cs, op(&proto.Mkdir{Parent: RootIno, Name: fmt.Sprintf("d%03d", b*10+i), Mode: 0o755}))
		}
		apply(cs...)
	}
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	at := m.Applied()
	disk, err := os.ReadFile(path) // everything up to the checkpoint is synced
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := os.ReadFile(path + ckptSuffix)
	if err != nil {
		t.Fatal(err)
	}
	// Later commits free and rewrite most of the tree.
	for b := 0; b < 30; b++ {
		var cs []*command
		for i := 0; i < 5; i++ {
			if n := b*5 + i; n < 150 {
				cs = append(cs, op(&proto.Rmdir{Parent: RootIno, Name: fmt.Sprintf("d%03d", n)}))
			}
			cs = append(cs, op(&proto.Mkdir{Parent: RootIno, Name: fmt.Sprintf("e%03d", b*5+i), Mode: 0o755}))
		}
		apply(cs...)
	}
	later, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := m.db.Info().PageSize
	metaAhead := append(append([]byte(nil), later[:2*ps]...), disk[2*ps:]...)
	dataOnly := append(append([]byte(nil), disk[:2*ps]...), later[2*ps:]...)
	for name, img := range map[string][]byte{"later meta pages only": metaAhead, "later data pages only": dataOnly, "every later write": later} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.db")
			if err := os.WriteFile(p, img, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p+ckptSuffix, ckpt, 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := openMachineMode(p, true)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			if r.Applied() != at {
				t.Errorf("applied %d after the cut, want the checkpoint's %d", r.Applied(), at)
			}
			err = r.view(func(btx *bolt.Tx) error {
				for err := range btx.Check() {
					return err
				}
				tx := tx{Tx: btx}
				for i := 0; i < 200; i++ {
					if _, ok := tx.child(RootIno, fmt.Sprintf("d%03d", i)); !ok {
						return fmt.Errorf("d%03d, made before the checkpoint, is missing", i)
					}
				}
				if _, ok := tx.child(RootIno, "e000"); ok {
					return fmt.Errorf("e000, made after the checkpoint, is there")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("the store after the cut: %v", err)
			}
		})
	}
}

// A store that was replicated (it has a checkpoint) is refused by the
// one-process engine, whose Apply would have to be durable: its latest
// commands may be only in the Raft log.
func TestCheckpointedStoreRefusedUnreplicated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	m, err := openMachineMode(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := openMachine(path); err == nil {
		t.Fatal("a checkpointed store was opened without its log")
	}
	m, err = openMachineMode(path, true)
	if err != nil {
		t.Fatalf("reopening it replicated: %v", err)
	}
	m.close()
}
