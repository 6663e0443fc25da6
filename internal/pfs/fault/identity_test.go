package fault

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
)

// An I/O server started before the metadata server waits for it (it used to
// exit at once), then registers and serves; so does a node.
func TestIODStartsBeforeMeta(t *testing.T) {
	c := &cluster{t: t, dir: t.TempDir(), metaAddr: freeAddr(t), files: map[string][]byte{}}
	c.iodAddrs = []string{freeAddr(t)}
	c.iods = []*proc{nil}
	iod := c.startIOD(0)
	node := spawn(t, "node", "node", "--listen", "127.0.0.1:0", "--meta", c.metaAddr)
	var mount *proc
	mnt := t.TempDir()
	if lab.Have(t, lab.FUSE) {
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) }) // runs after the mount's stop
		mount = spawn(t, "mount", "mount", "--meta", c.metaAddr, mnt)
	}
	iod.waitLog(t, "waiting for meta at "+c.metaAddr, 20*time.Second)
	node.waitLog(t, "waiting for meta at "+c.metaAddr, 20*time.Second)
	if mount != nil {
		mount.waitLog(t, "waiting for meta at "+c.metaAddr, 20*time.Second)
	}
	time.Sleep(time.Second) // a few retries: still waiting, not gone
	if iod.exited() || node.exited() || (mount != nil && mount.exited()) {
		t.Fatal("a daemon exited while meta was not up")
	}
	if n := strings.Count(iod.logText(), "waiting for meta"); n != 1 {
		t.Errorf("iod logged the wait %d times, want once", n)
	}
	// Ctrl-C still stops a waiting daemon, cleanly.
	other := spawn(t, "iod-interrupted", "iod", "--listen", "127.0.0.1:0", "--data", filepath.Join(c.dir, "other"), "--meta", c.metaAddr)
	other.waitLog(t, "waiting for meta", 20*time.Second)
	other.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-other.done:
		if code := other.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("interrupted while waiting: exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Error("a waiting iod ignored SIGINT")
	}
	c.startMeta()
	iod.waitReady(t)
	node.waitLog(t, "metadata server reachable", 20*time.Second)
	c.mustPut("/f", 300<<10)
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable: %v", failed)
	}
	if mount != nil {
		mount.waitReady(t)
		b, err := os.ReadFile(filepath.Join(mnt, "f"))
		if err != nil || !bytes.Equal(b, c.files["/f"]) {
			t.Fatalf("read through the mount: %d bytes, %v", len(b), err)
		}
	}
}

// An I/O server restarted on an empty data directory at its old address
// used to register as a new server at the same address (two IDs, one
// process) and answer reads of existing files with zeros. Now the old server
// is marked lost, nothing reads as zeros, new files avoid it, and `fs
// servers replace` accepts the empty disk deliberately.
func TestIODRestartedOnEmptyDirectory(t *testing.T) {
	c := newCluster(t, 3)
	// One copy: with two, a read of the lost server's stripes is served by
	// the other copy or refused at open, depending on whether meta has
	// marked it lost yet (the test flaked on that under load).
	c.mustFS("layout", "set", "/", "--replicas", "1")
	for i := range 6 {
		c.mustPut("/before"+string(rune('a'+i)), 200<<10+i*4097)
	}
	victim := c.serverID(1)
	c.iods[1].kill()
	if err := os.RemoveAll(c.iodDir(1)); err != nil {
		t.Fatal(err)
	}
	iod := c.startIOD(1)
	// This build waits for `servers replace`; an older one served at once.
	iod.waitAny(t, 20*time.Second, "corral fs servers replace", ": listening on ")

	// Files spanning the lost server fail clearly; none reads wrong.
	failed := c.verify()
	if t.Failed() {
		t.FailNow()
	}
	iod.waitLog(t, "corral fs servers replace", 20*time.Second)
	if iod.exited() {
		t.Fatal("iod on the empty directory exited instead of waiting")
	}
	c.waitState(victim, "lost")
	// While lost, the client itself refuses its stripes, naming the server.
	for _, p := range failed {
		if _, out, ok := c.get(p); ok || !strings.Contains(out, "is lost") {
			t.Errorf("%s while its server is lost: ok %v, %q", p, ok, out)
		}
	}
	out := c.mustFS("servers")
	if strings.Count(out, c.iodAddrs[1]) != 1 {
		t.Fatalf("address %s listed more than once:\n%s", c.iodAddrs[1], out)
	}
	for p := range c.files {
		if slices.Contains(c.servers(p), victim) != slices.Contains(failed, p) {
			t.Errorf("%s on %v: read failed %v", p, c.servers(p), slices.Contains(failed, p))
		}
	}
	// New files avoid it.
	c.mustPut("/during", 300<<10)
	if slices.Contains(c.servers("/during"), victim) {
		t.Fatalf("new file placed on lost server %d", victim)
	}

	// Accept the empty disk: the iod takes the ID over; the old data stay
	// lost (EIO, never zeros), new files use it again.
	c.mustFS("servers", "replace", itoa(victim))
	iod.waitReady(t)
	if got := c.serverID(1); got != victim {
		t.Fatalf("replacement took ID %d, want %d", got, victim)
	}
	c.waitState(victim, "up")
	for _, p := range failed {
		_, out, ok := c.get(p)
		if ok {
			t.Fatalf("%s read with status 0 after its server's disk was replaced", p)
		}
		if !strings.Contains(out, "lost") {
			t.Errorf("%s: error does not say the data were lost: %q", p, out)
		}
		delete(c.files, p) // lost, as the test expects
	}
	c.mustPut("/after", 500<<10, "--stripe-count", "all")
	if !slices.Contains(c.servers("/after"), victim) {
		t.Fatalf("file with --stripe-count all not on the replaced server: %v", c.servers("/after"))
	}
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable after replace: %v", failed)
	}
	if !strings.Contains(c.meta.logText(), "lost") {
		t.Error("meta did not log the lost server")
	}
}

