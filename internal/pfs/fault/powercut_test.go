package fault

// Power cuts under load: every daemon's data directory is a power-cut
// harness (internal/powercut: unsynced writes and directory entries are
// held in memory and dropped at a cut, strict POSIX rules). Writers store
// files through the client library and record what was acknowledged; the
// test kills the chosen processes with SIGKILL, cuts their disks, starts
// them again on what survived, and reads every acknowledged file back byte
// for byte: none may be missing or different.
//
// The short form (one round, ~1.5 s of load) runs with `go test`; set
// CORRAL_POWERCUT_ROUNDS (e.g. 10) and CORRAL_POWERCUT_LOAD (a duration,
// e.g. 5s) for a longer one.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/powercut"
	"github.com/corral-cluster/corral/internal/safefile"
)

func powerRounds() int {
	if n, err := strconv.Atoi(os.Getenv("CORRAL_POWERCUT_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

func powerLoad() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CORRAL_POWERCUT_LOAD")); err == nil && d > 0 {
		return d
	}
	return 1500 * time.Millisecond
}

// pnode is a daemon whose data directory is a harness.
type pnode struct {
	name string
	addr string
	disk *powercut.Disk
	args []string
	env  []string // nil: the test's environment
	p    *proc
}

func (n *pnode) start(t *testing.T) {
	t.Helper()
	n.p = spawnEnv(t, n.name, n.env, n.args...)
}

// cut is a power cut of this machine: the process dies, unsynced state goes.
func (n *pnode) cut(t *testing.T) {
	t.Helper()
	if err := n.disk.Cut(); err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
}

func mountDisk(t *testing.T) *powercut.Disk {
	t.Helper()
	d, err := powercut.Mount(t.TempDir(), t.TempDir())
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

// spawnEnv is spawn with the environment env (nil: inherited).
func spawnEnv(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = env
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

// pcluster is metas and I/O servers each on its own harness.
type pcluster struct {
	t     *testing.T
	metas []*pnode
	iods  []*pnode
	list  string // the metadata members, comma-separated

	mu    sync.Mutex
	files map[string][]byte // acknowledged contents by path
	seq   int
	// small: the writers make files of at most client.SmallFileMax bytes
	// with CreateFile (one commit, the bytes written beside it), their
	// copies as the root directory's policy says (smallLayout).
	small bool
}

// newPCluster starts nMeta metadata servers (1: a single one; 3: a Raft
// group) and nIOD I/O servers, each on a fresh harness. The cluster
// secret is on meta's disk, durable, before the first start.
func newPCluster(t *testing.T, nMeta, nIOD int, metaArgs ...string) *pcluster {
	t.Helper()
	powercut.Need(t)
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &pcluster{t: t, files: map[string][]byte{}}
	var peers, addrs []string
	for i := range nMeta {
		n := &pnode{name: fmt.Sprintf("meta%d", i+1), addr: freeAddr(t), disk: mountDisk(t)}
		if err := safefile.WriteSecret(filepath.Join(n.disk.Dir(), proto.SecretFileName), secret); err != nil {
			t.Fatal(err)
		}
		c.metas = append(c.metas, n)
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, n.addr))
		addrs = append(addrs, n.addr)
	}
	c.list = strings.Join(addrs, ",")
	for i, n := range c.metas {
		n.args = []string{"meta", "--listen", n.addr, "--data", n.disk.Dir()}
		if nMeta > 1 {
			n.args = append(n.args, "--id", strconv.Itoa(i+1), "--peers", strings.Join(peers, ","))
		}
		n.args = append(n.args, metaArgs...)
		n.start(t)
	}
	for _, n := range c.metas {
		n.p.waitReady(t)
	}
	for i := range nIOD {
		n := &pnode{name: fmt.Sprintf("iod%d", i+1), addr: freeAddr(t), disk: mountDisk(t)}
		n.args = []string{"iod", "--listen", n.addr, "--data", n.disk.Dir(), "--meta", c.list, "--heartbeat", "300ms"}
		c.iods = append(c.iods, n)
		n.start(t)
		n.p.waitReady(t)
	}
	return c
}

// load runs writers storing files of 1 B to 600 KiB with r copies until
// the returned function is called (it waits for them).
func (c *pcluster) load(r int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	cl := client.New(c.list)
	if c.small {
		lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.smallLayout(lctx, cl, r)
		lcancel()
		if err != nil {
			c.t.Fatalf("setting %d copies on the root directory: %v", r, err)
		}
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c.mu.Lock()
				c.seq++
				p := fmt.Sprintf("/f%d-%d", g, c.seq)
				c.mu.Unlock()
				size := 1 + mrand.IntN(600<<10)
				if c.small {
					size = mrand.IntN(client.SmallFileMax + 1)
				}
				data := make([]byte, size)
				rand.Read(data)
				wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
				var err error
				if c.small {
					_, err = cl.CreateFile(wctx, 1, p[1:], 0o644, data, client.CreateOpts{})
				} else {
					err = cl.WriteFile(wctx, p, bytes.NewReader(data), 0o644, client.CreateOpts{Replicas: uint32(r)}, nil)
				}
				wcancel()
				if err == nil {
					c.mu.Lock()
					c.files[p] = data
					c.mu.Unlock()
				} else if ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond) // a server is down: do not spin
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait(); cl.Close() }
}

