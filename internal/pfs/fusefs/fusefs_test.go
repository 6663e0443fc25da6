package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func needFUSE(t *testing.T) {
	t.Helper()
	lab.Need(t, lab.FUSE)
}

// mount mounts the file system at a fresh directory for the test's life.
func mount(t *testing.T, meta string, o fusefs.Options) string {
	t.Helper()
	dir := t.TempDir()
	cl := client.New(meta)
	srv, err := fusefs.Mount(dir, cl, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		cl.Close()
	})
	return dir
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	lab.Need(t, lab.Tool(name))
	// Change directory in the shell, not in os/exec: a vfork child of this
	// process must not block on the FUSE server this process runs.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestTools(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	src := t.TempDir()
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 20; i++ {
		sub := filepath.Join(src, fmt.Sprintf("d%d", i%4))
		os.MkdirAll(sub, 0o755)
		b := make([]byte, r.IntN(300<<10))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i)), b, 0o644)
	}
	os.Symlink("d0/f0", filepath.Join(src, "link"))

	t.Run("mkdir cp ls mv rm", func(t *testing.T) {
		run(t, mnt, "mkdir", "-p", "a/b/c")
		run(t, mnt, "cp", "-a", src, "a/b/c/tree")
		run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(mnt, "a/b/c/tree"))
		if out := run(t, mnt, "ls", "a/b/c/tree"); !strings.Contains(out, "d3") || !strings.Contains(out, "link") {
			t.Fatalf("ls: %q", out)
		}
		run(t, mnt, "mv", "a/b/c/tree", "moved")
		run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(mnt, "moved"))
		run(t, mnt, "rm", "-r", "moved", "a")
		if out := run(t, mnt, "ls", "-A"); strings.TrimSpace(out) != "" {
			t.Fatalf("after rm -r: %q", out)
		}
	})
	t.Run("dd", func(t *testing.T) {
		run(t, mnt, "dd", "if=/dev/urandom", "of=big", "bs=1M", "count=20", "conv=fsync", "status=none")
		run(t, mnt, "dd", "if=big", "of="+filepath.Join(src, "big"), "bs=64k", "status=none")
		run(t, "/", "cmp", filepath.Join(mnt, "big"), filepath.Join(src, "big"))
		run(t, mnt, "dd", "if=/dev/zero", "of=big", "bs=4k", "count=3", "seek=5", "conv=notrunc", "status=none")
		if fi, _ := os.Stat(filepath.Join(mnt, "big")); fi.Size() != 20<<20 {
			t.Fatalf("notrunc write changed size to %d", fi.Size())
		}
	})
	t.Run("tar", func(t *testing.T) {
		run(t, "/", "tar", "-C", src, "-czf", filepath.Join(mnt, "t.tgz"), ".")
		run(t, mnt, "mkdir", "x")
		run(t, mnt, "tar", "-C", "x", "-xzf", "t.tgz")
		run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(mnt, "x"))
	})
	t.Run("git", func(t *testing.T) {
		run(t, mnt, "mkdir", "repo")
		dir := filepath.Join(mnt, "repo")
		run(t, dir, "git", "init", "-q")
		os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644)
		run(t, dir, "git", "add", "README")
		run(t, dir, "git", "commit", "-qm", "first")
		os.WriteFile(filepath.Join(dir, "README"), []byte("hello again\n"), 0o644)
		run(t, dir, "git", "commit", "-qam", "second")
		if out := run(t, dir, "git", "log", "--oneline"); strings.Count(out, "\n") != 2 {
			t.Fatalf("git log: %q", out)
		}
		run(t, dir, "git", "fsck", "--no-progress")
	})
	t.Run("sqlite3", func(t *testing.T) {
		db := filepath.Join(mnt, "test.db")
		var sql strings.Builder
		sql.WriteString("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\nBEGIN;\n")
		for i := 0; i < 2000; i++ {
			fmt.Fprintf(&sql, "INSERT INTO t(v) VALUES('%s');\n", strings.Repeat("x", i%200))
		}
		sql.WriteString("COMMIT;\nDELETE FROM t WHERE k % 3 = 0;\nVACUUM;\n")
		os.WriteFile(filepath.Join(src, "load.sql"), []byte(sql.String()), 0o644)
		run(t, "/", "sqlite3", db, ".read "+filepath.Join(src, "load.sql"))
		if out := run(t, "/", "sqlite3", db, "SELECT count(*) FROM t; PRAGMA integrity_check;"); out != "1334\nok\n" {
			t.Fatalf("sqlite3: %q", out)
		}
	})
	t.Run("rename into place", func(t *testing.T) {
		p := filepath.Join(mnt, "doc.txt")
		os.WriteFile(p, []byte("version 1\n"), 0o644)
		old, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		// What editors do: write a temporary file, fsync, rename over.
		tmp := filepath.Join(mnt, ".doc.txt.swp")
		f, _ := os.Create(tmp)
		f.WriteString("version 2\n")
		f.Sync()
		f.Close()
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != "version 2\n" {
			t.Fatalf("after rename: %q", b)
		}
		// The old descriptor still reads the old content.
		b := make([]byte, 20)
		n, _ := old.ReadAt(b, 0)
		if string(b[:n]) != "version 1\n" {
			t.Fatalf("old descriptor reads %q", b[:n])
		}
	})
	t.Run("unlink while open", func(t *testing.T) {
		p := filepath.Join(mnt, "tmpfile")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("still readable")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat after unlink: %v", err)
		}
		b := make([]byte, 14)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != "still readable" {
			t.Fatalf("read after unlink: %q %v", b, err)
		}
		f.Close()
		// The kernel sends RELEASE after close(2) returns: allow it a moment.
		hidden := func() (names []string) {
			ents, _ := os.ReadDir(mnt)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".corral-hidden") {
					names = append(names, e.Name())
				}
			}
			return names
		}
		for end := time.Now().Add(3 * time.Second); len(hidden()) > 0 && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		if h := hidden(); len(h) > 0 {
			t.Fatalf("hidden files %v left after close", h)
		}
	})
}

