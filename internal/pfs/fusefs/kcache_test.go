package fusefs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/prometheus/client_golang/prometheus"
)

// opsOf reads how many FUSE operations of kind op the mount answered.
func opsOf(m *prometheus.Registry, op string) float64 {
	mfs, _ := m.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "corral_mount_operations_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					total += mm.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// eventually polls f (every 10 ms, up to 10 s): names changed elsewhere
// reach the kernel within a bounded time after the writer's call returns.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With a caching client the kernel answers repeated stats and re-reads of
// an unchanged file itself, and a change through another mount or the
// library still reaches it: attributes and content (close-to-open) by the
// time the writer's call returns, names within a bounded time.
func TestKernelCache(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 2)
	a, _ := mountCached(t, fsys.Meta.Addr, fusefs.Options{})
	reg := prometheus.NewRegistry()
	b, _ := mountCached(t, fsys.Meta.Addr, fusefs.Options{Metrics: fusefs.NewMetrics(reg)})
	lib := client.New(fsys.Meta.Addr)
	defer lib.Close()
	ctx := context.Background()

	if err := os.WriteFile(filepath.Join(a, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	bf := filepath.Join(b, "f")
	if got, err := os.ReadFile(bf); err != nil || string(got) != "one" {
		t.Fatalf("B reads %q %v", got, err)
	}
	// The kernel keeps what it was told: no lookup or getattr for stats,
	// no read for a re-read of the unchanged file.
	// (The first answers came before the client's watch ran: the kernel
	// got them with timeout 0.)
	os.Stat(bf)
	lookups, getattrs, reads, flushes := opsOf(reg, "lookup"), opsOf(reg, "getattr"), opsOf(reg, "read"), opsOf(reg, "flush")
	for range 50 {
		if fi, err := os.Stat(bf); err != nil || fi.Size() != 3 {
			t.Fatalf("stat on B: %v %v", fi, err)
		}
	}
	if got, err := os.ReadFile(bf); err != nil || string(got) != "one" {
		t.Fatalf("B re-reads %q %v", got, err)
	}
	if l, g, r := opsOf(reg, "lookup"), opsOf(reg, "getattr"), opsOf(reg, "read"); l != lookups || g != getattrs || r != reads {
		t.Fatalf("the kernel asked the mount: lookups %v -> %v, getattrs %v -> %v, reads %v -> %v", lookups, l, getattrs, g, reads, r)
	}
	// A read-only close has nothing to publish: no flush.
	if f := opsOf(reg, "flush"); f != flushes {
		t.Fatalf("a read-only close flushed: %v -> %v", flushes, f)
	}

	// What B wrote and closed itself, then read, it reads again from its
	// pages.
	own := filepath.Join(b, "own")
	data := make([]byte, 3*4096+100)
	for i := range data {
		data[i] = byte(i % 251)
	}
	if err := os.WriteFile(own, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		reads = opsOf(reg, "read")
		if got, err := os.ReadFile(own); err != nil || string(got) != string(data) {
			t.Fatalf("B reads back %d bytes, %v", len(got), err)
		}
		if r := opsOf(reg, "read"); i == 1 && r != reads {
			t.Fatalf("B's re-read of an unchanged file went to the mount: reads %v -> %v", reads, r)
		}
	}
	if err := os.WriteFile(filepath.Join(a, "own"), []byte("then on A"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(own); err != nil || string(got) != "then on A" {
		t.Fatalf("B reads %q %v after A rewrote its file", got, err)
	}

	// Through mount A: B sees the new size and bytes once A's close returned.
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(bf); err != nil || fi.Size() != 12 {
		t.Fatalf("B stat after A's close: %v %v", fi, err)
	}
	if got, err := os.ReadFile(bf); err != nil || string(got) != "hello, world" {
		t.Fatalf("B reads %q %v after A's close", got, err)
	}
	// The same length rewritten: only the mtime tells the pages are old.
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("HELLO, WORLD"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(bf); err != nil || string(got) != "HELLO, WORLD" {
		t.Fatalf("B reads %q %v after A's same-size rewrite", got, err)
	}

	// Through the library.
	lf, err := lib.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	lf.WriteAt([]byte("from the library"), 0)
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(bf); err != nil || string(got) != "from the library" {
		t.Fatalf("B reads %q %v after the library's close", got, err)
	}

	// Names: a rename away, a file replaced by a rename over it, an unlink.
	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B still finds the renamed-away name", func() error {
		if _, err := os.Stat(bf); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat: %v", err)
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(b, "g")); err != nil || fi.Size() != 16 {
		t.Fatalf("B stat of the new name: %v %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(a, "tmp"), []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(a, "tmp"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	// The kernel of B may still name the old inode; opening it finds it
	// gone and looks the name up again.
	if got, err := os.ReadFile(filepath.Join(b, "g")); err != nil || string(got) != "replaced" {
		t.Fatalf("B reads %q %v after a rename over", got, err)
	}
	if err := lib.Remove(ctx, "/g"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B still finds the unlinked name", func() error {
		if _, err := os.Stat(filepath.Join(b, "g")); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat: %v", err)
		}
		return nil
	})

	// Both mounts create in one directory at once: each mount's own
	// changes come back through its callbacks while it holds the
	// directory for the next create, and nothing waits for ever.
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	for i, m := range []string{a, b} {
		go func() {
			for j := range 100 {
				if err := os.WriteFile(filepath.Join(m, "d", fmt.Sprintf("m%d-%03d", i, j)), []byte("x"), 0o644); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{a, b} {
		eventually(t, "listing of "+m, func() error {
			ents, err := os.ReadDir(filepath.Join(m, "d"))
			if err != nil {
				return err
			}
			if len(ents) != 200 {
				return fmt.Errorf("%d entries, want 200", len(ents))
			}
			return nil
		})
	}
}
