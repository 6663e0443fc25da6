package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

var unreferencedRE = regexp.MustCompile(`(?m)^(\d+) unreferenced objects`)

// Deleting many files queues their objects for removal, done in batches in
// the background. An I/O server killed while files are deleted, and the
// metadata server killed while it reclaims, then both restarted: every
// object of a deleted file is still removed in the end (gc, with no grace,
// finds none unreferenced) and every file kept reads as written.
func TestReclaimAcrossCrashes(t *testing.T) {
	c := newCluster(t, 2)
	cl := client.New(c.metaAddr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	write := func(p string) []byte {
		t.Helper()
		data := make([]byte, 8<<10)
		rand.Read(data)
		f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, d := range []string{"/keep", "/gone"} {
		if err := cl.MkdirAll(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const doomed, kept = 300, 20
	keep := map[string][]byte{}
	for i := range kept {
		p := fmt.Sprintf("/keep/f%d", i)
		keep[p] = write(p)
	}
	for i := range doomed {
		write(fmt.Sprintf("/gone/f%d", i))
	}

	var wg sync.WaitGroup
	errs := make(chan error, doomed)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := cl.Remove(ctx, fmt.Sprintf("/gone/f%d", i)); err != nil {
					errs <- fmt.Errorf("remove f%d: %w", i, err)
				}
			}
		}()
	}
	for i := range doomed {
		if i == doomed/2 {
			c.iods[1].kill() // its objects stay queued
		}
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.meta.kill() // while it reclaims
	c.startMeta().waitReady(t)
	c.startIOD(1).waitReady(t)

	deadline := time.Now().Add(90 * time.Second)
	for {
		out := c.mustFS("gc", "--grace", "0s")
		m := unreferencedRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("gc:\n%s", out)
		}
		if n, _ := strconv.Atoi(m[1]); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects of deleted files left:\n%s", out)
		}
		time.Sleep(time.Second)
	}
	cl2 := client.New(c.metaAddr)
	defer cl2.Close()
	for p, want := range keep {
		got, err := readFile(cl2, p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v", p, len(got), err)
		}
	}
}
