package fault

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
)

// replicated is a cluster of n I/O servers with /r holding r copies of
// every stripe unit.
func replicated(t *testing.T, n, r int) *cluster {
	t.Helper()
	c := newCluster(t, n)
	c.mustFS("mkdir", "/r")
	c.mustFS("layout", "set", "/r", "--replicas", strconv.Itoa(r))
	return c
}

// writer writes files under /r through the library and remembers what was
// acknowledged; lat is the longest single write.
type writer struct {
	c    *cluster
	cl   *client.Client
	span map[string][2]time.Time // when each acknowledged write began and ended
	mu   sync.Mutex
	lat  time.Duration
	n    int
}

func newWriter(c *cluster) *writer {
	cl := client.New(c.metaAddr)
	c.t.Cleanup(cl.Close)
	return &writer{c: c, cl: cl}
}

// write stores one file of size random bytes; an acknowledged one is
// remembered in c.files.
func (w *writer) write(p string, size int) error {
	data := make([]byte, size)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err := w.cl.WriteFile(ctx, p, bytes.NewReader(data), 0o644, client.CreateOpts{}, nil)
	d := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lat = max(w.lat, d)
	if err == nil {
		w.c.files[p] = data
		if w.span == nil {
			w.span = map[string][2]time.Time{}
		}
		w.span[p] = [2]time.Time{start, start.Add(d)}
		w.n++
	}
	return err
}

