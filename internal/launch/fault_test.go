package launch_test

// Failure behaviour of the replicated metadata service (issue 13 §6), with
// real corral meta and corral iod processes on loopback: leader kills under
// mixed load, lost quorum, a stopped (partitioned) leader, member
// replacement, request replay, and recovery of a large store.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// group starts n replicated metadata members (n == 1: a lone server) and
// one iod with bin, stopping them (and showing their logs on failure) at
// cleanup.
func group(t *testing.T, bin string, n int) *launch.FS {
	t.Helper()
	if testing.Short() {
		t.Skip("starts metadata members and an iod")
	}
	listen := strings.TrimSuffix(strings.Repeat("127.0.0.1:0,", n), ",")
	fsys, err := launch.StartFS(context.Background(), bin, t.TempDir(), listen, []string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range fsys.Metas {
			if p != nil {
				syscall.Kill(p.Pid(), syscall.SIGCONT) // a stopped member would not hear SIGTERM
			}
		}
		fsys.Stop()
		if t.Failed() {
			for _, p := range append(append([]*launch.Proc{}, fsys.Metas...), fsys.IODs...) {
				if p != nil {
					t.Logf("%s log: %s", p.Name, launch.Tail(p.Log, 15))
				}
			}
		}
	})
	return fsys
}

// newClient is a library client of members (comma-separated).
func newClient(t *testing.T, fsys *launch.FS, members string, opts ...client.Option) *client.Client {
	cl := client.New(members, append([]client.Option{client.WithSecurity(proto.Security{Cred: fsys.Cred})}, opts...)...)
	t.Cleanup(cl.Close)
	return cl
}

// leaderIndex is the index in fsys.Metas of the member cl follows, after a
// write has made sure it leads.
func leaderIndex(t *testing.T, ctx context.Context, fsys *launch.FS, cl *client.Client) int {
	t.Helper()
	if err := cl.MkdirAll(ctx, "/.probe", 0o755); err != nil {
		t.Fatal(err)
	}
	cur := cl.Leader().Current()
	for i, p := range fsys.Metas {
		if p != nil && p.Addr == cur {
			return i
		}
	}
	t.Fatalf("the client follows %s, no member of %s", cur, fsys.MetaAddr())
	return -1
}

// restart starts member i again on its address with its data.
func restart(t *testing.T, fsys *launch.FS, i int, addr string) {
	t.Helper()
	p, err := fsys.StartMetaMember(context.Background(), i, addr)
	if err != nil {
		t.Fatalf("restart member %d: %v", i+1, err)
	}
	fsys.Metas[i] = p
	if i == 0 {
		fsys.Meta = p
	}
}

// want is what a worker was told about one of its files.
type want struct {
	content []byte
	mode    uint32
	size    int64
}

