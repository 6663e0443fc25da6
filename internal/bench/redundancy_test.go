package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// The verifier accepts exactly the content of the last acknowledged write
// or of a write that failed after it.
func TestModelMatches(t *testing.T) {
	m := &model{seq: []uint64{5, 6}, maybe: [][]uint64{nil, {9}}}
	b, tmp := make([]byte, 64), make([]byte, 64)
	fill(b, 5, 0)
	if !m.matches(b, tmp, 0) {
		t.Fatal("block 0 holding write 5 rejected")
	}
	fill(b, 5, 1)
	if m.matches(b, tmp, 1) {
		t.Fatal("block 1 holding write 5's content of block 1 accepted (its last write is 6)")
	}
	fill(b, 9, 1)
	if !m.matches(b, tmp, 1) {
		t.Fatal("block 1 holding the failed write 9 rejected")
	}
	fill(b, 6, 0) // the right write, the wrong block
	if m.matches(b, tmp, 0) {
		t.Fatal("block 0 holding write 6's block 0 accepted")
	}
	if m.matches(make([]byte, 64), tmp, 0) {
		t.Fatal("zeros (a lost block) accepted")
	}
}

func TestHealTime(t *testing.T) {
	type s struct {
		t float64
		n uint64
	}
	at := func(x s) (float64, uint64) { return x.t, x.n }
	kills := []KillEvent{{At: 10, Restart: 12}, {At: 30, Restart: 32}}
	for _, c := range []struct {
		samples []s
		want    float64
	}{
		{[]s{{11, 0}, {13, 0}, {31, 0}, {33, 0}}, 0},              // nothing stale
		{[]s{{11, 5}, {14, 0}, {31, 7}, {35, 7}, {36.5, 0}}, 4.5}, // worst of 2 and 4.5
		{[]s{{11, 5}, {14, 0}, {31, 7}, {35, 7}}, -1},             // never healed after the second
		{[]s{{11, 5}, {20, 3}, {31, 6}, {40, 0}}, 40 - 12},        // a heal outlasting the next kill
		{[]s{{11, 5}, {13, 0}, {13.5, 3}, {20, 0}, {31, 0}}, 1},   // the first time nothing is stale
	} {
		if got := healTime(kills, c.samples, at); got != c.want {
			t.Errorf("healTime(%v) = %v, want %v", c.samples, got, c.want)
		}
	}
}

// With one copy and a server coming back on an empty disk, acknowledged
// writes are gone: the harness must say so (it can fail), and without the
// wipe a kill -9 loses nothing.
func TestRedundancyFindsLostWrites(t *testing.T) {
	testRedundancy(t, 1)
}

// With two copies one server killed, even coming back on an empty disk,
// loses no acknowledged write.
func TestRedundancyReplicasKeepWrites(t *testing.T) {
	testRedundancy(t, 2)
}

func testRedundancy(t *testing.T, replicas int) {
	bin := pfstest.Binary(t)
	for _, wipe := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out := filepath.Join(t.TempDir(), "out")
		res, err := RunRedundancy(ctx, RedundancyConfig{Bin: bin, Dir: t.TempDir(), Out: out, Duration: 8 * time.Second,
			KillMin: 3 * time.Second, KillMax: 3 * time.Second, Down: time.Second, IODs: 3, Replicas: replicas, Workers: 2, Files: 2,
			FileSize: 256 << 10, Block: 4096, Wipe: wipe, HealWait: time.Second, Systems: []string{"corral"}, Seed: 1, Log: io.Discard})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		r := res.Runs[0]
		if len(r.Kills) != 1 || r.Writes == 0 || r.Reads == 0 {
			t.Fatalf("wipe %v: no kills or no load: %+v", wipe, r)
		}
		if replicas == 1 && wipe && (r.Lost == 0 || r.LostBlocks == 0) {
			t.Errorf("one copy, a wiped server: no lost writes reported: %+v", r)
		}
		if (replicas > 1 || !wipe) && (r.Lost != 0 || r.BadReads != 0) {
			t.Errorf("%d copies, wipe %v: lost %d writes, %d bad reads: %v", replicas, wipe, r.Lost, r.BadReads, r.Errors)
		}
		for _, f := range []string{"results.json", "results.md"} {
			if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
				t.Errorf("wipe %v: %s missing: %v", wipe, f, err)
			}
		}
	}
}
