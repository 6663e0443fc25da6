package fault

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
)

// objectBytes sums the sizes of the objects in I/O server i's directory.
func (c *cluster) objectBytes(i int) int64 {
	var n int64
	filepath.Walk(filepath.Join(c.iodDir(i), "objects"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Name() != "STORE" {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// A full I/O server: a write that hits ENOSPC fails the put (and leaves no
// file and, once reclaimed, no objects); once below the reserve the server
// gets no new files, and a stripe count over the others is an error.
func TestFullDisk(t *testing.T) {
	c := smallDiskCluster(t)
	small := c.serverID(2)
	// One copy: with two, a copy that hits ENOSPC is marked stale and the
	// write goes on (TestFullCopyDegrades).
	c.mustFS("layout", "set", "/", "--replicas", "1")

	// 5 MiB per server: more than the small server holds.
	out, rc := c.put("/toobig", 15<<20, "--stripe-count", "3")
	if rc == 0 || !strings.Contains(out, "no space left on device") {
		t.Fatalf("put over a full server: exit %d: %s", rc, out)
	}
	if out := c.mustFS("ls", "/"); strings.TrimSpace(out) != "" {
		t.Fatalf("failed put left something behind:\n%s", out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 3; i++ {
		for c.objectBytes(i) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("objects of the failed put still on iod%d: %d bytes", i+1, c.objectBytes(i))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	c.waitState(small, "up")                        // its space back, as the next heartbeat reports
	c.mustPut("/a", 6<<20, "--stripe-count", "all") // 2 MiB each: the small one half full
	c.mustPut("/b", 3<<20, "--stripe-count", "all") // 1 MiB more: 25 % free, under the 30 % reserve
	c.waitState(small, "full")
	for _, p := range []string{"/c", "/d"} {
		c.mustPut(p, 1<<20)
		if ids := c.servers(p); slices.Contains(ids, small) || len(ids) != 2 {
			t.Fatalf("%s placed on %v; server %d is full", p, ids, small)
		}
	}
	out, rc = c.put("/e", 1<<20, "--stripe-count", "3")
	if rc == 0 || !strings.Contains(out, "only 2 I/O servers are usable") {
		t.Fatalf("stripe count 3 with a full server: exit %d: %s", rc, out)
	}
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable: %v", failed)
	}
}

// smallDiskCluster is meta (--reserve 30) and three I/O servers on tmpfs
// data directories of 64, 64 and 4 MiB; it skips without root.
func smallDiskCluster(t *testing.T) *cluster {
	lab.Need(t, lab.Root) // mounts small tmpfs data directories
	c := &cluster{t: t, dir: t.TempDir(), metaAddr: freeAddr(t), metaArgs: []string{"--reserve", "30"}, files: map[string][]byte{}}
	for i, size := range []string{"64m", "64m", "4m"} {
		dir := c.iodDir(i)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
			lab.Need(t, lab.Err("mount tmpfs", err))
		}
		t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	}
	c.startMeta().waitReady(t)
	for i := range 3 {
		c.iodAddrs = append(c.iodAddrs, freeAddr(t))
		c.iods = append(c.iods, nil)
		c.startIOD(i).waitReady(t)
	}
	return c
}

// With two copies, a copy whose disk fills up (ENOSPC) is marked stale and
// the write goes on with the other: the put succeeds, reads back, and the
// full server shows stale bytes until it has room (GlusterFS AFR does the
// same: the brick that failed is healed later).
func TestFullCopyDegrades(t *testing.T) {
	c := smallDiskCluster(t)
	c.mustPut("/big", 15<<20, "--stripe-count", "3", "--replicas", "2")
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable: %v", failed)
	}
	small := c.serverID(2)
	deadline := time.Now().Add(10 * time.Second)
	for c.figures()[small].Stale == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no stale bytes on the full server %d:\n%s", small, c.mustFS("servers"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Objects no file references are found by `fs gc` (a dry run by default),
// removed by `fs gc --apply`, and swept by an I/O server when it starts;
// referenced ones stay.
func TestGCRemovesUnreferencedObjects(t *testing.T) {
	c := newCluster(t, 2)
	c.mustPut("/keep", 300<<10)
	old := time.Now().Add(-2 * time.Hour)
	orphan := func(i int, name string) string {
		p := filepath.Join(c.iodDir(i), "objects", "e7", name) // 999 = 0x3e7, 743 = 0x2e7
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
		return p
	}
	// Referenced objects are old too: age alone must not condemn them.
	for i := range 2 {
		filepath.Walk(filepath.Join(c.iodDir(i), "objects"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				os.Chtimes(p, old, old)
			}
			return nil
		})
	}
	o1, o2 := orphan(0, "999"), orphan(0, "999.1")

	out := c.mustFS("gc")
	if !strings.Contains(out, "2 unreferenced objects") || !strings.Contains(out, "dry run") {
		t.Fatalf("gc dry run:\n%s", out)
	}
	for _, p := range []string{o1, o2} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("dry run removed %s", p)
		}
	}
	out = c.mustFS("gc", "--apply")
	if !strings.Contains(out, "removed 2 objects") {
		t.Fatalf("gc --apply:\n%s", out)
	}
	for _, p := range []string{o1, o2} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("gc --apply left %s", p)
		}
	}
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("gc broke a file: %v", failed)
	}

	// The start-up sweep.
	o3 := orphan(1, "743")
	c.iods[1].stop()
	iod := c.startIOD(1, "--gc-grace", "1m")
	iod.waitReady(t)
	iod.waitLog(t, "swept objects no file references", 20*time.Second)
	if _, err := os.Stat(o3); err == nil {
		t.Fatal("sweep left the orphan")
	}
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("sweep broke a file: %v", failed)
	}
}
