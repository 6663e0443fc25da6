// Package fault holds fault tests of the parallel file system with real
// processes: I/O servers killed, restarted on empty or foreign directories,
// started before the metadata server, out of space; a metadata server
// restarted while an I/O server is dead. Each ends with every acknowledged
// byte read back intact or a clear error, never wrong data with status 0.
package fault

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// secretFile is the cluster secret every process of these tests proves: the
// daemons and `corral fs` find it in CORRAL_SECRET_FILE, and each cluster's
// meta is given it as its DATA/cluster.secret before its first start.
var secretFile string

func TestMain(m *testing.M) {
	pfstest.SecretMain(m, func(f string) { secretFile = f })
}

// binary is the corral command under test: this tree's, or the one
// CORRAL_FAULT_BIN names (to run these tests against an older build and see
// which of its defects they catch).
func binary(t *testing.T) string {
	if b := os.Getenv("CORRAL_FAULT_BIN"); b != "" {
		return b
	}
	return pfstest.Binary(t)
}

func oldBuild() bool { return os.Getenv("CORRAL_FAULT_BIN") != "" }

// proc is a daemon started without waiting for it to serve (an I/O server
// that must wait is the point of several tests).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func spawn(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); lf.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process with SIGTERM, then SIGKILL.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// kill ends it as a crash would.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitLog waits until the log contains s.
func (p *proc) waitLog(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.logText(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in its log within %v", p.name, s, within)
		}
		if p.exited() && !strings.Contains(p.logText(), s) {
			t.Fatalf("%s exited before logging %q", p.name, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAny waits until the log contains one of ss and returns it.
func (p *proc) waitAny(t *testing.T, within time.Duration, ss ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		log := p.logText()
		for _, s := range ss {
			if strings.Contains(log, s) {
				return s
			}
		}
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("%s: none of %q in its log", p.name, ss)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	p.waitLog(t, ": listening on ", 30*time.Second)
}

// freeAddr reserves a loopback port for a server that must come back at
// the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// cluster is a metadata server and I/O servers on fixed loopback addresses.
type cluster struct {
	t        *testing.T
	dir      string
	metaAddr string
	meta     *proc
	metaArgs []string
	iodAddrs []string
	iods     []*proc
	files    map[string][]byte // acknowledged contents by path
}

func newCluster(t *testing.T, n int, metaArgs ...string) *cluster {
	c := &cluster{t: t, dir: t.TempDir(), metaAddr: freeAddr(t), metaArgs: metaArgs, files: map[string][]byte{}}
	c.startMeta()
	c.meta.waitReady(t)
	for i := range n {
		c.iodAddrs = append(c.iodAddrs, freeAddr(t))
		c.iods = append(c.iods, nil)
		c.startIOD(i).waitReady(t)
	}
	return c
}

func (c *cluster) startMeta() *proc {
	metaDir := filepath.Join(c.dir, "meta")
	if err := os.MkdirAll(metaDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if b, err := os.ReadFile(secretFile); err != nil {
		c.t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(metaDir, proto.SecretFileName), b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	args := []string{"meta", "--listen", c.metaAddr, "--data", metaDir}
	if !oldBuild() {
		args = append(args, c.metaArgs...)
	}
	c.meta = spawn(c.t, "meta", args...)
	return c.meta
}

func (c *cluster) iodDir(i int) string { return filepath.Join(c.dir, fmt.Sprintf("iod%d", i+1)) }

func (c *cluster) startIOD(i int, extra ...string) *proc {
	args := []string{"iod", "--listen", c.iodAddrs[i], "--data", c.iodDir(i), "--meta", c.metaAddr}
	if !oldBuild() {
		args = append(args, "--heartbeat", "300ms") // an older build has no such flag
	}
	args = append(args, extra...)
	c.iods[i] = spawn(c.t, fmt.Sprintf("iod%d", i+1), args...)
	return c.iods[i]
}

// fs runs `corral fs ARGS` and returns its output and exit status.
func (c *cluster) fs(args ...string) (string, int) {
	cmd := exec.Command(binary(c.t), append([]string{"fs", "--meta", c.metaAddr}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), max(ee.ExitCode(), 1)
		}
		c.t.Fatal(err)
	}
	return string(out), 0
}

func (c *cluster) mustFS(args ...string) string {
	c.t.Helper()
	out, rc := c.fs(args...)
	if rc != 0 {
		c.t.Fatalf("corral fs %s: exit %d: %s", strings.Join(args, " "), rc, out)
	}
	return out
}

// put stores size random bytes at remote; acknowledged files are
// remembered for verify.
func (c *cluster) put(remote string, size int, args ...string) (string, int) {
	data := make([]byte, size)
	rand.Read(data)
	local := filepath.Join(c.t.TempDir(), "src")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		c.t.Fatal(err)
	}
	out, rc := c.fs(append([]string{"put", local, remote}, args...)...)
	if rc == 0 {
		c.files[remote] = data
	}
	return out, rc
}

func (c *cluster) mustPut(remote string, size int, args ...string) {
	c.t.Helper()
	if out, rc := c.put(remote, size, args...); rc != 0 {
		c.t.Fatalf("put %s: exit %d: %s", remote, rc, out)
	}
}

// get reads remote back: its bytes, or the error output with ok false.
func (c *cluster) get(remote string) ([]byte, string, bool) {
	local := filepath.Join(c.t.TempDir(), "dst")
	out, rc := c.fs("get", remote, local)
	if rc != 0 {
		return nil, out, false
	}
	b, err := os.ReadFile(local)
	if err != nil {
		c.t.Fatal(err)
	}
	return b, out, true
}

// verify reads every acknowledged file back: intact, or a clear error
// (never other bytes with status 0). It returns the paths that failed.
func (c *cluster) verify() (failed []string) {
	c.t.Helper()
	for _, p := range slices.Sorted(mapsKeys(c.files)) {
		b, out, ok := c.get(p)
		if !ok {
			if !strings.Contains(out, "corral fs get:") {
				c.t.Errorf("get %s failed without a clear error: %q", p, out)
			}
			failed = append(failed, p)
			continue
		}
		if !bytes.Equal(b, c.files[p]) {
			c.t.Errorf("get %s: exit 0 but %d bytes differ from the %d acknowledged", p, diff(b, c.files[p]), len(c.files[p]))
		}
	}
	return failed
}

func mapsKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func diff(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

var layoutRE = regexp.MustCompile(`servers \[([0-9 ]*)\]`)

// servers is the layout of remote (server IDs in stripe order).
func (c *cluster) servers(remote string) []uint32 {
	c.t.Helper()
	m := layoutRE.FindStringSubmatch(c.mustFS("stat", remote))
	if m == nil {
		c.t.Fatalf("stat %s: no layout", remote)
	}
	var ids []uint32
	for _, f := range strings.Fields(m[1]) {
		n, _ := strconv.ParseUint(f, 10, 32)
		ids = append(ids, uint32(n))
	}
	return ids
}

// serverID is the ID recorded in I/O server i's data directory.
func (c *cluster) serverID(i int) uint32 {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.iodDir(i), "identity"))
	if err != nil {
		// An older build keeps the ID alone, 4 bytes big-endian.
		if old, oerr := os.ReadFile(filepath.Join(c.iodDir(i), "id")); oerr == nil && len(old) == 4 {
			return uint32(old[0])<<24 | uint32(old[1])<<16 | uint32(old[2])<<8 | uint32(old[3])
		}
		c.t.Fatal(err)
	}
	m := regexp.MustCompile(`server (\d+)`).FindSubmatch(b)
	if m == nil {
		c.t.Fatalf("identity of iod%d: %q", i+1, b)
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 32)
	return uint32(n)
}

// waitState waits until `corral fs servers` shows server id in state.
func (c *cluster) waitState(id uint32, state string) {
	c.t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+\S+\s+(\S+)`, id))
	deadline := time.Now().Add(40 * time.Second)
	for {
		out := c.mustFS("servers")
		if !strings.Contains(out, "STATE") {
			time.Sleep(2 * time.Second) // an older build shows no states: give it time
			return
		}
		if m := re.FindStringSubmatch(out); m != nil && m[1] == state {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("server %d never became %s:\n%s", id, state, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
