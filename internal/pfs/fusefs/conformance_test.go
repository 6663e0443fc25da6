package fusefs_test

// The conformance table: every POSIX call the mount serves, with its error
// cases, run on the mount and on a local directory (ext4 or tmpfs here) as
// reference; errno and the observable result must agree. Differences that
// are intended are listed in intendedDiffs with the reason, and in
// docs/mount.md.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"golang.org/x/sys/unix"
)

// nobody is the unprivileged user the EACCES cases run as.
const nobody = 65534

// intendedDiffs: cases whose result differs from ext4 on purpose.
var intendedDiffs = map[string]string{
	"setxattr value of 64 KiB": "ext4 keeps a file's attributes in one 4 KiB block (ENOSPC); the mount allows what Linux's xattr API allows, 64 KiB per value",
	"fallocate COLLAPSE_RANGE": "not served (EOPNOTSUPP): shifting data across stripe units would rewrite every object; ext4 collapses aligned ranges",
	"fallocate INSERT_RANGE":   "not served (EOPNOTSUPP), as COLLAPSE_RANGE",
}

func TestMain(m *testing.M) {
	if os.Getenv("CORRAL_CONF_HELPER") == "1" {
		// Run operations as whoever started us (see asUser): a JSON list
		// of [op, args...] in, a JSON list of results out.
		var calls [][]string
		if err := json.NewDecoder(os.Stdin).Decode(&calls); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		out := make([]string, len(calls))
		for i, c := range calls {
			op, ok := userOps[c[0]]
			if !ok {
				fmt.Println("unknown helper op", c[0])
				os.Exit(2)
			}
			out[i] = op(c[1:]...)
		}
		json.NewEncoder(os.Stdout).Encode(out)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func res(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return unix.ErrnoName(en)
	}
	return err.Error()
}

// userOps are the operations the non-root cases run in a helper process.
var userOps = map[string]func(args ...string) string{
	"open-r": func(a ...string) string { return openRes(a[0], unix.O_RDONLY) },
	"open-w": func(a ...string) string { return openRes(a[0], unix.O_WRONLY) },
	"creat": func(a ...string) string {
		return openRes(a[0], unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	},
	"opendir": func(a ...string) string { return openRes(a[0], unix.O_RDONLY|unix.O_DIRECTORY) },
	"stat": func(a ...string) string {
		var st unix.Stat_t
		return res(unix.Lstat(a[0], &st))
	},
	"chmod":    func(a ...string) string { return res(unix.Chmod(a[0], 0o777)) },
	"chown":    func(a ...string) string { return res(unix.Chown(a[0], nobody, nobody)) },
	"unlink":   func(a ...string) string { return res(unix.Unlink(a[0])) },
	"rmdir":    func(a ...string) string { return res(unix.Rmdir(a[0])) },
	"mkdir":    func(a ...string) string { return res(unix.Mkdir(a[0], 0o755)) },
	"rename":   func(a ...string) string { return res(unix.Rename(a[0], a[1])) },
	"truncate": func(a ...string) string { return res(unix.Truncate(a[0], 1)) },
	"setxattr": func(a ...string) string { return res(unix.Setxattr(a[0], a[1], []byte("v"), 0)) },
	"getxattr": func(a ...string) string {
		_, err := unix.Getxattr(a[0], a[1], make([]byte, 64))
		return res(err)
	},
	"access-r": func(a ...string) string { return res(unix.Access(a[0], unix.R_OK)) },
	"access-w": func(a ...string) string { return res(unix.Access(a[0], unix.W_OK)) },
	"access-x": func(a ...string) string { return res(unix.Access(a[0], unix.X_OK)) },
	"utimens-now": func(a ...string) string {
		return res(unix.UtimesNanoAt(unix.AT_FDCWD, a[0], nil, 0))
	},
	"utimens-set": func(a ...string) string {
		ts := []unix.Timespec{unix.NsecToTimespec(1e9), unix.NsecToTimespec(2e9)}
		return res(unix.UtimesNanoAt(unix.AT_FDCWD, a[0], ts, 0))
	},
	"link": func(a ...string) string { return res(unix.Link(a[0], a[1])) },
}

func openRes(p string, flags int) string {
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	}
	return res(err)
}

// asUser runs a userOps operation as uid/gid nobody.
func asUser(t *testing.T, bin string, op string, args ...string) string {
	t.Helper()
	return asUserBatch(t, bin, [][]string{append([]string{op}, args...)})[0]
}

// asUserBatch runs userOps operations, [op, args...] each, as nobody in one
// helper process (starting one per case would be slow under -race).
func asUserBatch(t *testing.T, bin string, calls [][]string) []string {
	t.Helper()
	in, _ := json.Marshal(calls)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CORRAL_CONF_HELPER=1")
	cmd.Stdin = bytes.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.Output()
	var res []string
	if err == nil {
		err = json.Unmarshal(out, &res)
	}
	if err != nil || len(res) != len(calls) {
		t.Fatalf("helper %v: %v %s", calls, err, out)
	}
	return res
}

// userBatch collects the table's non-root operations; each case gets a
// placeholder that the batch's result replaces.
type userBatch struct{ calls [][]string }

func (b *userBatch) add(call []string) string {
	b.calls = append(b.calls, call)
	return fmt.Sprintf("\x00user%d\x00", len(b.calls)-1)
}

// helperBinary copies the test binary where nobody may run it.
func helperBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "helper")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// publicDir makes a directory every user may enter, removed at the end.
func publicDir(t *testing.T, pattern string) string {
	t.Helper()
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// statStr is what the table compares of stat(2): type, permissions, size
// (not for directories: ext4 reports its block), links, owner and device.
func statStr(p string) string {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return res(err)
	}
	return fstatStr(&st)
}

func fstatStr(st *unix.Stat_t) string {
	size := fmt.Sprint(st.Size)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		size = "-"
	}
	return fmt.Sprintf("mode=%o size=%s nlink=%d uid=%d gid=%d rdev=%d:%d", st.Mode, size, st.Nlink, st.Uid, st.Gid,
		unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

func read(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return res(err)
	}
	if len(b) > 64 {
		return fmt.Sprintf("%d bytes %x", len(b), hash(b))
	}
	return fmt.Sprintf("%q", b)
}

