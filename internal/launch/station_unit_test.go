package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
)

func TestReadyAddr(t *testing.T) {
	for line, want := range map[string]string{
		"corral node: listening on 127.0.0.21:8080\n":                                                "127.0.0.21:8080",
		"corral meta: listening on [::1]:7400":                                                       "[::1]:7400",
		"station listening on https://127.0.0.1:7600 (CA d/tls/ca.pem, admin token d/admin.token)\n": "127.0.0.1:7600",
		"corral mgmt: listening on https://127.0.58.1:7600/\n":                                       "127.0.58.1:7600",
		"GET / 200 listening on nothing\n":                                                           "",
		"glusterd: listening on 10.77.0.5\n":                                                         "10.77.0.5",
		"corral node: listening on \n":                                                               "",
	} {
		if got := readyAddr(line); got != want {
			t.Errorf("readyAddr(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestRoleBins: every role gets its own path to the binary (a hard link
// here: one directory); a new file renamed over one role's path, as a
// rollout does, leaves the other roles' and up's own binary alone; the
// next start puts up's binary back.
func TestRoleBins(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "corral")
	if err := os.WriteFile(bin, []byte("old build"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{FS: &FS{Bin: bin, Data: filepath.Join(dir, "data")}}
	for _, r := range []string{"node1", "node2"} {
		if err := c.installRoleBin(r); err != nil {
			t.Fatal(err)
		}
	}
	st1, _ := os.Stat(c.RoleBin("node1"))
	st0, _ := os.Stat(bin)
	if ino := func(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }; ino(st1) != ino(st0) {
		t.Errorf("node1's binary is a copy, not a hard link, within one file system")
	}
	if st1.Mode().Perm()&0o111 == 0 {
		t.Errorf("node1's binary is not executable: %v", st1.Mode())
	}
	tmp := c.RoleBin("node1") + ".new"
	if err := os.WriteFile(tmp, []byte("new build"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.RoleBin("node1")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{bin: "old build", c.RoleBin("node2"): "old build", c.RoleBin("node1"): "new build"} {
		if b, _ := os.ReadFile(path); string(b) != want {
			t.Errorf("%s: %q, want %q", path, b, want)
		}
	}
	if err := c.installRoleBin("node1"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.RoleBin("node1")); string(b) != "old build" {
		t.Errorf("a new start left node1 on %q, want up's own binary", b)
	}
	// Another file system (or no hard links): a copy.
	if err := copyFile(bin, filepath.Join(dir, "copy"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestJoinArgs(t *testing.T) {
	c := &Cluster{FS: &FS{Data: "/d"}, Cfg: ClusterConfig{Station: &StationConfig{Listen: "127.0.0.1:7600"}}}
	got := strings.Join(c.joinArgs("node2"), " ")
	want := "--join=https://127.0.0.1:7600 --token-file /d/state/tokens/node.token --name node2 --state /d/state/node2 --station-ca /d/mgmt/tls/ca.pem"
	if got != want {
		t.Errorf("join args:\n%s\nwant\n%s", got, want)
	}
	if got := c.joinArgs("director"); len(got) < 3 || got[1] != "--join-token-file" {
		t.Errorf("the director's join token goes in --join-token-file: %v", got)
	}
	if a := c.joinArgs("meta"); len(a) < 2 || a[0] != "--join=https://127.0.0.1:7600" {
		t.Errorf("meta joins the station too: %v", a)
	}
	if a := c.joinArgs("mgmt"); a != nil {
		t.Errorf("the station joins nothing: %v", a)
	}
	for role, kind := range map[string]string{"meta2": "meta", "director": "director", "iod10": "iod"} {
		if k := RoleKind(role); k != kind {
			t.Errorf("RoleKind(%s) = %s", role, k)
		}
	}
}

// TestStopLeftovers: a process running DATA/bin/ROLE/corral that no up
// watches (an orphan of a killed up) is ended by the next start; others
// (the same program elsewhere) are not.
func TestStopLeftovers(t *testing.T) {
	lab.Need(t, lab.Tool("sleep"))
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cluster{FS: &FS{Bin: sleep, Data: filepath.Join(dir, "data")}}
	if err := c.installRoleBin("node1"); err != nil {
		t.Fatal(err)
	}
	run := func(bin string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(args, "30")...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	left := run(c.RoleBin("node1"))
	// After a rollout argv[0] may be any binary: its --state tells.
	// (A loop, so that sh does not exec sleep and change its command line.)
	sh := run("/bin/sh", "-c", "while :; do sleep 0.1; done", "--name", "node2", "--state", filepath.Join(c.Data, "state", "node2"))
	other := run(sleep)
	got := c.stopLeftovers()
	if len(got) != 2 || !strings.HasPrefix(got[0], "node1 (pid ") && !strings.HasPrefix(got[1], "node1 (pid ") {
		t.Fatalf("stopped %v, want node1 and node2", got)
	}
	for _, cmd := range []*exec.Cmd{left, sh} {
		if err := cmd.Wait(); err == nil {
			t.Errorf("leftover role %v was not ended", cmd.Args)
		}
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process outside DATA/bin was ended: %v", err)
	}
}