// bytesOn sums the bytes of server id's copies of the acknowledged files
// written wholly after killEnd (lower) and of those still being written
// after killStart (upper).
func (w *writer) bytesOn(t *testing.T, id uint32, killStart, killEnd time.Time) (lower, upper uint64) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, sp := range w.span {
		if sp[1].Before(killStart) {
			continue
		}
		a, err := w.cl.Stat(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		lay := layout.Layout{StripeSize: a.StripeSize, Servers: a.Servers, Replicas: int(a.Replicas), Extra: a.Extra}
		var n uint64
		for k := range lay.Servers {
			if slices.Contains(lay.Column(k), id) {
				n += uint64(lay.ObjectSize(k, int64(a.Size)))
			}
		}
		upper += n
		if sp[0].After(killEnd) {
			lower += n
		}
	}
	return lower, upper
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// readAll reads every acknowledged file through the library: each must
// read back whole, without an error.
func (w *writer) readAll(t *testing.T, why string) {
	t.Helper()
	ctx := context.Background()
	for p, want := range w.c.files {
		f, err := w.cl.Open(ctx, p)
		if err != nil {
			t.Errorf("%s: open %s: %v", why, p, err)
			continue
		}
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if err != nil {
			t.Errorf("%s: read %s: %v", why, p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s: %d bytes differ from the %d acknowledged", why, p, diff(got, want), len(want))
		}
	}
}

// waitHealed waits until no server has stale bytes left, twice 2.5 s
// apart: meta computes the figure once a heal pass (every second), so a
// mark just made may not show yet.
func (c *cluster) waitHealed(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	clean := false
	for {
		out := c.mustFS("servers")
		switch {
		case !stalePending(out) && clean:
			return
		case !stalePending(out):
			clean = true
			time.Sleep(2500 * time.Millisecond)
			continue
		}
		clean = false
		if time.Now().After(deadline) {
			c.t.Fatalf("heal not done within %v:\n%s", within, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// An I/O server killed during writes with 2 and 3 copies: every
// acknowledged byte reads back while it is down, no read fails; it comes
// back, is healed, and then serves what it missed (another server killed
// after the heal leaves it the only copy of some units).
func TestReplicasSurviveKill(t *testing.T) {
	for _, r := range []int{2, 3} {
		t.Run(fmt.Sprintf("replicas%d", r), func(t *testing.T) {
			c := replicated(t, 4, r)
			w := newWriter(c)
			for i := range 6 {
				if err := w.write(fmt.Sprintf("/r/before%d", i), 300<<10+i*4096); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 60 {
					if err := w.write(fmt.Sprintf("/r/during%d", i), 200<<10+i*1000); err != nil {
						t.Errorf("write during the kill: %v", err)
					}
				}
			}()
			// Kill iod2 once the writers are well under way.
			for deadline := time.Now().Add(30 * time.Second); w.count() < 16 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			killStart := time.Now()
			c.iods[1].kill()
			killEnd := time.Now()
			killedAt := w.count()
			wg.Wait()
			if killedAt >= 66 {
				t.Fatal("every write was done before the kill")
			}
			// The stale bytes of the dead server, once meta's figure settles.
			dead := c.serverID(1)
			var stale uint64
			for range 10 {
				stale = max(stale, c.figures()[dead].Stale)
				time.Sleep(300 * time.Millisecond)
			}
			if stale == 0 {
				t.Fatalf("no stale bytes recorded after writes with a server down:\n%s", c.mustFS("servers"))
			}
			w.readAll(t, "with iod2 down")
			c.startIOD(1).waitReady(t)
			c.waitHealed(60 * time.Second)
			// What the dead server missed, from the files themselves: the
			// bytes of its copies of files written wholly after the kill
			// (at least), or partly (at most).
			lower, upper := w.bytesOn(t, dead, killStart, killEnd)
			healed := c.figures()[dead].Healed
			t.Logf("replicas %d: %d files acknowledged, longest write %v; heal copied %d bytes; the dead server missed %d-%d bytes (meta counted %d stale)",
				r, w.n, w.lat, healed, lower, upper, stale)
			if healed < lower || float64(healed) > 1.1*float64(upper) {
				t.Errorf("heal copied %d bytes, want between %d and 1.1 x %d", healed, lower, upper)
			}
			c.iods[2].kill()
			w.readAll(t, "after the heal, with iod3 down")
		})
	}
}

// A stopped I/O server (SIGSTOP: it holds its connections and answers
// nothing) stalls writes for at most 5 s; it is healed once it goes on.
func TestStoppedServerDoesNotStallWrites(t *testing.T) {
	c := replicated(t, 3, 2)
	w := newWriter(c)
	if err := w.write("/r/warm", 64<<10); err != nil {
		t.Fatal(err)
	}
	c.iods[0].cmd.Process.Signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			c.iods[0].cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	w.lat = 0
	for i := range 12 {
		if err := w.write(fmt.Sprintf("/r/s%d", i), 256<<10); err != nil {
			t.Fatalf("write with a stopped server: %v", err)
		}
	}
	t.Logf("longest write with one server stopped: %v", w.lat)
	if w.lat > 5*time.Second {
		t.Errorf("a write took %v with one server stopped, want at most 5 s", w.lat)
	}
	c.iods[0].cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	c.waitHealed(60 * time.Second)
	c.iods[1].kill()
	w.readAll(t, "after the heal, with iod2 down")
}

// objectFiles lists the object files of file ino in I/O server i's store.
func (c *cluster) objectFiles(i int, ino uint64) []string {
	c.t.Helper()
	dir := filepath.Join(c.iodDir(i), "objects", fmt.Sprintf("%02x", ino&0xff))
	var out []string
	name := strconv.FormatUint(ino, 10)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if n == name || len(n) > len(name) && n[:len(name)+1] == name+"." && !isSidecar(n) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// figures are `corral fs servers --json` by server ID.
func (c *cluster) figures() map[uint32]serverFigures {
	c.t.Helper()
	var ss []serverFigures
	if err := json.Unmarshal([]byte(c.mustFS("servers", "--json")), &ss); err != nil {
		c.t.Fatal(err)
	}
	m := map[uint32]serverFigures{}
	for _, s := range ss {
		m[s.ID] = s
	}
	return m
}

type serverFigures struct {
	ID            uint32
	State         string
	Stale, Healed uint64
}

func isSidecar(name string) bool { return strings.HasSuffix(name, ".crc") }

// stalePending reports whether `corral fs servers` shows stale bytes left
// on any server (the STALE column, the eighth).
func stalePending(out string) bool {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 7 && f[7] != "0B" {
			return true
		}
	}
	return false
}

// ino is the inode number of remote.
func (c *cluster) ino(remote string) uint64 {
	c.t.Helper()
	m := regexp.MustCompile(`Inode: (\d+)`).FindStringSubmatch(c.mustFS("stat", remote))
	if m == nil {
		c.t.Fatalf("stat %s: no inode number", remote)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// flip inverts one byte at off of the first object file of ino found on
// I/O server i; it reports whether there was one.
func (c *cluster) flip(i int, ino uint64, off int64) bool {
	c.t.Helper()
	files := c.objectFiles(i, ino)
	if len(files) == 0 {
		return false
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		c.t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		c.t.Fatal(err)
	}
	return true
}

// Bytes flipped in a stored block are detected on read, served from the
// other copy (the reader sees no error), and repaired by heal.
func TestBitRotServedAndRepaired(t *testing.T) {
	c := replicated(t, 3, 2)
	w := newWriter(c)
	if err := w.write("/r/f", 1<<20); err != nil {
		t.Fatal(err)
	}
	ino := c.ino("/r/f")
	flipped := -1
	for i := range c.iods {
		if c.flip(i, ino, 1000) {
			flipped = i
			break
		}
	}
	if flipped < 0 {
		t.Fatal("no object file of /r/f found")
	}
	// Every copy is read in turn (reads spread): each read must be right.
	for range 8 {
		w.readAll(t, "with a flipped byte")
	}
	// Heal repairs the block: fsck finds nothing left.
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, rc := c.fs("fsck", "/")
		if rc == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fsck 30 s after the bad block was read: exit %d:\n%s", rc, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// The repaired object equals the other copy of its column (the same
	// object name on another server).
	files := c.objectFiles(flipped, ino)
	rel, _ := filepath.Rel(c.iodDir(flipped), files[0])
	got, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for i := range c.iods {
		if i == flipped {
			continue
		}
		if other, err := os.ReadFile(filepath.Join(c.iodDir(i), rel)); err == nil {
			compared++
			if !bytes.Equal(got, other) {
				t.Errorf("repaired %s differs from iod%d's copy in %d bytes", rel, i+1, diff(got, other))
			}
		}
	}
	if compared == 0 {
		t.Fatalf("no other copy of %s found", rel)
	}
}

// fsck finds seeded damage of each kind, repairs what the copies allow and
// says so in its exit status (0 clean, 1 repaired, 4 damage left).
func TestFsckSeededDamage(t *testing.T) {
	c := replicated(t, 3, 2)
	w := newWriter(c)
	for _, p := range []string{"/r/a", "/r/b"} {
		if err := w.write(p, 300<<10); err != nil {
			t.Fatal(err)
		}
	}
	if out, rc := c.fs("fsck"); rc != 0 {
		t.Fatalf("fsck of a clean file system: exit %d:\n%s", rc, out)
	}
	// Missing: an object file of /r/a removed; corrupt: a byte of /r/b
	// flipped; orphaned: an object no file references.
	ia, ib := c.ino("/r/a"), c.ino("/r/b")
	removed := false
	for i := range c.iods {
		if fs := c.objectFiles(i, ia); len(fs) > 0 {
			os.Remove(fs[0])
			os.Remove(fs[0] + ".crc")
			removed = true
			break
		}
	}
	flipped := false
	for i := range c.iods {
		if c.flip(i, ib, 5000) {
			flipped = true
			break
		}
	}
	stray := filepath.Join(c.iodDir(0), "objects", "ff", "999999")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	if err := os.WriteFile(stray, []byte("stray"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !removed || !flipped {
		t.Fatal("could not seed the damage")
	}
	out, rc := c.fs("fsck", "--grace", "0s")
	if rc != 4 {
		t.Fatalf("fsck with damage: exit %d, want 4:\n%s", rc, out)
	}
	for _, kind := range []string{"missing", "corrupt", "orphan"} {
		if !strings.Contains(out, kind) {
			t.Errorf("fsck output names no %s data:\n%s", kind, out)
		}
	}
	if out, rc := c.fs("fsck", "--repair", "--grace", "0s"); rc != 1 {
		t.Fatalf("fsck --repair: exit %d, want 1:\n%s", rc, out)
	}
	if out, rc := c.fs("fsck", "--grace", "0s"); rc != 0 {
		t.Fatalf("fsck after the repair: exit %d, want 0:\n%s", rc, out)
	}
	w.readAll(t, "after fsck --repair")
}

// A server declared lost has its copies made again on the others: then
// another server can die and every file still reads.
func TestLostServerReReplicated(t *testing.T) {
	c := replicated(t, 4, 2)
	w := newWriter(c)
	for i := range 8 {
		if err := w.write(fmt.Sprintf("/r/f%d", i), 200<<10); err != nil {
			t.Fatal(err)
		}
	}
	id := c.serverID(0)
	c.iods[0].kill()
	c.waitState(id, "down")
	c.mustFS("servers", "lost", strconv.FormatUint(uint64(id), 10))
	c.waitHealed(60 * time.Second)
	for p := range c.files {
		for _, s := range c.servers(p) {
			if s == id {
				t.Errorf("%s still names lost server %d", p, id)
			}
		}
	}
	c.iods[1].kill()
	w.readAll(t, "lost server re-replicated, a second one down")
}

// The same through the FUSE mount: files written with write(2), fsync(2)
// and close(2) while an I/O server is killed read back whole (through the
// library, so from the servers, not the page cache) while it is down, and
// after it was healed and another one is down.
func TestReplicasSurviveKillMount(t *testing.T) {
	lab.Need(t, lab.FUSE)
	for _, r := range []int{2, 3} {
		t.Run(fmt.Sprintf("replicas%d", r), func(t *testing.T) {
			c := replicated(t, 4, r)
			mnt := t.TempDir()
			t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) }) // runs after the mount's stop
			m := spawn(t, "mount", "mount", "--meta", c.metaAddr, mnt)
			m.waitReady(t)
			w := newWriter(c)
			var mu sync.Mutex
			written := 0
			put := func(name string, size int) error {
				data := make([]byte, size)
				rand.Read(data)
				f, err := os.Create(filepath.Join(mnt, "r", name))
				if err != nil {
					return err
				}
				for off := 0; off < size; off += 64 << 10 {
					if _, err := f.Write(data[off:min(size, off+64<<10)]); err != nil {
						f.Close()
						return err
					}
				}
				if err := f.Sync(); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				mu.Lock()
				c.files["/r/"+name] = data
				written++
				mu.Unlock()
				return nil
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					if err := put(fmt.Sprintf("m%d", i), 150<<10+i*777); err != nil {
						t.Errorf("write through the mount during the kill: %v", err)
					}
				}
			}()
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				mu.Lock()
				n := written
				mu.Unlock()
				if n >= 10 {
					break
				}
			}
			c.iods[2].kill()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			w.readAll(t, "written through the mount, iod3 down")
			for p, want := range c.files {
				got, err := os.ReadFile(filepath.Join(mnt, p))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("read %s through the mount: %v (%d of %d bytes)", p, err, len(got), len(want))
				}
			}
			c.startIOD(2).waitReady(t)
			c.waitHealed(60 * time.Second)
			c.iods[0].kill()
			w.readAll(t, "written through the mount, healed, iod1 down")
		})
	}
}
