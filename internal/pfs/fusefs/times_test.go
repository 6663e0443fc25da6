package fusefs_test

// File times on the mount, against ext4 (a directory on the local disk) as
// reference: every check runs on both and must hold on both.

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"golang.org/x/sys/unix"
)

// slack allows for the kernel's coarse clock: ext4 stamps a write with the
// time of the last tick, which may be a few milliseconds before a
// time.Now() taken just before the call.
const slack = 20 * time.Millisecond

type times struct{ atime, mtime, ctime int64 }

func lstatTimes(t *testing.T, p string) times {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return times{st.Atim.Nano(), st.Mtim.Nano(), st.Ctim.Nano()}
}

func fmtNs(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000000000") }

// window is the interval around an operation within which a time it sets
// must fall.
type window struct{ lo, hi int64 }

func during(fn func()) window {
	lo := time.Now().Add(-slack).UnixNano()
	fn()
	return window{lo, time.Now().Add(slack).UnixNano()}
}

func (w window) has(ns int64) bool { return ns >= w.lo && ns <= w.hi }

func (w window) String() string { return "[" + fmtNs(w.lo) + ", " + fmtNs(w.hi) + "]" }

// onBoth runs check on the mount and on ext4, each in a fresh directory.
func onBoth(t *testing.T, mnt string, check func(t *testing.T, dir string)) {
	local := t.TempDir()
	for _, c := range []struct{ name, root string }{{"mount", mnt}, {"ext4", local}} {
		dir, err := os.MkdirTemp(c.root, "t")
		if err != nil {
			t.Fatal(err)
		}
		t.Run(c.name, func(t *testing.T) { check(t, dir) })
	}
}

// oldTree makes a tree whose files, directories and symlink carry old,
// distinct times with nanoseconds, and returns the times of each entry.
func oldTree(t *testing.T) (string, map[string]times) {
	src := filepath.Join(t.TempDir(), "src")
	for _, d := range []string{"", "d", "d/e"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]int{"f": 300 << 10, "d/g": 5, "d/e/empty": 0, "d/e/h": 70 << 10}
	for name, size := range files {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i * 7)
		}
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("d/g", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	// Deepest first: setting a child's times does not touch its directory's.
	base := int64(1_000_000_000)
	for i, name := range []string{"f", "d/g", "d/e/empty", "d/e/h", "link", "d/e", "d", ""} {
		a, m := base+int64(i)*86400e9+123_456_789, base+int64(i)*86400e9+987_654_321
		ts := []unix.Timespec{unix.NsecToTimespec(a), unix.NsecToTimespec(m)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, name), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]times{}
	filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(src, p)
		want[rel] = lstatTimes(t, p)
		return nil
	})
	return src, want
}

// sameTimes checks that every entry of want exists under root with its
// mtime, and when withAtime, files and symlinks with their atime too (cp
// -a gives a directory the atime its own reading of the source left, on
// ext4 as well).
func sameTimes(t *testing.T, root string, want map[string]times, withAtime bool) {
	t.Helper()
	for rel, w := range want {
		got := lstatTimes(t, filepath.Join(root, rel))
		if got.mtime != w.mtime {
			t.Errorf("%s: mtime %s, want %s", rel, fmtNs(got.mtime), fmtNs(w.mtime))
		}
		if withAtime && got.atime != w.atime && !isDir(t, filepath.Join(root, rel)) {
			t.Errorf("%s: atime %s, want %s", rel, fmtNs(got.atime), fmtNs(w.atime))
		}
	}
}

func isDir(t *testing.T, p string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.IsDir()
}

func TestTimesCopyTools(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	t.Run("cp -a", func(t *testing.T) {
		// cp -a writes each file, sets its times with futimens and only
		// then closes it. A fresh source each time: reading it moves its
		// atimes.
		onBoth(t, mnt, func(t *testing.T, dir string) {
			src, want := oldTree(t)
			run(t, dir, "cp", "-a", src, "copy")
			sameTimes(t, filepath.Join(dir, "copy"), want, true)
		})
	})
	t.Run("tar xf", func(t *testing.T) {
		src, want := oldTree(t)
		// pax keeps the nanoseconds of mtime.
		archive := filepath.Join(t.TempDir(), "a.tar")
		run(t, "/", "tar", "--format=posix", "-C", src, "-cf", archive, ".")
		onBoth(t, mnt, func(t *testing.T, dir string) {
			run(t, dir, "tar", "-xf", archive)
			sameTimes(t, dir, want, false)
		})
	})
}