// TestCloseToOpen: what one mount (or the library) wrote and closed, another
// mount sees on its next open; also with caching clients, whose kernels
// keep attributes, names and pages until a callback drops them.
func TestCloseToOpen(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 2)
	t.Run("uncached", func(t *testing.T) {
		testCloseToOpen(t, fsys.Meta.Addr, "u", mount(t, fsys.Meta.Addr, fusefs.Options{}), mount(t, fsys.Meta.Addr, fusefs.Options{}))
	})
	t.Run("kernel-cache", func(t *testing.T) {
		a, _ := mountCached(t, fsys.Meta.Addr, fusefs.Options{})
		b, _ := mountCached(t, fsys.Meta.Addr, fusefs.Options{})
		testCloseToOpen(t, fsys.Meta.Addr, "k", a, b)
	})
}

func testCloseToOpen(t *testing.T, meta, p, a, b string) {
	for i := 0; i < 5; i++ {
		want := strings.Repeat(fmt.Sprint(i), 1000*(i+1))
		if err := os.WriteFile(filepath.Join(a, p+"shared"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b, p+"shared"))
		if err != nil || string(got) != want {
			t.Fatalf("round %d: mount b read %d bytes (%v), want %d", i, len(got), err, len(want))
		}
	}
	cl := client.New(meta)
	defer cl.Close()
	ctx := context.Background()
	f, err := cl.CreatePath(ctx, "/"+p+"from-lib", 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("library data"), 0)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b, p+"from-lib")); string(got) != "library data" {
		t.Fatalf("mount read %q", got)
	}
	os.WriteFile(filepath.Join(a, p+"to-lib"), []byte("mount data"), 0o600)
	g, err := cl.Open(ctx, "/"+p+"to-lib")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, _ := g.ReadAt(buf, 0); string(buf[:n]) != "mount data" {
		t.Fatalf("library read %q", buf[:n])
	}
}

func TestReadOnly(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	rw := mount(t, fsys.Meta.Addr, fusefs.Options{})
	os.WriteFile(filepath.Join(rw, "f"), []byte("x"), 0o644)
	ro := mount(t, fsys.Meta.Addr, fusefs.Options{ReadOnly: true})
	if b, err := os.ReadFile(filepath.Join(ro, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read on read-only mount: %q %v", b, err)
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(ro, "g"), nil, 0o644),
		os.WriteFile(filepath.Join(ro, "f"), []byte("y"), 0o644),
		os.Mkdir(filepath.Join(ro, "d"), 0o755),
		os.Remove(filepath.Join(ro, "f")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("write on read-only mount: %v, want EROFS", err)
		}
	}
}