// An I/O server claiming the address of another live one is refused with an
// error naming the server and address, and changes nothing (it used to
// register a second ID for the same address).
func TestIODAtAddressOfAnother(t *testing.T) {
	c := newCluster(t, 2)
	c.mustPut("/f", 256<<10)
	owner := c.serverID(0)

	// An empty directory advertising server 1's address.
	imp := spawn(t, "impostor", "iod", "--listen", "127.0.0.1:0", "--advertise", c.iodAddrs[0],
		"--data", filepath.Join(c.dir, "impostor"), "--meta", c.metaAddr)
	select {
	case <-imp.done:
	case <-time.After(20 * time.Second):
		t.Fatal("iod at another's address still running")
	}
	msg := imp.logText()
	if !strings.Contains(msg, c.iodAddrs[0]) || !strings.Contains(msg, "server "+itoa(owner)) {
		t.Fatalf("error does not name the address and its server: %q", msg)
	}
	// Server 2's directory at server 1's address.
	c.iods[1].stop()
	imp2 := spawn(t, "moved", "iod", "--listen", "127.0.0.1:0", "--advertise", c.iodAddrs[0],
		"--data", c.iodDir(1), "--meta", c.metaAddr)
	select {
	case <-imp2.done:
	case <-time.After(20 * time.Second):
		t.Fatal("iod with another's address still running")
	}
	msg = imp2.logText()
	if !strings.Contains(msg, "server "+itoa(owner)) || !strings.Contains(msg, "server "+itoa(c.serverID(1))) {
		t.Fatalf("error does not name both servers: %q", msg)
	}
	c.waitState(owner, "up")
	if out := c.mustFS("servers"); strings.Count(out, c.iodAddrs[0]) != 1 {
		t.Fatalf("address listed twice:\n%s", out)
	}
	c.startIOD(1).waitReady(t)
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable: %v", failed)
	}
}

// A metadata server restarted while an I/O server is dead places new files
// only on the servers that report in (it used to use every server ever
// registered), and an explicit stripe count over them is an error.
func TestMetaRestartedWithDeadIOD(t *testing.T) {
	c := newCluster(t, 3)
	c.mustFS("layout", "set", "/", "--replicas", "1") // one copy: a dead server's data is unreadable
	c.mustPut("/before", 400<<10)
	dead := c.serverID(2)
	c.iods[2].kill()
	c.meta.kill()
	c.startMeta().waitReady(t)
	c.waitState(dead, "down")
	c.waitState(c.serverID(0), "up")
	c.waitState(c.serverID(1), "up")
	for i := range 4 {
		p := "/after" + itoa(uint32(i))
		c.mustPut(p, 200<<10)
		if ids := c.servers(p); slices.Contains(ids, dead) || len(ids) != 2 {
			t.Fatalf("%s placed on %v (server %d is dead)", p, ids, dead)
		}
	}
	out, rc := c.put("/three", 100<<10, "--stripe-count", "3")
	if rc == 0 || !strings.Contains(out, "only 2 I/O servers are usable") {
		t.Fatalf("stripe count 3 with a dead server: exit %d: %s", rc, out)
	}
	if out, _ := c.fs("ls", "/"); strings.Contains(out, "three") || strings.Contains(out, "corral-put") {
		t.Fatalf("failed put left a file behind:\n%s", out)
	}
	failed := c.verify()
	if len(failed) != 1 || failed[0] != "/before" {
		t.Fatalf("unreadable with server %d dead: %v (want only /before)", dead, failed)
	}
	c.startIOD(2).waitReady(t)
	if failed := c.verify(); len(failed) > 0 {
		t.Fatalf("unreadable after the server came back: %v", failed)
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