// openWrite creates name in dir for writing and writes 64 KiB to it.
func openWrite(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	write(t, f)
	return f
}

func write(t *testing.T, f *os.File) {
	t.Helper()
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
}

func closeF(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// futimens sets the times of the open file f by its descriptor (the FUSE
// setattr then carries the file handle), as cp -a and tar do.
func futimens(f *os.File, ts []unix.Timespec) error {
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func wantTime(t *testing.T, what string, got, want int64) {
	t.Helper()
	if got != want {
		t.Errorf("%s %s, want %s", what, fmtNs(got), fmtNs(want))
	}
}

func wantIn(t *testing.T, what string, got int64, w window) {
	t.Helper()
	if !w.has(got) {
		t.Errorf("%s %s, want within %s", what, fmtNs(got), w)
	}
}

// pause separates an operation's time from the next one's (the close's).
const pause = 300 * time.Millisecond

func TestTimesWhileOpen(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	const a0, m0 = 1_111_111_111_000_000_123, 1_222_222_222_000_000_456
	old := []unix.Timespec{unix.NsecToTimespec(a0), unix.NsecToTimespec(m0)}

	t.Run("touch -d while open and written", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			// GNU touch opens the file onto its stdin (dup2, then close:
			// a flush that publishes our write) before it sets the times;
			// the next case leaves that flush out.
			p := filepath.Join(dir, "f")
			f := openWrite(t, p)
			run(t, dir, "touch", "-d", "@1000000000.5", "f")
			closeF(t, f)
			got := lstatTimes(t, p)
			wantTime(t, "mtime", got.mtime, 1_000_000_000_500_000_000)
			wantTime(t, "atime", got.atime, 1_000_000_000_500_000_000)
		})
	})
	// As touch, without a close before the set: the second descriptor's
	// close must not replace the time with the write's or its own.
	t.Run("set through a second descriptor", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			f := openWrite(t, p)
			g, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := futimens(g, old); err != nil {
				t.Fatal(err)
			}
			closeF(t, g)
			wantTime(t, "mtime after the second descriptor's close", lstatTimes(t, p).mtime, m0)
			closeF(t, f)
			wantTime(t, "mtime", lstatTimes(t, p).mtime, m0)
		})
	})
	t.Run("write then futimens then close", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			f := openWrite(t, p)
			if err := futimens(f, old); err != nil {
				t.Fatal(err)
			}
			wantTime(t, "mtime before close", lstatTimes(t, p).mtime, m0)
			closeF(t, f)
			got := lstatTimes(t, p)
			wantTime(t, "mtime", got.mtime, m0)
			wantTime(t, "atime", got.atime, a0)
			// Another open and close without a write changes nothing.
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			closeF(t, f)
			wantTime(t, "mtime after a second open", lstatTimes(t, p).mtime, m0)
		})
	})
	t.Run("fsync between the set and the close", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			f := openWrite(t, p)
			if err := futimens(f, old); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			closeF(t, f)
			wantTime(t, "mtime", lstatTimes(t, p).mtime, m0)
		})
	})
	t.Run("write after the set wins", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			f := openWrite(t, p)
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, old, 0); err != nil {
				t.Fatal(err)
			}
			w := during(func() { write(t, f) })
			time.Sleep(pause)
			closeF(t, f)
			got := lstatTimes(t, p)
			wantIn(t, "mtime", got.mtime, w)
			wantTime(t, "atime", got.atime, a0)
		})
	})
	t.Run("mtime is the write's, not the close's", func(t *testing.T) {
		onBoth(t, mnt, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "f")
			var f *os.File
			w := during(func() { f = openWrite(t, p) })
			time.Sleep(pause)
			wantIn(t, "mtime before close", lstatTimes(t, p).mtime, w)
			closeF(t, f)
			got := lstatTimes(t, p)
			wantIn(t, "mtime", got.mtime, w)
			if got.ctime < got.mtime {
				t.Errorf("ctime %s before mtime %s", fmtNs(got.ctime), fmtNs(got.mtime))
			}
		})
	})
}