// TestRandomOperations applies one random sequence of operations to the
// mount and to a local directory, and compares the trees.
func TestRandomOperations(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	local := t.TempDir()
	r := rand.New(rand.NewPCG(11, 12))
	names := []string{"a", "b", "c", "d/x", "d/y", "e/f/g", "e/h"}
	for _, root := range []string{mnt, local} {
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.MkdirAll(filepath.Join(root, "e/f"), 0o755)
	}
	errText := func(err error) string {
		var pe *os.PathError
		var le *os.LinkError
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &pe):
			return pe.Err.Error()
		case errors.As(err, &le):
			return le.Err.Error()
		}
		return err.Error()
	}
	for step := 0; step < 400; step++ {
		name := names[r.IntN(len(names))]
		other := names[r.IntN(len(names))]
		op := r.IntN(6)
		off := int64(r.IntN(300 << 10))
		data := make([]byte, r.IntN(100<<10))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		size := int64(r.IntN(200 << 10))
		var results [2]string
		for i, root := range []string{mnt, local} {
			p, q := filepath.Join(root, name), filepath.Join(root, other)
			var err error
			switch op {
			case 0, 1: // write at an offset
				var f *os.File
				if f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
					_, err = f.WriteAt(data, off)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
			case 2:
				err = os.Truncate(p, size)
			case 3:
				err = os.Rename(p, q)
			case 4:
				err = os.Remove(p)
			case 5: // overwrite whole
				err = os.WriteFile(p, data, 0o644)
			}
			results[i] = errText(err)
		}
		if results[0] != results[1] {
			t.Fatalf("step %d op %d %s %s: mount says %q, local says %q", step, op, name, other, results[0], results[1])
		}
	}
	// Files replaced while open are orphans now, never visible; mounts
	// before them hid such files under .corral-hidden-*: none may show.
	waitNoHidden(t, mnt)
	if a, b := snapshot(t, mnt), snapshot(t, local); a != b {
		t.Fatalf("trees differ:\nmount:\n%s\nlocal:\n%s", a, b)
	}
}

func waitNoHidden(t *testing.T, root string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		found := false
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), ".corral-hidden-") {
				found = true
			}
			return nil
		})
		if !found {
			return
		}
	}
	t.Error("hidden files of closed descriptors still there after 5 s")
}

func snapshot(t *testing.T, root string) string {
	var lines []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%s %d %x", rel, len(b), hash(b)))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func hash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// TestMountCommand runs the real `corral mount`: SIGTERM unmounts cleanly; a
// kill -9 leaves a dead mount that --unmount clears.
func TestMountCommand(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	bin := pfstest.Binary(t)
	dir := t.TempDir()
	logs := t.TempDir()
	mounted := func() bool {
		b, _ := os.ReadFile("/proc/mounts")
		return bytes.Contains(b, []byte(" "+dir+" "))
	}
	t.Cleanup(func() {
		if mounted() {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	p, err := launch.Start(context.Background(), "mount", bin, filepath.Join(logs, "m1.log"), "mount", "--meta", fsys.Meta.Addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("corral mount after SIGTERM: %v", err)
	}
	if mounted() {
		t.Fatal("still mounted after SIGTERM")
	}
	p, err = launch.Start(context.Background(), "mount", bin, filepath.Join(logs, "m2.log"), "mount", "--meta", fsys.Meta.Addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	// statfs, not stat: the kernel keeps the root's attributes (its cache
	// of this file system) and may answer a stat without asking anyone.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dir, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after kill -9: statfs says %v, want a dead mount", err)
	}
	out, err := exec.Command(bin, "mount", "--meta", fsys.Meta.Addr, dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--unmount") {
		t.Fatalf("mounting over a dead mount: %v %s (want advice to use --unmount)", err, out)
	}
	if out, err := exec.Command(bin, "mount", "--unmount", dir).CombinedOutput(); err != nil {
		t.Fatalf("--unmount: %v %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for mounted() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if mounted() {
		t.Fatal("still mounted after --unmount")
	}
}