func list(p string) string {
	ents, err := os.ReadDir(p)
	if err != nil {
		return res(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, fmt.Sprintf("%s:%o", e.Name(), e.Type()>>20))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func wf(p, content string, mode os.FileMode) {
	os.WriteFile(p, []byte(content), mode)
	os.Chmod(p, mode)
}

func md(p string, mode os.FileMode) {
	os.Mkdir(p, mode)
	os.Chmod(p, mode)
}

// withFd opens p and runs fn on the descriptor.
func withFd(p string, flags int, fn func(fd int) string) string {
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return res(err)
	}
	defer unix.Close(fd)
	return fn(fd)
}

type confCase struct {
	name  string
	setup func(r string)
	// op runs on the case's directory r and returns the observable result.
	op func(t *testing.T, r string) string
}

var long = strings.Repeat("n", 256)

func confCases(batch *userBatch) []confCase {
	f := func(r string) { wf(r+"/f", "hello", 0o644) }
	fd := func(r string) { wf(r+"/f", "hello", 0o644); md(r+"/d", 0o755) }
	user := func(op string, args ...string) func(t *testing.T, r string) string {
		return func(t *testing.T, r string) string {
			full := make([]string, len(args))
			for i, a := range args {
				full[i] = r + "/" + a
				if strings.HasPrefix(a, "=") {
					full[i] = a[1:]
				}
			}
			return batch.add(append([]string{op}, full...))
		}
	}
	xset := func(p, name string, v []byte, flags int) string { return res(unix.Setxattr(p, name, v, flags)) }
	xget := func(p, name string, n int) string {
		buf := make([]byte, n)
		sz, err := unix.Getxattr(p, name, buf)
		if err != nil {
			return res(err)
		}
		if n == 0 {
			return fmt.Sprint("size=", sz)
		}
		return fmt.Sprintf("%q", buf[:sz])
	}
	xlist := func(p string) string {
		buf := make([]byte, 4096)
		sz, err := unix.Listxattr(p, buf)
		if err != nil {
			return res(err)
		}
		names := strings.Split(strings.TrimSuffix(string(buf[:sz]), "\x00"), "\x00")
		sort.Strings(names)
		return strings.Join(names, ",")
	}
	falloc := func(mode uint32, off, n int64) func(t *testing.T, r string) string {
		return func(t *testing.T, r string) string {
			return withFd(r+"/big", unix.O_RDWR, func(fd int) string {
				err := unix.Fallocate(fd, mode, off, n)
				return res(err) + " " + statStr(r+"/big") + " " + read(r+"/big")
			})
		}
	}
	big := func(r string) { wf(r+"/big", strings.Repeat("abcdefgh", 64<<10), 0o644) } // 512 KiB
	return []confCase{
		// open, creat
		{"open O_RDONLY", f, func(t *testing.T, r string) string { return openRes(r+"/f", unix.O_RDONLY) + " " + read(r+"/f") }},
		{"open missing", nil, func(t *testing.T, r string) string { return openRes(r+"/nope", unix.O_RDONLY) }},
		{"open missing parent", nil, func(t *testing.T, r string) string { return openRes(r+"/no/f", unix.O_RDONLY|unix.O_CREAT) }},
		{"creat O_EXCL existing", f, func(t *testing.T, r string) string {
			return openRes(r+"/f", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
		}},
		{"creat O_EXCL new", nil, func(t *testing.T, r string) string {
			return openRes(r+"/g", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL) + " " + statStr(r+"/g")
		}},
		{"creat O_EXCL dangling symlink", func(r string) { os.Symlink("nowhere", r+"/l") }, func(t *testing.T, r string) string {
			return openRes(r+"/l", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
		}},
		{"creat through dangling symlink", func(r string) { os.Symlink("target", r+"/l") }, func(t *testing.T, r string) string {
			return openRes(r+"/l", unix.O_WRONLY|unix.O_CREAT) + " " + statStr(r+"/target")
		}},
		{"open O_TRUNC", f, func(t *testing.T, r string) string {
			return openRes(r+"/f", unix.O_WRONLY|unix.O_TRUNC) + " " + statStr(r+"/f")
		}},
		{"open O_APPEND", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_WRONLY|unix.O_APPEND, func(fd int) string {
				unix.Pwrite(fd, []byte("X"), 0) // Linux ignores the offset with O_APPEND
				_, err := unix.Write(fd, []byte(" world"))
				return res(err)
			}) + " " + read(r+"/f")
		}},
		{"open dir O_WRONLY", fd, func(t *testing.T, r string) string { return openRes(r+"/d", unix.O_WRONLY) }},
		{"open dir O_RDONLY", fd, func(t *testing.T, r string) string { return openRes(r+"/d", unix.O_RDONLY) }},
		{"open file with trailing slash", f, func(t *testing.T, r string) string { return openRes(r+"/f/", unix.O_RDONLY) }},
		{"open through a file", f, func(t *testing.T, r string) string { return openRes(r+"/f/x", unix.O_RDONLY) }},
		{"open O_DIRECTORY on a file", f, func(t *testing.T, r string) string {
			return openRes(r+"/f", unix.O_RDONLY|unix.O_DIRECTORY)
		}},
		{"open O_NOFOLLOW on a symlink", func(r string) { os.Symlink("f", r+"/l"); f(r) }, func(t *testing.T, r string) string {
			return openRes(r+"/l", unix.O_RDONLY|unix.O_NOFOLLOW)
		}},
		{"open symlink loop", func(r string) { os.Symlink("l", r+"/l") }, func(t *testing.T, r string) string {
			return openRes(r+"/l", unix.O_RDONLY)
		}},
		{"creat name too long", nil, func(t *testing.T, r string) string { return openRes(r+"/"+long, unix.O_WRONLY|unix.O_CREAT) }},
		{"open name too long", nil, func(t *testing.T, r string) string { return openRes(r+"/"+long, unix.O_RDONLY) }},
		{"creat name of 255 bytes", nil, func(t *testing.T, r string) string {
			return openRes(r+"/"+long[:255], unix.O_WRONLY|unix.O_CREAT) + " " + list(r)
		}},
		// read, write, pread, pwrite
		{"pwrite beyond the end", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_WRONLY, func(fd int) string {
				_, err := unix.Pwrite(fd, []byte("end"), 10)
				return res(err)
			}) + " " + read(r+"/f")
		}},
		{"pread beyond the end", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string {
				n, err := unix.Pread(fd, make([]byte, 10), 100)
				return fmt.Sprint(n, " ", res(err))
			})
		}},
		{"read and write sequentially", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDWR, func(fd int) string {
				b := make([]byte, 2)
				unix.Read(fd, b)
				unix.Write(fd, []byte("LL"))
				n, _ := unix.Read(fd, b)
				return fmt.Sprintf("%q", b[:n])
			}) + " " + read(r+"/f")
		}},
		{"read on O_WRONLY", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_WRONLY, func(fd int) string { _, err := unix.Read(fd, make([]byte, 4)); return res(err) })
		}},
		{"write on O_RDONLY", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string { _, err := unix.Write(fd, []byte("x")); return res(err) })
		}},
		{"read a directory", fd, func(t *testing.T, r string) string {
			return withFd(r+"/d", unix.O_RDONLY, func(fd int) string { _, err := unix.Read(fd, make([]byte, 4)); return res(err) })
		}},
		{"lseek SEEK_END", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string { n, err := unix.Seek(fd, 0, io.SeekEnd); return fmt.Sprint(n, res(err)) })
		}},
		// truncate, ftruncate
		{"truncate grow", f, func(t *testing.T, r string) string { return res(unix.Truncate(r+"/f", 8)) + " " + read(r+"/f") }},
		{"truncate shrink", f, func(t *testing.T, r string) string { return res(unix.Truncate(r+"/f", 2)) + " " + read(r+"/f") }},
		{"truncate directory", fd, func(t *testing.T, r string) string { return res(unix.Truncate(r+"/d", 0)) }},
		{"truncate missing", nil, func(t *testing.T, r string) string { return res(unix.Truncate(r+"/nope", 0)) }},
		{"truncate negative", f, func(t *testing.T, r string) string { return res(unix.Truncate(r+"/f", -1)) }},
		{"ftruncate", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDWR, func(fd int) string {
				err := unix.Ftruncate(fd, 3)
				var st unix.Stat_t
				unix.Fstat(fd, &st)
				return res(err) + " " + fstatStr(&st)
			}) + " " + read(r+"/f")
		}},
		{"ftruncate O_RDONLY", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string { return res(unix.Ftruncate(fd, 0)) })
		}},
		// stat, fstat, lstat
		{"stat file", f, func(t *testing.T, r string) string { return statStr(r + "/f") }},
		{"stat directory with subdirectories", func(r string) { md(r+"/d", 0o755); md(r+"/d/a", 0o700); md(r+"/d/b", 0o755) }, func(t *testing.T, r string) string {
			return statStr(r + "/d")
		}},
		{"lstat symlink", func(r string) { os.Symlink("some/target", r+"/l") }, func(t *testing.T, r string) string { return statStr(r + "/l") }},
		{"stat through symlink", func(r string) { f(r); os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			var st unix.Stat_t
			return res(unix.Stat(r+"/l", &st)) + " " + fstatStr(&st)
		}},
		{"stat missing", nil, func(t *testing.T, r string) string { return statStr(r + "/nope") }},
		{"stat name too long", nil, func(t *testing.T, r string) string { return statStr(r + "/" + long) }},
		{"stat symlink loop in path", func(r string) { os.Symlink("a", r+"/a") }, func(t *testing.T, r string) string { return statStr(r + "/a/x") }},
		{"fstat", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string {
				var st unix.Stat_t
				return res(unix.Fstat(fd, &st)) + " " + fstatStr(&st)
			})
		}},
		// chmod, chown
		{"chmod 0000", f, func(t *testing.T, r string) string { return res(unix.Chmod(r+"/f", 0)) + " " + statStr(r+"/f") }},
		{"chmod setuid, setgid, sticky", f, func(t *testing.T, r string) string {
			return res(unix.Chmod(r+"/f", 0o7755)) + " " + statStr(r+"/f")
		}},
		{"chmod directory 0000", fd, func(t *testing.T, r string) string { return res(unix.Chmod(r+"/d", 0)) + " " + statStr(r+"/d") }},
		{"chmod missing", nil, func(t *testing.T, r string) string { return res(unix.Chmod(r+"/nope", 0o644)) }},
		{"fchmodat symlink nofollow", func(r string) { os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			return res(unix.Fchmodat(unix.AT_FDCWD, r+"/l", 0o600, unix.AT_SYMLINK_NOFOLLOW))
		}},
		{"chown", f, func(t *testing.T, r string) string {
			return res(unix.Chown(r+"/f", nobody, nobody)) + " " + statStr(r+"/f")
		}},
		{"chown uid only", f, func(t *testing.T, r string) string { return res(unix.Chown(r+"/f", 7, -1)) + " " + statStr(r+"/f") }},
		{"lchown symlink", func(r string) { f(r); os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			return res(unix.Lchown(r+"/l", 5, 6)) + " " + statStr(r+"/l") + " " + statStr(r+"/f")
		}},
		{"chown clears setuid", f, func(t *testing.T, r string) string {
			unix.Chmod(r+"/f", 0o6755)
			return res(unix.Chown(r+"/f", 3, 3)) + " " + statStr(r+"/f")
		}},
		// utimensat
		{"utimensat explicit", f, func(t *testing.T, r string) string {
			ts := []unix.Timespec{unix.NsecToTimespec(1_000_000_007), unix.NsecToTimespec(2_000_000_009)}
			err := unix.UtimesNanoAt(unix.AT_FDCWD, r+"/f", ts, 0)
			var st unix.Stat_t
			unix.Stat(r+"/f", &st)
			return res(err) + fmt.Sprintf(" atime=%d.%09d mtime=%d.%09d", st.Atim.Sec, st.Atim.Nsec, st.Mtim.Sec, st.Mtim.Nsec)
		}},
		{"utimensat UTIME_OMIT", f, func(t *testing.T, r string) string {
			ts := []unix.Timespec{unix.NsecToTimespec(5e9), {Nsec: unix.UTIME_OMIT}}
			unix.UtimesNanoAt(unix.AT_FDCWD, r+"/f", []unix.Timespec{unix.NsecToTimespec(3e9), unix.NsecToTimespec(4e9)}, 0)
			err := unix.UtimesNanoAt(unix.AT_FDCWD, r+"/f", ts, 0)
			var st unix.Stat_t
			unix.Stat(r+"/f", &st)
			return res(err) + fmt.Sprintf(" atime=%d mtime=%d", st.Atim.Sec, st.Mtim.Sec)
		}},
		{"utimensat symlink nofollow", func(r string) { os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			ts := []unix.Timespec{unix.NsecToTimespec(1e9), unix.NsecToTimespec(2e9)}
			err := unix.UtimesNanoAt(unix.AT_FDCWD, r+"/l", ts, unix.AT_SYMLINK_NOFOLLOW)
			var st unix.Stat_t
			unix.Lstat(r+"/l", &st)
			return res(err) + fmt.Sprintf(" mtime=%d", st.Mtim.Sec)
		}},
		{"utimensat missing", nil, func(t *testing.T, r string) string {
			return res(unix.UtimesNanoAt(unix.AT_FDCWD, r+"/nope", nil, 0))
		}},
		// link
		{"link", f, func(t *testing.T, r string) string {
			return res(unix.Link(r+"/f", r+"/g")) + " " + statStr(r+"/f") + " " + read(r+"/g")
		}},
		{"link directory", fd, func(t *testing.T, r string) string { return res(unix.Link(r+"/d", r+"/e")) }},
		{"link to existing name", fd, func(t *testing.T, r string) string { return res(unix.Link(r+"/f", r+"/d")) }},
		{"link missing", nil, func(t *testing.T, r string) string { return res(unix.Link(r+"/nope", r+"/g")) }},
		{"link name too long", f, func(t *testing.T, r string) string { return res(unix.Link(r+"/f", r+"/"+long)) }},
		{"link into missing directory", f, func(t *testing.T, r string) string { return res(unix.Link(r+"/f", r+"/no/g")) }},
		// symlink, readlink
		{"symlink and readlink", nil, func(t *testing.T, r string) string {
			err := unix.Symlink("../x/y", r+"/l")
			b := make([]byte, 100)
			n, err2 := unix.Readlink(r+"/l", b)
			return res(err) + " " + res(err2) + " " + string(b[:max(n, 0)])
		}},
		{"symlink existing", f, func(t *testing.T, r string) string { return res(unix.Symlink("x", r+"/f")) }},
		{"symlink empty target", nil, func(t *testing.T, r string) string { return res(unix.Symlink("", r+"/l")) }},
		{"symlink name too long", nil, func(t *testing.T, r string) string { return res(unix.Symlink("x", r+"/"+long)) }},
		{"symlink target of 4095 bytes", nil, func(t *testing.T, r string) string {
			return res(unix.Symlink(strings.Repeat("t/", 2047)+"t", r+"/l")) + " " + statStr(r+"/l")
		}},
		{"readlink on a file", f, func(t *testing.T, r string) string {
			_, err := unix.Readlink(r+"/f", make([]byte, 10))
			return res(err)
		}},
		{"readlink short buffer", func(r string) { os.Symlink("abcdef", r+"/l") }, func(t *testing.T, r string) string {
			b := make([]byte, 3)
			n, err := unix.Readlink(r+"/l", b)
			return fmt.Sprintf("%s %q", res(err), b[:n])
		}},
		// unlink
		{"unlink", f, func(t *testing.T, r string) string { return res(unix.Unlink(r+"/f")) + " " + list(r) }},
		{"unlink directory", fd, func(t *testing.T, r string) string { return res(unix.Unlink(r + "/d")) }},
		{"unlink missing", nil, func(t *testing.T, r string) string { return res(unix.Unlink(r + "/nope")) }},
		{"unlink name too long", nil, func(t *testing.T, r string) string { return res(unix.Unlink(r + "/" + long)) }},
		{"unlink one of two links", func(r string) { f(r); os.Link(r+"/f", r+"/g") }, func(t *testing.T, r string) string {
			return res(unix.Unlink(r+"/f")) + " " + statStr(r+"/g")
		}},
		{"unlink open file", func(r string) { md(r+"/d", 0o755); wf(r+"/d/f", "data", 0o644) }, func(t *testing.T, r string) string {
			fdn, err := unix.Open(r+"/d/f", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return res(err)
			}
			defer unix.Close(fdn)
			out := res(unix.Unlink(r + "/d/f"))
			var st unix.Stat_t
			unix.Fstat(fdn, &st)
			out += " fstat: " + fstatStr(&st) + " list: " + list(r+"/d")
			unix.Pwrite(fdn, []byte("more"), 4)
			b := make([]byte, 10)
			n, _ := unix.Pread(fdn, b, 0)
			return out + fmt.Sprintf(" read %q", b[:n]) + " rmdir: " + res(unix.Rmdir(r+"/d")) + " " + list(r)
		}},
		{"rename over open file", func(r string) { wf(r+"/a", "new", 0o644); wf(r+"/b", "old", 0o644) }, func(t *testing.T, r string) string {
			fdn, err := unix.Open(r+"/b", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return res(err)
			}
			defer unix.Close(fdn)
			out := res(unix.Rename(r+"/a", r+"/b"))
			var st unix.Stat_t
			unix.Fstat(fdn, &st)
			b := make([]byte, 10)
			n, _ := unix.Pread(fdn, b, 0)
			return out + " fstat: " + fstatStr(&st) + fmt.Sprintf(" read %q ", b[:n]) + list(r) + " " + read(r+"/b")
		}},
		// rename
		{"rename over file", func(r string) { wf(r+"/a", "A", 0o644); wf(r+"/b", "B", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/a", r+"/b")) + " " + list(r) + " " + read(r+"/b")
		}},
		{"rename dir over non-empty dir", func(r string) { md(r+"/a", 0o755); md(r+"/b", 0o755); wf(r+"/b/x", "", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/a", r+"/b"))
		}},
		{"rename dir over empty dir", func(r string) { md(r+"/a", 0o755); md(r+"/b", 0o755); wf(r+"/a/x", "", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/a", r+"/b")) + " " + list(r) + " " + list(r+"/b")
		}},
		{"rename dir over file", fd, func(t *testing.T, r string) string { return res(unix.Rename(r+"/d", r+"/f")) }},
		{"rename file over dir", fd, func(t *testing.T, r string) string { return res(unix.Rename(r+"/f", r+"/d")) }},
		{"rename dir into itself", func(r string) { md(r+"/d", 0o755); md(r+"/d/e", 0o755) }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/d", r+"/d/e/x"))
		}},
		{"rename missing", nil, func(t *testing.T, r string) string { return res(unix.Rename(r+"/nope", r+"/x")) }},
		{"rename to name too long", f, func(t *testing.T, r string) string { return res(unix.Rename(r+"/f", r+"/"+long)) }},
		{"rename hard links of one file", func(r string) { f(r); os.Link(r+"/f", r+"/g") }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/f", r+"/g")) + " " + list(r)
		}},
		{"rename dir across directories", func(r string) { md(r+"/a", 0o755); md(r+"/b", 0o755); md(r+"/a/d", 0o755) }, func(t *testing.T, r string) string {
			return res(unix.Rename(r+"/a/d", r+"/b/d")) + " " + statStr(r+"/a") + " " + statStr(r+"/b")
		}},
		{"RENAME_NOREPLACE existing", func(r string) { wf(r+"/a", "A", 0o644); wf(r+"/b", "B", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Renameat2(unix.AT_FDCWD, r+"/a", unix.AT_FDCWD, r+"/b", unix.RENAME_NOREPLACE))
		}},
		{"RENAME_NOREPLACE new", func(r string) { wf(r+"/a", "A", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Renameat2(unix.AT_FDCWD, r+"/a", unix.AT_FDCWD, r+"/b", unix.RENAME_NOREPLACE)) + " " + list(r)
		}},
		{"RENAME_EXCHANGE", func(r string) { wf(r+"/a", "A", 0o644); md(r+"/b", 0o755) }, func(t *testing.T, r string) string {
			return res(unix.Renameat2(unix.AT_FDCWD, r+"/a", unix.AT_FDCWD, r+"/b", unix.RENAME_EXCHANGE)) + " " + list(r) + " " + read(r+"/b")
		}},
		{"RENAME_EXCHANGE missing", func(r string) { wf(r+"/a", "A", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Renameat2(unix.AT_FDCWD, r+"/a", unix.AT_FDCWD, r+"/b", unix.RENAME_EXCHANGE))
		}},
		{"RENAME_NOREPLACE|RENAME_EXCHANGE", func(r string) { wf(r+"/a", "A", 0o644); wf(r+"/b", "B", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Renameat2(unix.AT_FDCWD, r+"/a", unix.AT_FDCWD, r+"/b", unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE))
		}},
		// mkdir, rmdir
		{"mkdir", nil, func(t *testing.T, r string) string {
			return res(unix.Mkdir(r+"/d", 0o750)) + " " + statStr(r+"/d") + " " + statStr(r)
		}},
		{"mkdir mode 0000", nil, func(t *testing.T, r string) string { return res(unix.Mkdir(r+"/d", 0)) + " " + statStr(r+"/d") }},
		{"mkdir existing", fd, func(t *testing.T, r string) string { return res(unix.Mkdir(r+"/f", 0o755)) }},
		{"mkdir missing parent", nil, func(t *testing.T, r string) string { return res(unix.Mkdir(r+"/a/b", 0o755)) }},
		{"mkdir name too long", nil, func(t *testing.T, r string) string { return res(unix.Mkdir(r+"/"+long, 0o755)) }},
		{"mkdir under a file", f, func(t *testing.T, r string) string { return res(unix.Mkdir(r+"/f/d", 0o755)) }},
		{"rmdir", fd, func(t *testing.T, r string) string { return res(unix.Rmdir(r+"/d")) + " " + list(r) + " " + statStr(r) }},
		{"rmdir non-empty", func(r string) { md(r+"/d", 0o755); wf(r+"/d/x", "", 0o644) }, func(t *testing.T, r string) string {
			return res(unix.Rmdir(r + "/d"))
		}},
		{"rmdir file", f, func(t *testing.T, r string) string { return res(unix.Rmdir(r + "/f")) }},
		{"rmdir dot", fd, func(t *testing.T, r string) string { return res(unix.Rmdir(r + "/d/.")) }},
		{"rmdir missing", nil, func(t *testing.T, r string) string { return res(unix.Rmdir(r + "/nope")) }},
		{"rmdir name too long", nil, func(t *testing.T, r string) string { return res(unix.Rmdir(r + "/" + long)) }},
		// readdir
		{"readdir", func(r string) {
			f(r)
			md(r+"/d", 0o755)
			os.Symlink("f", r+"/l")
			unix.Mkfifo(r+"/p", 0o644)
		}, func(t *testing.T, r string) string {
			return list(r)
		}},
		{"readdir of a file", f, func(t *testing.T, r string) string { return list(r + "/f") }},
		{"readdir many entries", func(r string) {
			for i := 0; i < 300; i++ {
				wf(fmt.Sprintf("%s/file-%03d", r, i), "", 0o644)
			}
		}, func(t *testing.T, r string) string {
			ents, err := os.ReadDir(r)
			return fmt.Sprint(len(ents), " ", res(err))
		}},
		// mknod, mkfifo, sockets
		{"mkfifo", nil, func(t *testing.T, r string) string { return res(unix.Mkfifo(r+"/p", 0o640)) + " " + statStr(r+"/p") }},
		{"mkfifo existing", f, func(t *testing.T, r string) string { return res(unix.Mkfifo(r+"/f", 0o640)) }},
		{"mkfifo name too long", nil, func(t *testing.T, r string) string { return res(unix.Mkfifo(r+"/"+long, 0o640)) }},
		{"mknod char device", nil, func(t *testing.T, r string) string {
			return res(unix.Mknod(r+"/c", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))) + " " + statStr(r+"/c")
		}},
		{"mknod block device", nil, func(t *testing.T, r string) string {
			return res(unix.Mknod(r+"/b", unix.S_IFBLK|0o600, int(unix.Mkdev(259, 70000)))) + " " + statStr(r+"/b")
		}},
		{"mknod regular file", nil, func(t *testing.T, r string) string {
			return res(unix.Mknod(r+"/f", unix.S_IFREG|0o600, 0)) + " " + statStr(r+"/f")
		}},
		{"mknod existing", f, func(t *testing.T, r string) string { return res(unix.Mknod(r+"/f", unix.S_IFIFO|0o600, 0)) }},
		{"unix socket", nil, func(t *testing.T, r string) string {
			l, err := net.Listen("unix", r+"/s")
			if err == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
			return res(err) + " " + statStr(r+"/s")
		}},
		{"unix socket connect", nil, func(t *testing.T, r string) string {
			l, err := net.Listen("unix", r+"/s")
			if err != nil {
				return res(err)
			}
			defer l.Close()
			go func() {
				if c, err := l.Accept(); err == nil {
					c.Write([]byte("hi"))
					c.Close()
				}
			}()
			c, err := net.Dial("unix", r+"/s")
			if err != nil {
				return res(err)
			}
			defer c.Close()
			b, _ := io.ReadAll(c)
			return string(b)
		}},
		{"fifo chmod chown link rename unlink utimens", func(r string) { unix.Mkfifo(r+"/p", 0o644) }, func(t *testing.T, r string) string {
			out := []string{
				res(unix.Chmod(r+"/p", 0o600)), res(unix.Chown(r+"/p", 4, 5)), res(unix.Link(r+"/p", r+"/q")),
				res(unix.Rename(r+"/q", r+"/q2")),
				res(unix.UtimesNanoAt(unix.AT_FDCWD, r+"/p", []unix.Timespec{unix.NsecToTimespec(1e9), unix.NsecToTimespec(2e9)}, 0)),
				statStr(r + "/q2"),
				res(unix.Unlink(r + "/p")), statStr(r + "/q2"), list(r),
			}
			return strings.Join(out, " ")
		}},
		{"fifo read and write", func(r string) { unix.Mkfifo(r+"/p", 0o644) }, func(t *testing.T, r string) string {
			rd, err := unix.Open(r+"/p", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return res(err)
			}
			defer unix.Close(rd)
			w, err := unix.Open(r+"/p", unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return res(err)
			}
			unix.Write(w, []byte("through"))
			unix.Close(w)
			b := make([]byte, 20)
			n, err := unix.Read(rd, b)
			return fmt.Sprintf("%q %s %s", b[:max(n, 0)], res(err), statStr(r+"/p"))
		}},
		{"device node truncate", func(r string) { unix.Mknod(r+"/c", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))) }, func(t *testing.T, r string) string {
			return res(unix.Truncate(r+"/c", 0)) + " " + statStr(r+"/c")
		}},
		// extended attributes
		{"setxattr getxattr", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user.a", []byte("val"), 0) + " " + xget(r+"/f", "user.a", 64)
		}},
		{"setxattr empty value", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user.e", nil, 0) + " " + xget(r+"/f", "user.e", 0) + " " + xlist(r+"/f")
		}},
		{"setxattr XATTR_CREATE existing", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("1"), 0)
			return xset(r+"/f", "user.a", []byte("2"), unix.XATTR_CREATE) + " " + xget(r+"/f", "user.a", 64)
		}},
		{"setxattr XATTR_REPLACE missing", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user.a", []byte("2"), unix.XATTR_REPLACE)
		}},
		{"setxattr XATTR_REPLACE existing", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("1"), 0)
			return xset(r+"/f", "user.a", []byte("22"), unix.XATTR_REPLACE) + " " + xget(r+"/f", "user.a", 64)
		}},
		{"setxattr bad flags", f, func(t *testing.T, r string) string { return xset(r+"/f", "user.a", []byte("2"), 4) }},
		{"getxattr missing", f, func(t *testing.T, r string) string { return xget(r+"/f", "user.nope", 64) }},
		{"getxattr size query", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("12345"), 0)
			return xget(r+"/f", "user.a", 0)
		}},
		{"getxattr small buffer", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("12345"), 0)
			return xget(r+"/f", "user.a", 2)
		}},
		{"listxattr", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.b", []byte("1"), 0)
			xset(r+"/f", "user.a", []byte("1"), 0)
			xset(r+"/f", "trusted.t", []byte("1"), 0)
			return xlist(r + "/f")
		}},
		{"listxattr small buffer", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.abc", []byte("1"), 0)
			n, err := unix.Listxattr(r+"/f", make([]byte, 3))
			m, err2 := unix.Listxattr(r+"/f", nil)
			return fmt.Sprint(n, res(err), m, res(err2))
		}},
		{"removexattr", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("1"), 0)
			return res(unix.Removexattr(r+"/f", "user.a")) + " " + xget(r+"/f", "user.a", 64) + " " + res(unix.Removexattr(r+"/f", "user.a"))
		}},
		{"setxattr value over 64 KiB", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user.a", make([]byte, 64<<10+1), 0)
		}},
		{"setxattr value of 64 KiB", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user.a", make([]byte, 64<<10), 0)
		}},
		{"setxattr name of 256 bytes", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user."+strings.Repeat("n", 251), nil, 0)
		}},
		{"setxattr name of 255 bytes", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "user."+strings.Repeat("n", 250), nil, 0) + " " + xget(r+"/f", "user."+strings.Repeat("n", 250), 0)
		}},
		{"setxattr unknown namespace", f, func(t *testing.T, r string) string { return xset(r+"/f", "other.a", nil, 0) }},
		{"setxattr trusted", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "trusted.a", []byte("t"), 0) + " " + xget(r+"/f", "trusted.a", 64)
		}},
		{"setxattr security", f, func(t *testing.T, r string) string {
			return xset(r+"/f", "security.a", []byte("s"), 0) + " " + xget(r+"/f", "security.a", 64)
		}},
		{"setxattr on a directory", fd, func(t *testing.T, r string) string {
			return xset(r+"/d", "user.a", []byte("d"), 0) + " " + xget(r+"/d", "user.a", 64)
		}},
		{"lsetxattr user on a symlink", func(r string) { os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			return res(unix.Lsetxattr(r+"/l", "user.a", []byte("1"), 0))
		}},
		{"lsetxattr trusted on a symlink", func(r string) { os.Symlink("f", r+"/l") }, func(t *testing.T, r string) string {
			err := unix.Lsetxattr(r+"/l", "trusted.a", []byte("1"), 0)
			b := make([]byte, 8)
			n, err2 := unix.Lgetxattr(r+"/l", "trusted.a", b)
			return res(err) + " " + res(err2) + " " + string(b[:max(n, 0)])
		}},
		{"setxattr user on a fifo", func(r string) { unix.Mkfifo(r+"/p", 0o644) }, func(t *testing.T, r string) string {
			return xset(r+"/p", "user.a", []byte("1"), 0) + " " + xget(r+"/p", "user.a", 8)
		}},
		{"setxattr missing file", nil, func(t *testing.T, r string) string { return xset(r+"/nope", "user.a", nil, 0) }},
		{"xattrs survive rename and link", f, func(t *testing.T, r string) string {
			xset(r+"/f", "user.a", []byte("1"), 0)
			unix.Rename(r+"/f", r+"/g")
			unix.Link(r+"/g", r+"/h")
			return xget(r+"/h", "user.a", 8)
		}},
		{"security.capability across writes", f, func(t *testing.T, r string) string {
			v := []byte{1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // VFS_CAP_REVISION_2, no caps
			out := xset(r+"/f", "security.capability", v, 0)
			out += " " + withFd(r+"/f", unix.O_WRONLY, func(fd int) string { _, err := unix.Write(fd, []byte("x")); return res(err) })
			// The kernel drops the capability on write by a process without CAP_SETFCAP only; root keeps it.
			return out + " " + xget(r+"/f", "security.capability", 0)
		}},
		// fallocate
		{"fallocate mode 0", big, falloc(0, 512<<10, 100<<10)},
		{"fallocate mode 0 inside", big, falloc(0, 0, 4096)},
		{"fallocate KEEP_SIZE", big, falloc(unix.FALLOC_FL_KEEP_SIZE, 500<<10, 1<<20)},
		{"fallocate PUNCH_HOLE", big, falloc(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 300<<10)},
		{"fallocate PUNCH_HOLE unaligned", big, falloc(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1000, 70000)},
		{"fallocate PUNCH_HOLE past the end", big, falloc(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 500<<10, 1<<20)},
		{"fallocate PUNCH_HOLE without KEEP_SIZE", big, falloc(unix.FALLOC_FL_PUNCH_HOLE, 0, 4096)},
		{"fallocate ZERO_RANGE", big, falloc(unix.FALLOC_FL_ZERO_RANGE, 100, 200<<10)},
		{"fallocate ZERO_RANGE extending", big, falloc(unix.FALLOC_FL_ZERO_RANGE, 500<<10, 100<<10)},
		{"fallocate COLLAPSE_RANGE", big, falloc(unix.FALLOC_FL_COLLAPSE_RANGE, 0, 64<<10)},
		{"fallocate INSERT_RANGE", big, falloc(unix.FALLOC_FL_INSERT_RANGE, 0, 64<<10)},
		{"fallocate length 0", big, falloc(0, 0, 0)},
		{"fallocate negative offset", big, falloc(0, -1, 10)},
		{"fallocate O_RDONLY", big, func(t *testing.T, r string) string {
			return withFd(r+"/big", unix.O_RDONLY, func(fd int) string { return res(unix.Fallocate(fd, 0, 0, 10)) })
		}},
		{"fallocate then write and read", nil, func(t *testing.T, r string) string {
			return withFd(r+"/g", unix.O_RDWR|unix.O_CREAT, func(fd int) string {
				err := unix.Fallocate(fd, 0, 0, 100<<10)
				unix.Pwrite(fd, []byte("mid"), 50<<10)
				b := make([]byte, 100<<10)
				n, _ := unix.Pread(fd, b, 0)
				return fmt.Sprintf("%s %d %x", res(err), n, hash(b[:n]))
			})
		}},
		{"punch then write back", big, func(t *testing.T, r string) string {
			return withFd(r+"/big", unix.O_RDWR, func(fd int) string {
				unix.Pwrite(fd, []byte("before"), 70000)
				err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 65536, 131072)
				unix.Pwrite(fd, []byte("after"), 70010)
				return res(err)
			}) + " " + read(r+"/big")
		}},
		// fsync, fdatasync
		{"fsync and fdatasync file", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_WRONLY, func(fd int) string {
				unix.Write(fd, []byte("J"))
				return res(unix.Fsync(fd)) + " " + res(unix.Fdatasync(fd))
			})
		}},
		{"fsync and fdatasync directory", fd, func(t *testing.T, r string) string {
			unix.Rename(r+"/f", r+"/d/g")
			return withFd(r+"/d", unix.O_RDONLY|unix.O_DIRECTORY, func(fd int) string { return res(unix.Fsync(fd)) + " " + res(unix.Fdatasync(fd)) })
		}},
		{"syncfs", f, func(t *testing.T, r string) string {
			return withFd(r+"/f", unix.O_RDONLY, func(fd int) string { return res(unix.Syncfs(fd)) })
		}},
		// statfs
		{"statfs", nil, func(t *testing.T, r string) string {
			var st unix.Statfs_t
			err := unix.Statfs(r, &st)
			return fmt.Sprintf("%s namelen=%d", res(err), st.Namelen)
		}},
		// access
		{"access F_OK missing", nil, func(t *testing.T, r string) string { return res(unix.Access(r+"/nope", unix.F_OK)) }},
		{"access root X_OK on 0644", f, func(t *testing.T, r string) string { return res(unix.Access(r+"/f", unix.X_OK)) }},
		{"access root W_OK on 0000", f, func(t *testing.T, r string) string {
			unix.Chmod(r+"/f", 0)
			return res(unix.Access(r+"/f", unix.W_OK|unix.R_OK))
		}},
		// as root, mode 0000 does not stop anyone but execute
		{"root opens mode 0000", f, func(t *testing.T, r string) string {
			unix.Chmod(r+"/f", 0)
			return openRes(r+"/f", unix.O_RDWR) + " " + read(r+"/f")
		}},
		{"root enters mode 0000 directory", func(r string) { md(r+"/d", 0o755); wf(r+"/d/x", "x", 0o644); os.Chmod(r+"/d", 0) }, func(t *testing.T, r string) string {
			return statStr(r+"/d/x") + " " + list(r+"/d")
		}},
		// as nobody
		{"user opens mode 0000", func(r string) { wf(r+"/f", "secret", 0) }, user("open-r", "f")},
		{"user opens 0644 for reading", f, user("open-r", "f")},
		{"user opens 0644 for writing", f, user("open-w", "f")},
		{"user opens 0600 for reading", func(r string) { wf(r+"/f", "secret", 0o600) }, user("open-r", "f")},
		{"user lists mode 0000 directory", func(r string) { md(r+"/d", 0) }, user("opendir", "d")},
		{"user enters mode 0000 directory", func(r string) { md(r+"/d", 0o755); wf(r+"/d/x", "x", 0o644); os.Chmod(r+"/d", 0) }, user("stat", "d/x")},
		{"user enters mode 0644 directory", func(r string) { md(r+"/d", 0o755); wf(r+"/d/x", "x", 0o644); os.Chmod(r+"/d", 0o644) }, user("stat", "d/x")},
		{"user creates in root's 0755 directory", nil, user("creat", "g")},
		{"user creates in 0777 directory", func(r string) { md(r+"/d", 0o777) }, user("creat", "d/g")},
		{"user unlinks in root's directory", f, user("unlink", "f")},
		{"user unlinks another's file in sticky directory", func(r string) { md(r+"/d", 0o1777); wf(r+"/d/f", "", 0o666) }, user("unlink", "d/f")},
		{"user renames in root's directory", f, user("rename", "f", "g")},
		{"user mkdir in root's directory", nil, user("mkdir", "d")},
		{"user rmdir in root's directory", fd, user("rmdir", "d")},
		{"user chmods root's file", f, user("chmod", "f")},
		{"user chowns root's file", f, user("chown", "f")},
		{"user truncates 0644 file", f, user("truncate", "f")},
		{"user truncates 0666 file", func(r string) { wf(r+"/f", "hello", 0o666) }, user("truncate", "f")},
		{"user sets user xattr on 0644 file", f, user("setxattr", "f", "=user.a")},
		{"user sets user xattr on 0666 file", func(r string) { wf(r+"/f", "hello", 0o666) }, user("setxattr", "f", "=user.a")},
		{"user reads trusted xattr", func(r string) { f(r); unix.Setxattr(r+"/f", "trusted.a", []byte("t"), 0) }, user("getxattr", "f", "=trusted.a")},
		{"user sets trusted xattr", func(r string) { wf(r+"/f", "hello", 0o666) }, user("setxattr", "f", "=trusted.a")},
		{"user reads user xattr of 0600 file", func(r string) { wf(r+"/f", "", 0o600); unix.Setxattr(r+"/f", "user.a", []byte("t"), 0) }, user("getxattr", "f", "=user.a")},
		{"user access R_OK on 0000", func(r string) { wf(r+"/f", "", 0) }, user("access-r", "f")},
		{"user access W_OK on 0444", func(r string) { wf(r+"/f", "", 0o444) }, user("access-w", "f")},
		{"user access X_OK on 0755", func(r string) { wf(r+"/f", "", 0o755) }, user("access-x", "f")},
		{"user touches 0666 file", func(r string) { wf(r+"/f", "", 0o666) }, user("utimens-now", "f")},
		{"user sets times of 0666 file", func(r string) { wf(r+"/f", "", 0o666) }, user("utimens-set", "f")},
		{"user links root's file into 0777 directory", func(r string) { wf(r+"/f", "", 0o600); md(r+"/d", 0o777) }, user("link", "f", "d/g")},
	}
}

