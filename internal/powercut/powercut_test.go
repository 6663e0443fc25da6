package powercut

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func mount(t *testing.T) *Disk {
	t.Helper()
	Need(t)
	d, err := Mount(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func write(t *testing.T, p string, b []byte, syncFile bool) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if syncFile {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, p string) {
	t.Helper()
	d, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, d *Disk) {
	t.Helper()
	if err := d.Cut(); err != nil {
		t.Fatal(err)
	}
}

func wantFile(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after the cut %s holds %d bytes %.16q, want %d bytes %.16q", p, len(got), got, len(want), want)
	}
}

func wantGone(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the cut %s: %v, want it gone", p, err)
	}
}

func TestUnsyncedWriteIsLost(t *testing.T) {
	d := mount(t)
	p := filepath.Join(d.Dir(), "f")
	write(t, p, []byte("durable"), true)
	syncDir(t, d.Dir())
	// Overwrite and grow without fsync: only the old bytes survive.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("VOLATILE-and-longer"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantFile(t, p, []byte("VOLATILE-and-longer"))
	cut(t, d)
	wantFile(t, p, []byte("durable"))
	if s := d.Stats(); s.Cuts != 1 || s.DroppedBytes == 0 {
		t.Errorf("stats %+v: want one cut that dropped bytes", s)
	}
}

func TestSyncedFileWithoutDirEntryIsLost(t *testing.T) {
	d := mount(t)
	sub := filepath.Join(d.Dir(), "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, d.Dir())
	write(t, filepath.Join(sub, "data-synced"), []byte("x"), true) // sub never synced
	cut(t, d)
	wantGone(t, filepath.Join(sub, "data-synced"))
	if _, err := os.Stat(sub); err != nil {
		t.Fatalf("synced directory entry lost: %v", err)
	}
}

func TestNewDirectoryNeedsItsParentSynced(t *testing.T) {
	d := mount(t)
	sub := filepath.Join(d.Dir(), "objects", "ab")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "obj"), []byte("payload"), true)
	syncDir(t, sub)
	syncDir(t, filepath.Join(d.Dir(), "objects")) // but not the root: "objects" itself is not durable
	cut(t, d)
	wantGone(t, filepath.Join(d.Dir(), "objects"))
}

func TestSyncedFileAndEntrySurvive(t *testing.T) {
	d := mount(t)
	sub := filepath.Join(d.Dir(), "objects", "ab")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 70000) // > 1 MiB, unaligned
	write(t, filepath.Join(sub, "obj"), big, true)
	syncDir(t, sub)
	syncDir(t, filepath.Join(d.Dir(), "objects"))
	syncDir(t, d.Dir())
	cut(t, d)
	wantFile(t, filepath.Join(sub, "obj"), big)
	// A second cut with nothing new changes nothing.
	cut(t, d)
	wantFile(t, filepath.Join(sub, "obj"), big)
}

func TestUnsyncedUnlinkComesBack(t *testing.T) {
	d := mount(t)
	p := filepath.Join(d.Dir(), "f")
	write(t, p, []byte("kept"), true)
	syncDir(t, d.Dir())
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	cut(t, d)
	wantFile(t, p, []byte("kept"))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	syncDir(t, d.Dir())
	cut(t, d)
	wantGone(t, p)
}

// The write-temp, fsync, rename, fsync-directory pattern: the rename is
// durable only once the directory is synced; before, the old file stays.
func TestRenameSemantics(t *testing.T) {
	d := mount(t)
	p := filepath.Join(d.Dir(), "state")
	tmp := p + ".tmp"
	write(t, p, []byte("old"), true)
	syncDir(t, d.Dir())

	write(t, tmp, []byte("new"), true)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, p, []byte("new"))
	cut(t, d)
	wantFile(t, p, []byte("old"))
	wantGone(t, tmp) // its creation was never durable either

	write(t, tmp, []byte("new"), true)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	syncDir(t, d.Dir())
	cut(t, d)
	wantFile(t, p, []byte("new"))
	wantGone(t, tmp)

	// A rename across directories syncing only the destination leaves
	// the name in both.
	a, b := filepath.Join(d.Dir(), "a"), filepath.Join(d.Dir(), "b")
	for _, dir := range []string{a, b} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, d.Dir())
	write(t, filepath.Join(a, "f"), []byte("moved"), true)
	syncDir(t, a)
	if err := os.Rename(filepath.Join(a, "f"), filepath.Join(b, "f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, b)
	cut(t, d)
	wantFile(t, filepath.Join(a, "f"), []byte("moved"))
	wantFile(t, filepath.Join(b, "f"), []byte("moved"))
}

func TestTruncateAndPunch(t *testing.T) {
	d := mount(t)
	p := filepath.Join(d.Dir(), "f")
	data := bytes.Repeat([]byte{'a'}, 3*pageSize)
	write(t, p, data, true)
	syncDir(t, d.Dir())
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Shrink then grow: the regrown part reads zeros, not the old bytes.
	if err := f.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*pageSize)
	copy(want, data[:10])
	wantFile(t, p, want)
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 5); err != nil {
		t.Fatal(err)
	}
	clear(want[:5])
	wantFile(t, p, want)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cut(t, d)
	wantFile(t, p, want)
}

func TestFdatasyncAndOSync(t *testing.T) {
	d := mount(t)
	p, q := filepath.Join(d.Dir(), "f"), filepath.Join(d.Dir(), "g")
	write(t, p, nil, true)
	write(t, q, nil, true)
	syncDir(t, d.Dir())
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("datasync"))
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := os.OpenFile(q, os.O_WRONLY|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("o_dsync"))
	g.Close()
	cut(t, d)
	wantFile(t, p, []byte("datasync"))
	wantFile(t, q, []byte("o_dsync"))
}

func TestCutRefusedWhileInUse(t *testing.T) {
	d := mount(t)
	f, err := os.Create(filepath.Join(d.Dir(), "open"))
	if err != nil {
		t.Fatal(err)
	}
	err = d.Cut()
	f.Close()
	if err == nil {
		t.Fatal("a cut with a file still open succeeded")
	}
	// Closed, the cut goes through.
	cut(t, d)
}

func TestMountRefusesUsedBacking(t *testing.T) {
	Need(t)
	b := t.TempDir()
	os.WriteFile(filepath.Join(b, "x"), nil, 0o600)
	if _, err := Mount(t.TempDir(), b); err == nil {
		t.Fatal("mounted over a backing directory that was not empty")
	}
}