func TestTimesOmitNow(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	const a0, m0 = 1_111_111_111_000_000_123, 1_222_222_222_000_000_456
	const a1, m1 = 1_333_333_333_000_000_789, 1_444_444_444_000_000_012
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	now := unix.Timespec{Nsec: unix.UTIME_NOW}
	// want: "old" (unchanged), "now" (the call's time) or "set" (given).
	for _, c := range []struct {
		name       string
		ts         []unix.Timespec
		wantA      string
		wantM      string
		ctimeMoves bool
	}{
		{"OMIT NOW", []unix.Timespec{omit, now}, "old", "now", true},
		{"NOW OMIT", []unix.Timespec{now, omit}, "now", "old", true},
		{"OMIT set", []unix.Timespec{omit, unix.NsecToTimespec(m1)}, "old", "set", true},
		{"set OMIT", []unix.Timespec{unix.NsecToTimespec(a1), omit}, "set", "old", true},
		{"NOW NOW", []unix.Timespec{now, now}, "now", "now", true},
		{"OMIT OMIT", []unix.Timespec{omit, omit}, "old", "old", false},
	} {
		check := func(t *testing.T, what string, got, old, set int64, want string, w window) {
			t.Helper()
			switch want {
			case "old":
				wantTime(t, what, got, old)
			case "set":
				wantTime(t, what, got, set)
			case "now":
				wantIn(t, what, got, w)
			}
		}
		t.Run(c.name, func(t *testing.T) {
			onBoth(t, mnt, func(t *testing.T, dir string) {
				p := filepath.Join(dir, "f")
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{unix.NsecToTimespec(a0), unix.NsecToTimespec(m0)}, 0); err != nil {
					t.Fatal(err)
				}
				before := lstatTimes(t, p)
				time.Sleep(50 * time.Millisecond) // a ctime that moves moves visibly
				var err error
				w := during(func() { err = unix.UtimesNanoAt(unix.AT_FDCWD, p, c.ts, 0) })
				if err != nil {
					t.Fatal(err)
				}
				got := lstatTimes(t, p)
				check(t, "atime", got.atime, a0, a1, c.wantA, w)
				check(t, "mtime", got.mtime, m0, m1, c.wantM, w)
				if c.ctimeMoves {
					wantIn(t, "ctime", got.ctime, w)
				} else {
					wantTime(t, "ctime", got.ctime, before.ctime)
				}
			})
		})
		// The same while the file is open with a write not yet closed: an
		// omitted mtime stays the write's, a set one wins over it.
		t.Run(c.name+" while written", func(t *testing.T) {
			onBoth(t, mnt, func(t *testing.T, dir string) {
				p := filepath.Join(dir, "f")
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{unix.NsecToTimespec(a0), unix.NsecToTimespec(m0)}, 0); err != nil {
					t.Fatal(err)
				}
				f, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				ww := during(func() { write(t, f) })
				time.Sleep(pause)
				w := during(func() { err = unix.UtimesNanoAt(unix.AT_FDCWD, p, c.ts, 0) })
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(pause)
				closeF(t, f)
				got := lstatTimes(t, p)
				check(t, "atime", got.atime, a0, a1, c.wantA, w)
				if c.wantM == "old" {
					wantIn(t, "mtime (the write's)", got.mtime, ww)
				} else {
					check(t, "mtime", got.mtime, 0, m1, c.wantM, w)
				}
			})
		})
	}
}

// Reads leave atime alone on the mount (docs/mount.md: as noatime; ext4's
// relatime would move an old atime), and an explicit atime is kept exactly.
func TestTimesAtime(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{})
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	const a0, m0 = 1_000_000_000_000_000_001, 1_100_000_000_000_000_002
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{unix.NsecToTimespec(a0), unix.NsecToTimespec(m0)}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	got := lstatTimes(t, p)
	wantTime(t, "atime after a read", got.atime, a0)
	wantTime(t, "mtime after a read", got.mtime, m0)
}
