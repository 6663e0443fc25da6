package fusefs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// mountCached mounts with a caching client (as corral mount does) and
// returns the mount point and the client.
func mountCached(t testing.TB, meta string, o fusefs.Options) (string, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	cl := client.New(meta, client.WithCache())
	srv, err := fusefs.Mount(dir, cl, o)
	if err != nil {
		cl.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		cl.Close()
	})
	return dir, cl
}

// Two mounts of one file system, each with its client cache and kernel
// timeouts 0: what one writes and closes, the other sees at once, while
// its repeated stats cost no metadata round trip.
func TestCacheAcrossMounts(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 2)
	a, _ := mountCached(t, fsys.Meta.Addr, fusefs.Options{})
	b, cb := mountCached(t, fsys.Meta.Addr, fusefs.Options{})
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(b, "f")); err != nil || fi.Size() != 3 {
		t.Fatalf("stat on B: %v %v", fi, err)
	}
	before := cb.CacheStats()
	for range 50 {
		if _, err := os.Stat(filepath.Join(b, "f")); err != nil {
			t.Fatal(err)
		}
	}
	if after := cb.CacheStats(); after.Misses != before.Misses {
		t.Fatalf("B's stats went to meta: before %+v after %+v", before, after)
	}
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(b, "f")); err != nil || string(got) != "hello, world" {
		t.Fatalf("B reads %q %v after A's close", got, err)
	}
	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B stat of a renamed-away name: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(b, "g")); err != nil || fi.Size() != 12 {
		t.Fatalf("B stat of the new name: %v %v", fi, err)
	}
}

// BenchmarkStat measures stat(2) through FUSE (kernel timeouts 0) with and
// without the client cache.
func BenchmarkStat(b *testing.B) {
	lab.Need(b, lab.FUSE)
	fsys := pfstest.Start(b, 1)
	for _, cached := range []bool{false, true} {
		name := "meta"
		if cached {
			name = "cache"
		}
		b.Run(name, func(b *testing.B) {
			var dir string
			if cached {
				dir, _ = mountCached(b, fsys.Meta.Addr, fusefs.Options{})
			} else {
				dir = b.TempDir()
				cl := client.New(fsys.Meta.Addr)
				srv, err := fusefs.Mount(dir, cl, fusefs.Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { srv.Unmount(); cl.Close() })
			}
			p := filepath.Join(dir, "d", "f")
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			b.ResetTimer()
			for range b.N {
				if _, err := os.Stat(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