// TestConformance runs the table on the mount and on a local directory.
func TestConformance(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 3)
	mnt := publicDir(t, "corral-conf-mnt-")
	mountAt(t, mnt, fsys.Meta.Addr)
	local := publicDir(t, "corral-conf-local-")
	helper := helperBinary(t, publicDir(t, "corral-conf-bin-"))
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	var batch userBatch
	cases := confCases(&batch)
	got := make([][2]string, len(cases))
	for i, c := range cases {
		for j, base := range []string{mnt, local} {
			r := filepath.Join(base, fmt.Sprintf("c%03d", i))
			if err := os.Mkdir(r, 0o755); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			os.Chmod(r, 0o755)
			if c.setup != nil {
				c.setup(r)
			}
			got[i][j] = strings.ReplaceAll(c.op(t, r), r, "R")
		}
	}
	userRes := asUserBatch(t, helper, batch.calls)
	var diffs []string
	for i, c := range cases {
		got := got[i]
		for j := range got {
			var k int
			if _, err := fmt.Sscanf(got[j], "\x00user%d\x00", &k); err == nil {
				got[j] = userRes[k]
			}
		}
		reason, intended := intendedDiffs[c.name]
		switch {
		case got[0] != got[1] && intended:
			diffs = append(diffs, fmt.Sprintf("| %s | %s | %s | %s |", c.name, got[0], got[1], reason))
		case got[0] != got[1]:
			t.Errorf("%s:\n  mount: %s\n  local: %s", c.name, got[0], got[1])
		case intended:
			t.Logf("%s: listed as an intended difference, but both say %s", c.name, got[0])
		default:
			t.Logf("%s: %s", c.name, got[0])
		}
	}
	t.Logf("intended differences:\n%s", strings.Join(diffs, "\n"))
}

// TestSpliceQuiet: large reads do not make go-fuse log a splice warning
// each (a 1 MiB read plus its header does not fit a 1 MiB pipe).
func TestSpliceQuiet(t *testing.T) {
	needFUSE(t)
	fsys := pfstest.Start(t, 2)
	var logBuf lockedBuffer
	mnt := mount(t, fsys.Meta.Addr, fusefs.Options{Log: slogTo(&logBuf)})
	stdlog := captureStdLog(t)
	p := filepath.Join(mnt, "big")
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flags := range []int{os.O_RDONLY, os.O_RDONLY | syscall.O_DIRECT} {
		f, err := os.OpenFile(p, flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<20+4096)
		aligned := buf[4096-int(uintptrOf(buf)%4096):][:1<<20]
		var got []byte
		for {
			n, err := f.Read(aligned)
			got = append(got, aligned[:n]...)
			if err != nil || n == 0 {
				break
			}
		}
		f.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("flags %#x: read %d bytes, not what was written", flags, len(got))
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, l := range []string{logBuf.String(), stdlog.String()} {
		if strings.Contains(l, "splice") {
			t.Fatalf("mount log has splice warnings:\n%.2000s", l)
		}
	}
}
