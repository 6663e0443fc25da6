package fusefs_test

import (
	"bytes"
	"errors"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"golang.org/x/sys/unix"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func slogTo(w *lockedBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// captureStdLog collects what the standard logger prints (go-fuse's
// default) for the test's life.
func captureStdLog(t *testing.T) *lockedBuffer {
	var b lockedBuffer
	log.SetOutput(&b)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	return &b
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// TestUnlinkOpenOrphan: a file unlinked while open shows nlink 0, leaves no
// name behind, its directory can be removed, and it stays usable until the
// last close; then its inode is gone.
func TestUnlinkOpenOrphan(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 2)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	d := filepath.Join(mnt, "d")
	os.Mkdir(d, 0o755)
	p := filepath.Join(d, "f")
	if err := os.WriteFile(p, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st0 unix.Stat_t
	unix.Fstat(int(f.Fd()), &st0)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Fatalf("fstat after unlink: nlink %d, %v", st.Nlink, err)
	}
	if ents, _ := os.ReadDir(d); len(ents) != 0 {
		t.Fatalf("directory still lists %v", ents[0].Name())
	}
	if err := os.Remove(d); err != nil {
		t.Fatalf("rmdir of the emptied directory: %v", err)
	}
	f.WriteAt([]byte(" and more"), 4)
	b := make([]byte, 20)
	n, _ := f.ReadAt(b, 0)
	if string(b[:n]) != "kept and more" {
		t.Fatalf("read after unlink: %q", b[:n])
	}
	f.Close()
	// The last close frees it (RELEASE comes just after close returns).
	cl := clientOf(t, fsys.Meta.Addr)
	waitFor(t, "the orphan to be freed", func() bool {
		_, err := cl.GetAttr(t.Context(), st0.Ino)
		return errors.Is(err, syscall.ENOENT)
	})
}

// TestModeZeroAsUser: mode 0000 is kept and enforced for other users; root
// still reads.
func TestModeZeroAsUser(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	mnt := publicDir(t, "corral-mode-")
	mountAt(t, mnt, fsys.Meta.Addr)
	helper := helperBinary(t, publicDir(t, "corral-bin-"))
	p := filepath.Join(mnt, "secret")
	os.WriteFile(p, []byte("s"), 0o644)
	os.Chmod(p, 0)
	os.Mkdir(filepath.Join(mnt, "d"), 0o755)
	os.WriteFile(filepath.Join(mnt, "d", "x"), nil, 0o644)
	os.Chmod(filepath.Join(mnt, "d"), 0)
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0 {
		t.Fatalf("mode after chmod 0: %v", fi.Mode())
	}
	if got := asUser(t, helper, "open-r", p); got != "EACCES" {
		t.Errorf("user opening a mode 0000 file: %s, want EACCES", got)
	}
	if got := asUser(t, helper, "stat", filepath.Join(mnt, "d", "x")); got != "EACCES" {
		t.Errorf("user entering a mode 0000 directory: %s, want EACCES", got)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "s" {
		t.Errorf("root reading a mode 0000 file: %q %v", b, err)
	}
}

// TestNameTooLong: a name over 255 bytes is ENAMETOOLONG, also for lookups.
func TestNameTooLong(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	p := filepath.Join(mnt, strings.Repeat("x", 256))
	for what, err := range map[string]error{
		"stat":   func() error { _, err := os.Stat(p); return err }(),
		"create": os.WriteFile(p, nil, 0o644),
		"mkdir":  os.Mkdir(p, 0o755),
		"unlink": os.Remove(p),
	} {
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s: %v, want ENAMETOOLONG", what, err)
		}
	}
}

// TestDirFsync: fsync and fdatasync on a directory succeed.
func TestDirFsync(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 1)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	os.WriteFile(filepath.Join(mnt, "a"), []byte("x"), 0o644)
	os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "b"))
	d, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Fsync(int(d.Fd())); err != nil {
		t.Errorf("fsync of a directory: %v", err)
	}
	if err := unix.Fdatasync(int(d.Fd())); err != nil {
		t.Errorf("fdatasync of a directory: %v", err)
	}
}

func clientOf(t *testing.T, meta string) *client.Client {
	cl := client.New(meta)
	t.Cleanup(cl.Close)
	return cl
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// mountAt mounts at dir (which the caller made) for the test's life.
func mountAt(t *testing.T, dir, meta string) {
	t.Helper()
	cl := client.New(meta)
	srv, err := fusefs.Mount(dir, cl, fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		cl.Close()
	})
	os.Chmod(dir, 0o755)
}