// TestLeaderKillMixedLoad: four workers create+write+close, rename, unlink,
// chmod and truncate their own files while the leader is killed (-9)
// twice, restarted in between; no operation fails, and afterwards each
// acknowledged effect is there exactly once.
func TestLeaderKillMixedLoad(t *testing.T) {
	bin := pfstest.Binary(t)
	fsys := group(t, bin, 3)
	addrs := strings.Split(fsys.MetaAddr(), ",")
	cl := newClient(t, fsys, fsys.MetaAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const workers = 4
	for w := range workers {
		if err := cl.MkdirAll(ctx, fmt.Sprintf("/m/w%d", w), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	var lastOK atomic.Int64 // unix nanos of the latest acknowledged op
	var acks atomic.Int64
	stop := make(chan struct{})
	states := make([]map[string]want, workers)
	uncertain := make([]map[string]bool, workers) // names an op failed on
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		states[w], uncertain[w] = map[string]want{}, map[string]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, unc := states[w], uncertain[w]
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			dir := fmt.Sprintf("/m/w%d", w)
			pick := func() string {
				names := make([]string, 0, len(st))
				for n := range st {
					if !unc[n] {
						names = append(names, n)
					}
				}
				if len(names) == 0 {
					return ""
				}
				sort.Strings(names)
				return names[rng.IntN(len(names))]
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				var touched []string
				var apply func()
				switch k := i % 5; {
				case k <= 1 || len(st) < 3: // create + write + close
					name := fmt.Sprintf("f%d", i)
					content := []byte(fmt.Sprintf("worker %d file %d %s", w, i, strings.Repeat("x", rng.IntN(200))))
					touched = []string{name}
					var f *client.File
					f, err = cl.CreatePath(ctx, dir+"/"+name, 0o644, client.CreateOpts{Excl: true})
					if err == nil {
						_, err = f.WriteAt(content, 0)
						if cerr := f.Close(); err == nil {
							err = cerr
						}
					}
					apply = func() { st[name] = want{content, 0o644, int64(len(content))} }
				case k == 2: // rename
					old := pick()
					name := fmt.Sprintf("r%d", i)
					touched = []string{old, name}
					err = cl.RenamePath(ctx, dir+"/"+old, dir+"/"+name, false)
					apply = func() { st[name] = st[old]; delete(st, old) }
				case k == 3: // unlink
					old := pick()
					touched = []string{old}
					err = cl.Remove(ctx, dir+"/"+old)
					apply = func() { delete(st, old) }
				default: // chmod or truncate
					old := pick()
					touched = []string{old}
					cur := st[old]
					var a proto.Attr
					if a, err = cl.Stat(ctx, dir+"/"+old); err != nil {
						break
					}
					if rng.IntN(2) == 0 {
						mode := uint32(0o600 + rng.IntN(0o100))
						_, err = cl.SetAttr(ctx, &proto.SetAttr{Ino: a.Ino, Mask: proto.SetMode, Mode: mode})
						apply = func() { cur.mode = mode; st[old] = cur }
					} else {
						size := int64(rng.IntN(int(cur.size) + 1))
						var f *client.File
						if f, err = cl.Open(ctx, dir+"/"+old); err == nil {
							err = f.Truncate(ctx, size)
							if cerr := f.Close(); err == nil {
								err = cerr
							}
						}
						apply = func() { cur.size = size; st[old] = cur }
					}
				}
				if err != nil {
					// Its fate is unknown: left out of the check.
					for _, n := range touched {
						unc[n] = true
					}
					errs[w] = errors.Join(errs[w], fmt.Errorf("op %d on %s/%v: %w", i, dir, touched, err))
					if len(errs[w].Error()) > 2000 {
						return
					}
					continue
				}
				apply()
				acks.Add(1)
				lastOK.Store(time.Now().UnixNano())
			}
		}()
	}
	finish := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(finish)

	var resumes []time.Duration
	for round := range 2 {
		time.Sleep(1500 * time.Millisecond)
		i := leaderIndex(t, ctx, fsys, cl)
		fsys.Metas[i].Kill()
		killed := time.Now()
		var resumed time.Duration
		for deadline := killed.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if ok := time.Unix(0, lastOK.Load()); ok.After(killed) {
				resumed = ok.Sub(killed)
				break
			}
		}
		if resumed == 0 {
			finish()
			t.Fatalf("round %d: no operation acknowledged within 20 s of killing member %d", round+1, i+1)
		}
		resumes = append(resumes, resumed)
		t.Logf("kill %d: member %d (the leader) killed; first acknowledged op after %v", round+1, i+1, resumed.Round(time.Millisecond))
		restart(t, fsys, i, addrs[i])
	}
	time.Sleep(1500 * time.Millisecond)
	finish()
	t.Logf("%d operations acknowledged; resume times %v", acks.Load(), resumes)
	for w := range workers {
		if errs[w] != nil {
			t.Errorf("worker %d: failed operations: %v", w, errs[w])
		}
	}

	// Every acknowledged effect, exactly once, seen through a fresh client.
	check := newClient(t, fsys, fsys.MetaAddr())
	for w := range workers {
		dir := fmt.Sprintf("/m/w%d", w)
		ents, err := check.ReadDir(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, e := range ents {
			seen[e.Name]++
		}
		for n, c := range seen {
			if _, ok := states[w][n]; !ok && !uncertain[w][n] {
				t.Errorf("%s/%s is there, but was never acknowledged (or was renamed away or unlinked)", dir, n)
			}
			if c != 1 {
				t.Errorf("%s/%s listed %d times", dir, n, c)
			}
		}
		for n, wnt := range states[w] {
			if uncertain[w][n] {
				continue
			}
			p := dir + "/" + n
			if seen[n] == 0 {
				t.Errorf("acknowledged %s is missing", p)
				continue
			}
			a, err := check.Stat(ctx, p)
			if err != nil {
				t.Errorf("stat %s: %v", p, err)
				continue
			}
			if a.Mode&0o777 != wnt.mode || int64(a.Size) != wnt.size {
				t.Errorf("%s: mode %o size %d, acknowledged mode %o size %d", p, a.Mode&0o777, a.Size, wnt.mode, wnt.size)
				continue
			}
			f, err := check.Open(ctx, p)
			if err != nil {
				t.Errorf("open %s: %v", p, err)
				continue
			}
			buf := make([]byte, wnt.size)
			if _, err := f.ReadAt(buf, 0); err != nil && wnt.size > 0 {
				t.Errorf("read %s: %v", p, err)
			} else if !bytes.Equal(buf, wnt.content[:wnt.size]) {
				t.Errorf("%s holds %q, want %q", p, buf, wnt.content[:wnt.size])
			}
			f.Close()
		}
	}
}

// TestQuorumLoss: one member of three down blocks nothing; two down makes
// an operation fail within the client's timeout, saying why, with
// ETIMEDOUT, never hanging.
func TestQuorumLoss(t *testing.T) {
	fsys := group(t, pfstest.Binary(t), 3)
	cl := newClient(t, fsys, fsys.MetaAddr(), client.WithTimeout(3*time.Second))
	ctx := ctxT(t)
	lead := leaderIndex(t, ctx, fsys, cl)
	var followers []int
	for i := range fsys.Metas {
		if i != lead {
			followers = append(followers, i)
		}
	}
	fsys.Metas[followers[0]].Kill()
	for i := range 50 {
		start := time.Now()
		f, err := cl.CreatePath(ctx, fmt.Sprintf("/q%d", i), 0o644, client.CreateOpts{Excl: true})
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatalf("one member of three down: create %d failed after %v: %v", i, time.Since(start), err)
		}
	}
	fsys.Metas[followers[1]].Kill()
	for _, op := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"create", func(ctx context.Context) error {
			_, err := cl.CreatePath(ctx, "/lost", 0o644, client.CreateOpts{Excl: true})
			return err
		}},
		{"stat", func(ctx context.Context) error { _, err := cl.Stat(ctx, "/q1"); return err }},
	} {
		octx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := op.do(octx)
		took := time.Since(start)
		callerEnded := octx.Err() != nil
		cancel()
		t.Logf("two of three down: %s failed after %v: %v", op.name, took.Round(time.Millisecond), err)
		switch {
		case err == nil:
			t.Errorf("two of three down: %s succeeded", op.name)
		case callerEnded:
			t.Errorf("two of three down: %s ran until the caller's 20 s deadline (the client's timeout is 3 s): %v", op.name, err)
		case !strings.Contains(err.Error(), "no quorum") && !strings.Contains(err.Error(), "no member reachable"):
			t.Errorf("two of three down: %s: %v says neither \"no quorum\" nor \"no member reachable\"", op.name, err)
		case !errors.Is(err, syscall.ETIMEDOUT):
			t.Errorf("two of three down: %s: %v is not ETIMEDOUT", op.name, err)
		case took > 3*time.Second+4*time.Second:
			// The timeout bounds the search; an attempt under way when it
			// ends may take up to the 3 s attempt cap more.
			t.Errorf("two of three down: %s took %v with a 3 s timeout", op.name, took)
		}
	}
}

