package fsx_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// mountPunch enables hole punching on the mount. Until the mount serves
// fallocate it answers EOPNOTSUPP; the lead sets this to true at merge.
const mountPunch = false

// mountOps is the operation count per mode and seed on the mount (issue 11:
// at least 100,000 in CI).
const mountOps = 100000

func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount tests need root (they mount with mount(2)); run as root to include them")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("mount tests need /dev/fuse: ", err)
	}
}

// mountFS starts a meta and 3 I/O servers and mounts them in this process
// for the test's life.
func mountFS(t *testing.T) string {
	t.Helper()
	fsys := pfstest.Start(t, 3)
	dir := t.TempDir()
	cl := client.New(fsys.Meta.Addr)
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
	return dir
}

// command runs the corral binary in a child process: the exerciser's mmap
// faults must not block a thread of the process serving the mount, and the
// child is not started in a directory of the mount (a vfork child would
// block this process's FUSE server).
func command(t *testing.T, ctx context.Context, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func runFsx(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := command(t, ctx, bin, append([]string{"fsx", "--quiet"}, append(args, dir)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("corral fsx %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("corral fsx %s: %s(%s)", strings.Join(args, " "), out, time.Since(start).Round(time.Millisecond))
}

// TestMount runs the exerciser on a real mount in each mode.
func TestMount(t *testing.T) {
	needFUSE(t)
	bin := pfstest.Binary(t)
	mnt := mountFS(t)
	for _, mode := range []string{"buffered", "mmap", "direct"} {
		t.Run(mode, func(t *testing.T) {
			runFsx(t, bin, mnt, "--seed", "1", "--mode", mode, "--ops", strconv.Itoa(mountOps), "--punch="+strconv.FormatBool(mountPunch))
		})
	}
}
