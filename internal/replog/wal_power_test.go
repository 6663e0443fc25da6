package replog

import (
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/corral-cluster/corral/internal/powercut"
)

// A log acknowledged in a new directory survives a power cut (strict
// POSIX: the directory's own entry and the log's must be synced), also
// after a compaction rewrote it.
func TestWALSurvivesPowerCut(t *testing.T) {
	powercut.Need(t)
	d, err := powercut.Mount(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dir := filepath.Join(d.Dir(), "raft") // meta's DATA/raft, made by the log
	w, _, err := openWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	ents := []raftpb.Entry{{Term: 1, Index: 1, Data: []byte("a")}, {Term: 1, Index: 2, Data: []byte("b")}}
	if err := w.save(raftpb.Snapshot{}, ents, raftpb.HardState{Term: 1, Commit: 2}, true); err != nil {
		t.Fatal(err)
	}
	w.close()
	if err := d.Cut(); err != nil {
		t.Fatal(err)
	}
	w, st, err := openWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ents) != 2 || st.hs.Commit != 2 {
		t.Fatalf("after a cut the log holds %d entries, commit %d; want the 2 acknowledged, commit 2", len(st.ents), st.hs.Commit)
	}
	// Compaction, then an append to the rewritten file.
	snap := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 1, Term: 1}}
	if err := w.rewrite(snap, raftpb.HardState{Term: 1, Commit: 2}, ents[1:]); err != nil {
		t.Fatal(err)
	}
	if err := w.save(raftpb.Snapshot{}, []raftpb.Entry{{Term: 1, Index: 3, Data: []byte("c")}}, raftpb.HardState{Term: 1, Commit: 3}, true); err != nil {
		t.Fatal(err)
	}
	w.close()
	if err := d.Cut(); err != nil {
		t.Fatal(err)
	}
	w, st, err = openWAL(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.close()
	if len(st.ents) != 2 || st.ents[1].Index != 3 || st.snap.Metadata.Index != 1 {
		t.Fatalf("after compaction and a cut: snapshot at %d, %d entries; want snapshot 1, entries 2 and 3", st.snap.Metadata.Index, len(st.ents))
	}
}