// TestStoppedLeader: a leader stopped (SIGSTOP, as a partition would cut
// it off) acknowledges nothing; the others elect a leader and serve; once
// it continues it steps down; nothing acknowledged is lost and the request
// sent to it while it was stopped applied at most once.
func TestStoppedLeader(t *testing.T) {
	fsys := group(t, pfstest.Binary(t), 3)
	cl := newClient(t, fsys, fsys.MetaAddr())
	ctx := ctxT(t)
	lead := leaderIndex(t, ctx, fsys, cl)
	old := fsys.Metas[lead]
	var others []string
	for i, p := range fsys.Metas {
		if i != lead {
			others = append(others, p.Addr)
		}
	}
	// Client 1 knows only the old leader.
	c1 := newClient(t, fsys, old.Addr, client.WithTimeout(2*time.Second))
	if err := c1.MkdirAll(ctx, "/p", 0o755); err != nil {
		t.Fatal(err)
	}
	acked := []string{}
	for i := range 5 {
		p := fmt.Sprintf("/p/before%d", i)
		f, err := c1.CreatePath(ctx, p, 0o644, client.CreateOpts{Excl: true})
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		acked = append(acked, p)
	}
	// A short create at the stopped leader (the parent known: the create
	// itself is the request that waits): no success.
	pdir, err := c1.Stat(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	c1long := newClient(t, fsys, old.Addr, client.WithTimeout(30*time.Second))
	if _, err := c1long.Stat(ctx, "/p"); err != nil { // connected before the stop
		t.Fatal(err)
	}
	if err := syscall.Kill(old.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(old.Pid(), syscall.SIGCONT)
		}
	}()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	_, _, err = c1.Create(sctx, pdir.Ino, "short", 0o644, client.CreateOpts{Excl: true})
	scancel()
	if err == nil {
		t.Fatal("a stopped leader acknowledged a create")
	}
	t.Logf("create at the stopped leader: %v", err)
	// A long one, in flight when the leader continues.
	longc := make(chan error, 1)
	go func() {
		lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
		defer lcancel()
		_, _, err := c1long.Create(lctx, pdir.Ino, "long", 0o644, client.CreateOpts{Excl: true})
		longc <- err
	}()
	time.Sleep(200 * time.Millisecond) // sent before the others elect

	// The others elect a leader and serve client 2.
	c2 := newClient(t, fsys, strings.Join(others, ","))
	start := time.Now()
	for i := range 5 {
		p := fmt.Sprintf("/p/during%d", i)
		f, err := c2.CreatePath(ctx, p, 0o644, client.CreateOpts{Excl: true})
		if err != nil {
			t.Fatalf("the two live members did not serve: %v", err)
		}
		f.Close()
		acked = append(acked, p)
	}
	t.Logf("the two others served %v after the stop; leader now %s", time.Since(start).Round(time.Millisecond), c2.Leader().Current())
	if c2.Leader().Current() == old.Addr {
		t.Errorf("client 2 follows the stopped member %s", old.Addr)
	}

	if err := syscall.Kill(old.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	longErr := <-longc
	t.Logf("the create in flight across the stop: %v", longErr)

	// It steps down: client 1, knowing only it, is sent to the new leader.
	var err2 error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var f *client.File
		if f, err2 = c1.CreatePath(ctx, "/p/after", 0o644, client.CreateOpts{Excl: true}); err2 == nil {
			f.Close()
			break
		}
	}
	if err2 != nil {
		t.Fatalf("client 1 after the old leader continued: %v", err2)
	}
	if c1.Leader().Current() == old.Addr {
		t.Errorf("client 1 still follows the old leader %s after it continued", old.Addr)
	}
	acked = append(acked, "/p/after")

	ents, err := c2.ReadDir(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range ents {
		count["/p/"+e.Name]++
	}
	for _, p := range acked {
		if count[p] != 1 {
			t.Errorf("acknowledged %s listed %d times", p, count[p])
		}
	}
	if count["/p/short"] > 1 || count["/p/long"] > 1 {
		t.Errorf("a request sent to the stopped leader applied more than once: %v", count)
	}
	if longErr == nil && count["/p/long"] != 1 {
		t.Errorf("the create acknowledged across the stop is missing")
	}
	t.Logf("after: /p/short %d, /p/long %d (acknowledged: %v)", count["/p/short"], count["/p/long"], longErr == nil)
}

// snapshotBinary is a corral binary whose metadata members snapshot every
// 100 entries.
func snapshotBinary(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "corral")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = meta ]; then exec %q \"$@\" --snapshot-every 100; fi\nexec %q \"$@\"\n",
		pfstest.Binary(t), pfstest.Binary(t))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// corralFS runs corral fs ARGS against fsys's members.