// powerCut kills the nodes (SIGKILL, all before any cut), cuts their disks
// and starts them again.
func (c *pcluster) powerCut(nodes ...*pnode) {
	c.t.Helper()
	for _, n := range nodes {
		n.p.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, n := range nodes {
		<-n.p.done
	}
	for _, n := range nodes {
		n.cut(c.t)
	}
	for _, n := range nodes {
		n.start(c.t)
	}
	for _, n := range nodes {
		n.p.waitReady(c.t)
	}
}

// verify reads every acknowledged file back: lost counts those that cannot
// be read (within a minute of retries, for servers coming back), wrong
// those read with other bytes.
func (c *pcluster) verify() (acked, lost, wrong int) {
	c.t.Helper()
	cl := client.New(c.list)
	defer cl.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for _, p := range slices.Sorted(mapsKeys(c.files)) {
		want := c.files[p]
		var got []byte
		var err error
		for {
			got, err = readAll(cl, p, len(want))
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case err != nil:
			lost++
			if lost <= 5 {
				c.t.Errorf("acknowledged %s (%d bytes) cannot be read after the cut: %v", p, len(want), err)
			}
		case !bytes.Equal(got, want):
			wrong++
			if wrong <= 5 {
				c.t.Errorf("acknowledged %s reads %d bytes after the cut, %d of them different from the %d written", p, len(got), diff(got, want), len(want))
			}
		}
	}
	return len(c.files), lost, wrong
}

func readAll(cl *client.Client, p string, size int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := cl.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size+1) // one more: a longer file shows
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b[:n], nil
}

// rounds runs load, cuts the nodes pick chooses, and checks after each
// round that nothing acknowledged was lost: at least least rounds, more in
// the long form.
func (c *pcluster) rounds(r, least int, pick func(round int) []*pnode) {
	c.t.Helper()
	for round := range max(least, powerRounds()) {
		stop := c.load(r)
		time.Sleep(powerLoad())
		nodes := pick(round)
		var before powercut.Stats
		for _, n := range nodes {
			before = addStats(before, n.disk.Stats())
		}
		c.powerCut(nodes...)
		var after powercut.Stats
		for _, n := range nodes {
			after = addStats(after, n.disk.Stats())
		}
		time.Sleep(300 * time.Millisecond) // a little load after the restart too
		stop()
		acked, lost, wrong := c.verify()
		if c.small {
			wrong += c.verifyCopies()
		}
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.name
		}
		c.t.Logf("round %d, cut %s (dropping %d KiB unsynced and %d directory changes): %d acknowledged files, %d lost, %d wrong",
			round+1, strings.Join(names, "+"), (after.DroppedBytes-before.DroppedBytes)>>10, after.DroppedEntries-before.DroppedEntries, acked, lost, wrong)
		if acked == 0 {
			c.t.Fatal("no write was acknowledged: the load did not run")
		}
		if lost+wrong > 0 {
			c.t.FailNow()
		}
	}
}

