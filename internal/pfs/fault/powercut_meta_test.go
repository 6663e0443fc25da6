package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/powercut"
)

// Metadata operations across power cuts of a Raft group whose stores do
// not fsync per commit (the log is the durable record, the store is
// checkpointed before the log is compacted): small creates with their
// sizes, renames and deletes run under load, snapshots compact the log
// every few dozen commands, and power is cut on one member, then on all
// three with the I/O servers. Every acknowledged operation must be there
// afterwards: each created or renamed file with its bytes under its last
// acknowledged name, each removed or renamed-away name gone.
//
// Short form: two rounds; CORRAL_POWERCUT_ROUNDS and CORRAL_POWERCUT_LOAD
// make it longer.
func TestPowerCutRaftMetaOps(t *testing.T) {
	c := newPCluster(t, 3, 2, "--snapshot-every", "40")
	gone := map[string]bool{} // names whose removal was acknowledged
	for round := range max(2, powerRounds()) {
		stop := c.metaLoad(gone)
		time.Sleep(powerLoad())
		nodes := c.all()
		if round%2 == 0 {
			nodes = []*pnode{c.metas[(round/2)%len(c.metas)]}
		}
		var before, after powercut.Stats
		for _, n := range nodes {
			before = addStats(before, n.disk.Stats())
		}
		c.powerCut(nodes...)
		for _, n := range nodes {
			after = addStats(after, n.disk.Stats())
		}
		time.Sleep(300 * time.Millisecond)
		stop()
		acked, lost, wrong := c.verify()
		back := c.verifyGone(gone)
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.name
		}
		c.mu.Lock()
		t.Logf("round %d, cut %s (dropping %d KiB unsynced): %d files acknowledged (%d lost, %d wrong), %d removed or renamed-away names (%d back)",
			round+1, strings.Join(names, "+"), (after.DroppedBytes-before.DroppedBytes)>>10, acked, lost, wrong, len(gone), back)
		c.mu.Unlock()
		if acked == 0 || len(gone) == 0 {
			t.Fatal("the load acknowledged no create or no removal: it did not run")
		}
		if lost+wrong+back > 0 {
			t.FailNow()
		}
	}
}

// metaLoad runs three writers doing small creates (0 B to 8 KiB), renames
// and deletes of their own files until stopped; c.files holds what must
// exist, gone what must not. An operation that failed has an unknown
// outcome: its names leave both.
func (c *pcluster) metaLoad(gone map[string]bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	cl := client.New(c.list)
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for ctx.Err() == nil {
				c.mu.Lock()
				c.seq++
				n := c.seq
				c.mu.Unlock()
				octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
				var err error
				switch op := mrand.IntN(10); {
				case op < 6 || len(mine) == 0:
					p := fmt.Sprintf("/m%d-%d", g, n)
					data := make([]byte, mrand.IntN(8<<10+1))
					rand.Read(data)
					if err = cl.WriteFile(octx, p, bytes.NewReader(data), 0o644, client.CreateOpts{}, nil); err == nil {
						c.mu.Lock()
						c.files[p] = data
						delete(gone, p)
						c.mu.Unlock()
						mine = append(mine, p)
					}
				case op < 8:
					i := mrand.IntN(len(mine))
					from, to := mine[i], fmt.Sprintf("/m%d-%d-r", g, n)
					err = cl.RenamePath(octx, from, to, false)
					c.mu.Lock()
					if err == nil {
						c.files[to] = c.files[from]
						gone[from] = true
						mine[i] = to
					} else {
						delete(gone, to)
						mine = slices.Delete(mine, i, i+1)
					}
					delete(c.files, from)
					c.mu.Unlock()
				default:
					i := mrand.IntN(len(mine))
					p := mine[i]
					mine = slices.Delete(mine, i, i+1)
					err = cl.Remove(octx, p)
					c.mu.Lock()
					delete(c.files, p)
					if err == nil {
						gone[p] = true
					}
					c.mu.Unlock()
				}
				ocancel()
				if err != nil && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond) // a server is down: do not spin
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait(); cl.Close() }
}

// verifyGone counts the names whose removal was acknowledged that exist
// again (waiting up to a minute for the group to answer).
func (c *pcluster) verifyGone(gone map[string]bool) (back int) {
	c.t.Helper()
	cl := client.New(c.list)
	defer cl.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range gone {
			if !yield(p) {
				return
			}
		}
	}) {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cl.Stat(ctx, p)
			cancel()
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err == nil {
				back++
				if back <= 5 {
					c.t.Errorf("%s was removed (acknowledged) but exists after the cut", p)
				}
				break
			}
			if time.Now().After(deadline) {
				c.t.Errorf("%s: %v", p, err)
				back++
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return back
}