func corralFS(t *testing.T, fsys *launch.FS, members string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pfstest.Binary(t), append([]string{"fs", "--meta", members}, args...)...)
	cmd.Env = append(os.Environ(), proto.SecretEnv+"="+fsys.SecretFile)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type membersJSON struct {
	Leader, Term, Commit, Applied uint64
	Members                       []struct {
		ID      uint64
		Addr    string
		Role    string
		Match   uint64
		Learner bool
	}
}

// TestMemberReplacement: remove member 3 with the CLI, add member 4 on an
// empty directory; it catches up by a snapshot image; with the old leader
// then killed, the group with member 4 serves every file.
func TestMemberReplacement(t *testing.T) {
	fsys := group(t, snapshotBinary(t), 3)
	cl := newClient(t, fsys, fsys.MetaAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cl.MkdirAll(ctx, "/r", 0o755); err != nil {
		t.Fatal(err)
	}
	// 4000 creates, few at a time (so few per log entry): the log is
	// compacted behind snapshots (every 100 entries, 1000 kept), so a new
	// member can only start from an image.
	const files, par = 4000, 3
	var wg sync.WaitGroup
	errc := make(chan error, par)
	for g := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < files; i += par {
				f, err := cl.CreatePath(ctx, fmt.Sprintf("/r/f%d", i), 0o644, client.CreateOpts{Excl: true})
				if err == nil {
					err = f.Close()
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	all := fsys.MetaAddr()
	if out, err := corralFS(t, fsys, all, "meta", "remove", "3"); err != nil {
		t.Fatalf("corral fs meta remove 3: %v: %s", err, out)
	}
	fsys.Metas[2].Kill()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr4 := l.Addr().String()
	l.Close()
	if out, err := corralFS(t, fsys, all, "meta", "add", "4", addr4); err != nil {
		t.Fatalf("corral fs meta add 4 %s: %v: %s", addr4, err, out)
	}
	dir4 := filepath.Join(fsys.Data, "meta", "4")
	if err := os.MkdirAll(dir4, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir4, proto.SecretFileName), fsys.Cred.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	m4, err := launch.Start(ctx, "meta4", pfstest.Binary(t), filepath.Join(fsys.Data, "logs", "meta4.log"),
		"meta", "--id", "4", "--join", "--listen", addr4, "--data", dir4, "--snapshot-every", "100")
	if err != nil {
		t.Fatal(err)
	}
	fsys.Metas = append(fsys.Metas, m4)

	// Caught up: a voting follower with everything committed.
	var last membersJSON
	caught := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !caught; time.Sleep(200 * time.Millisecond) {
		out, err := corralFS(t, fsys, all+","+addr4, "meta", "members", "--json")
		if err != nil || json.Unmarshal([]byte(out), &last) != nil {
			continue
		}
		for _, m := range last.Members {
			if m.ID == 4 && !m.Learner && m.Match >= last.Commit {
				caught = true
			}
		}
	}
	if !caught {
		t.Fatalf("member 4 did not catch up within 60 s: %+v", last)
	}
	for _, m := range last.Members {
		if m.ID == 3 {
			t.Errorf("member 3 still listed after its removal: %+v", last)
		}
	}
	if b, _ := os.ReadFile(m4.Log); !bytes.Contains(b, []byte("state restored from the leader's snapshot")) {
		t.Errorf("member 4 did not start from a snapshot (commit index %d): %s", last.Commit, launch.Tail(m4.Log, 10))
	}

	lead := leaderIndex(t, ctx, fsys, cl)
	if lead == 3 {
		t.Logf("member 4 already leads")
	}
	fsys.Metas[lead].Kill()
	var live []string
	for i, p := range fsys.Metas {
		if i != lead && i != 2 {
			live = append(live, p.Addr)
		}
	}
	c2 := newClient(t, fsys, strings.Join(live, ","))
	ents, err := c2.ReadDir(ctx, "/r")
	if err != nil {
		t.Fatalf("the group with member 4, its old leader killed: %v", err)
	}
	if len(ents) != files {
		t.Errorf("/r holds %d entries, want %d", len(ents), files)
	}
	f, err := c2.CreatePath(ctx, "/r/new", 0o644, client.CreateOpts{Excl: true})
	if err != nil {
		t.Fatalf("create in the group with member 4: %v", err)
	}
	f.Close()
	t.Logf("member 4 joined, caught up; with member %d killed, %s serve (leader %s)", lead+1, strings.Join(live, ","), c2.Leader().Current())
}

// TestIdemReplay: one request ID sent twice to the leader over the
// protocol gets one effect and the same answer twice.
func TestIdemReplay(t *testing.T) {
	fsys := group(t, pfstest.Binary(t), 3)
	cl := newClient(t, fsys, fsys.MetaAddr())
	ctx := ctxT(t)
	lead := leaderIndex(t, ctx, fsys, cl)
	if err := cl.MkdirAll(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := cl.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	pool := &proto.Pool{Security: proto.Security{Cred: fsys.Cred}}
	defer pool.Close()
	req := &proto.Idem{Client: 0xfeedface, Seq: 7, Done: 7,
		Req: &proto.Create{Parent: dir.Ino, Name: "once", Mode: 0o644, Excl: true}}
	var replies []proto.Msg
	for range 2 {
		r, err := pool.Call(ctx, fsys.Metas[lead].Addr, req)
		if err != nil {
			t.Fatalf("create with request ID %d/%d: %v", req.Client, req.Seq, err)
		}
		replies = append(replies, r)
	}
	a0, ok0 := replies[0].(*proto.AttrReply)
	a1, ok1 := replies[1].(*proto.AttrReply)
	if !ok0 || !ok1 || !a0.Created || !a1.Created || !reflect.DeepEqual(a0, a1) {
		t.Errorf("replies differ or not created: %#v, %#v", replies[0], replies[1])
	}
	ents, err := cl.ReadDir(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if n := slices.IndexFunc(ents, func(e proto.Entry) bool { return e.Name == "once" }); n < 0 || len(ents) != 1 {
		t.Errorf("/d holds %v, want one file \"once\"", ents)
	}
	// A new sequence number is a new request: EEXIST now.
	req.Seq, req.Done = 8, 8
	if _, err := pool.Call(ctx, fsys.Metas[lead].Addr, req); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("the same create with a new request ID: %v, want EEXIST", err)
	}
}

// TestMillionFilesRestart (CORRAL_META_1M=1): one Raft member holding 10^6
// files, killed -9 and restarted: the time from its start to the first
// linearizable stat.
func TestMillionFilesRestart(t *testing.T) {
	if os.Getenv("CORRAL_META_1M") != "1" {
		t.Skip("set CORRAL_META_1M=1: creates 10^6 files (minutes)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := filepath.Join(t.TempDir(), "corral")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = meta ]; then exec %q \"$@\" --id 1 --peers 1=%s; fi\nexec %q \"$@\"\n",
		pfstest.Binary(t), addr, pfstest.Binary(t))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	fsys, err := launch.StartFS(context.Background(), p, t.TempDir(), addr, []string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fsys.Stop()
		if t.Failed() {
			t.Logf("meta log: %s", launch.Tail(fsys.Meta.Log, 15))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const total, dirs, workers = 1_000_000, 100, 16
	var clients []*client.Client
	for range 4 {
		clients = append(clients, newClient(t, fsys, addr, client.WithTimeout(time.Minute)))
	}
	for d := range dirs {
		if err := clients[0].MkdirAll(ctx, fmt.Sprintf("/big/d%d", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var dinos [dirs]uint64
	for d := range dirs {
		a, err := clients[0].Stat(ctx, fmt.Sprintf("/big/d%d", d))
		if err != nil {
			t.Fatal(err)
		}
		dinos[d] = a.Ino
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				if _, _, err := c.Create(ctx, dinos[i%dirs], fmt.Sprintf("f%d", i), 0o644, client.CreateOpts{Excl: true}); err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("create %d: %w", i, err))
					return
				}
				if i%100000 == 0 && i > 0 {
					t.Logf("%d files after %v", i, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		t.Fatal(e)
	}
	t.Logf("created %d files in %v (%.0f/s)", total, time.Since(start).Round(time.Second), total/time.Since(start).Seconds())
	fsys.Meta.Kill()
	restarted := time.Now()
	m, err := fsys.StartMeta(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	fsys.Meta, fsys.Metas[0] = m, m
	announced := time.Since(restarted)
	c := newClient(t, fsys, addr, client.WithTimeout(time.Minute))
	var serr error
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, serr = c.Stat(ctx, fmt.Sprintf("/big/d%d/f%d", (total-1)%dirs, total-1)); serr == nil {
			break
		}
	}
	if serr != nil {
		t.Fatalf("no stat succeeded within 5 min of the restart: %v", serr)
	}
	t.Logf("10^6 files: restart to listening %v, to the first linearizable stat %v", announced.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
}