func addStats(a, b powercut.Stats) powercut.Stats {
	a.DroppedBytes += b.DroppedBytes
	a.DroppedEntries += b.DroppedEntries
	return a
}

func (c *pcluster) all() []*pnode { return append(slices.Clone(c.metas), c.iods...) }

// A cut of the whole cluster: meta and every I/O server at once.
func TestPowerCutAll(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", r), func(t *testing.T) {
			c := newPCluster(t, 1, 2)
			c.rounds(r, 1, func(int) []*pnode { return c.all() })
		})
	}
}

// A cut of every I/O server while meta stays up.
func TestPowerCutIODs(t *testing.T) {
	c := newPCluster(t, 1, 2)
	c.rounds(1, 1, func(int) []*pnode { return c.iods })
}

// A cut of one I/O server holding one of two copies: the other keeps
// serving; after the restart both must agree with what was acknowledged.
func TestPowerCutOneIOD(t *testing.T) {
	c := newPCluster(t, 1, 2)
	c.rounds(2, 3, func(round int) []*pnode { return []*pnode{c.iods[round%2]} })
}

// A cut of meta alone.
func TestPowerCutMeta(t *testing.T) {
	c := newPCluster(t, 1, 2)
	c.rounds(1, 1, func(int) []*pnode { return c.metas })
}

// A cut of a three-member Raft group and the I/O servers together, and of
// one member alone.
func TestPowerCutRaftGroup(t *testing.T) {
	c := newPCluster(t, 3, 2)
	c.rounds(1, 2, func(round int) []*pnode {
		if round%2 == 1 {
			return c.metas[:1]
		}
		return c.all()
	})
}

// A cut right after meta's first start must not make it a new cluster: the
// store and the secret it created must survive, or the I/O servers (which
// recorded the cluster) refuse it and the clients' secret no longer works.
func TestPowerCutMetaFirstStart(t *testing.T) {
	powercut.Need(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, proto.SecretEnv+"=") {
			env = append(env, kv)
		}
	}
	m := &pnode{name: "meta", addr: freeAddr(t), disk: mountDisk(t), env: env}
	m.args = []string{"meta", "--listen", m.addr, "--data", m.disk.Dir()}
	m.start(t)
	m.p.waitReady(t)
	secret, err := os.ReadFile(filepath.Join(m.disk.Dir(), proto.SecretFileName))
	if err != nil {
		t.Fatalf("meta made no secret: %v", err)
	}
	// The I/O server and the client use a copy of it off the harness.
	sf := filepath.Join(t.TempDir(), proto.SecretFileName)
	if err := os.WriteFile(sf, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	ienv := append(slices.Clone(env), proto.SecretEnv+"="+sf)
	iod := &pnode{name: "iod1", addr: freeAddr(t), disk: mountDisk(t), env: ienv}
	iod.args = []string{"iod", "--listen", iod.addr, "--data", iod.disk.Dir(), "--meta", m.addr, "--heartbeat", "300ms"}
	iod.start(t)
	iod.p.waitReady(t)

	c := &pcluster{t: t, metas: []*pnode{m}, iods: []*pnode{iod}, list: m.addr, files: map[string][]byte{}}
	c.powerCut(m)
	after, err := os.ReadFile(filepath.Join(m.disk.Dir(), proto.SecretFileName))
	if err != nil || !bytes.Equal(after, secret) {
		t.Fatalf("meta's cluster secret did not survive a cut after its first start (read %d bytes, %v): clients and servers holding it are refused", len(after), err)
	}
	// The I/O server must still belong to this meta's cluster: a write
	// through it succeeds.
	cred, err := proto.LoadCredential(sf)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(m.addr, client.WithSecurity(proto.Security{Cred: cred}))
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = cl.WriteFile(ctx, "/after-cut", strings.NewReader("x"), 0o644, client.CreateOpts{}, nil)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write succeeds after meta's cut: %v\niod log:\n%s", err, iod.p.logText())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if log := iod.p.logText(); strings.Contains(log, "belongs to cluster") {
		t.Fatalf("the I/O server was refused as of another cluster:\n%s", log)
	}
}
