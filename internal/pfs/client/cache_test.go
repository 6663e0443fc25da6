package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// cachedClient returns a caching client of addr whose cache is trusted
// (its first Watch answered).
func cachedClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	return countedClient(t, addr, nil)
}

// countedClient is cachedClient counting in calls the requests it sends
// to meta other than its watch.
func countedClient(t *testing.T, addr string, calls *atomic.Int64) *client.Client {
	t.Helper()
	c := client.New(addr, client.WithCache())
	t.Cleanup(c.Close)
	if calls != nil {
		c.Pool().Observe = func(op proto.Op, _ time.Duration, _ error) {
			if op != proto.OpWatch {
				calls.Add(1)
			}
		}
	}
	// The first cached read starts the watch.
	if _, err := c.GetAttr(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; !c.CacheStats().Trusted; i++ {
		if i == 500 {
			t.Fatal("the cache's first watch was never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

func put(t *testing.T, c *client.Client, p, data string) {
	t.Helper()
	ctx := ctxT(t)
	f, err := c.CreatePath(ctx, p, 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *client.Client, p string) string {
	t.Helper()
	ctx := ctxT(t)
	f, err := c.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return string(b)
}

// Close-to-open across clients without an open round trip: once A's close
// returns, B (which had the old attributes cached) sees the new size and
// content; in between, B's stats are served by its cache.
func TestCacheCoherentAcrossClients(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	ctx := ctxT(t)
	a := cachedClient(t, fsys.Meta.Addr)
	var calls atomic.Int64
	b := countedClient(t, fsys.Meta.Addr, &calls)
	if err := a.MkdirAll(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	put(t, a, "/d/f", "one")

	if st, err := b.Stat(ctx, "/d/f"); err != nil || st.Size != 3 {
		t.Fatalf("B stat: %+v %v, want size 3", st, err)
	}
	if _, err := b.Stat(ctx, "/d/g"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B stat of a missing file: %v", err)
	}
	ents, err := b.ReadDir(ctx, "/d")
	if err != nil || len(ents) != 1 {
		t.Fatalf("B readdir: %v %v", ents, err)
	}
	before, sent := b.CacheStats(), calls.Load()
	for range 100 {
		if st, err := b.Stat(ctx, "/d/f"); err != nil || st.Size != 3 {
			t.Fatalf("B stat: %+v %v", st, err)
		}
		if _, err := b.Stat(ctx, "/d/g"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("B stat of a missing file: %v", err)
		}
	}
	after := b.CacheStats()
	if after.Misses != before.Misses || after.Hits < before.Hits+200 || calls.Load() != sent {
		t.Fatalf("repeated stats went to meta (%d requests): before %+v after %+v", calls.Load()-sent, before, after)
	}

	put(t, a, "/d/f", "hello, world")
	if st, err := b.Stat(ctx, "/d/f"); err != nil || st.Size != 12 {
		t.Fatalf("B stat after A's close: %+v %v, want size 12", st, err)
	}
	if got := get(t, b, "/d/f"); got != "hello, world" {
		t.Fatalf("B reads %q", got)
	}
	put(t, a, "/d/g", "new")
	if st, err := b.Stat(ctx, "/d/g"); err != nil || st.Size != 3 {
		t.Fatalf("B stat of a file A created: %+v %v", st, err)
	}
	if ents, err := b.ReadDir(ctx, "/d"); err != nil || len(ents) != 2 {
		t.Fatalf("B readdir after A's create: %v %v", ents, err)
	}
	if err := a.RenamePath(ctx, "/d/g", "/d/h", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/d/g"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B stat of a renamed-away name: %v", err)
	}
	if err := a.Remove(ctx, "/d/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/d/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B stat of a removed file: %v", err)
	}
	// Symbolic links: cached, and replaced.
	if err := a.SymlinkPath(ctx, "h", "/d/l"); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Stat(ctx, "/d/l"); err != nil || st.Size != 3 {
		t.Fatalf("B stat through a link: %+v %v", st, err)
	}
	if err := a.Remove(ctx, "/d/l"); err != nil {
		t.Fatal(err)
	}
	if err := a.SymlinkPath(ctx, "missing", "/d/l"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/d/l"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B stat through a replaced link: %v", err)
	}
	if st, err := b.StatBeneath(ctx, "/d", "h"); err != nil || st.Size != 3 {
		t.Fatalf("B stat beneath: %+v %v", st, err)
	}
	if err := a.SymlinkPath(ctx, "..", "/d/up"); err != nil {
		t.Fatal(err)
	}
	// The cache resolves as meta does: compare with a client without one.
	plain := client.New(fsys.Meta.Addr)
	t.Cleanup(plain.Close)
	for _, p := range []string{"up/d/h", "h", "l", "nope", "h/x", "up"} {
		want, werr := plain.StatBeneath(ctx, "/d", p)
		got, gerr := b.StatBeneath(ctx, "/d", p)
		if got.Ino != want.Ino || errno(gerr) != errno(werr) {
			t.Errorf("StatBeneath(/d, %s): cached %d %v, meta %d %v", p, got.Ino, gerr, want.Ino, werr)
		}
	}
	if _, err := b.StatBeneath(ctx, "/d", "up/d/h"); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("B stat beneath escaping: %v", err)
	}
	for _, p := range []string{"/d/up/d/h", "/d/l", "/d/up", "/d/h/x", "/d/up/d/up/d"} {
		want, werr := plain.Stat(ctx, p)
		got, gerr := b.Stat(ctx, p)
		if got.Ino != want.Ino || errno(gerr) != errno(werr) {
			t.Errorf("Stat(%s): cached %d %v, meta %d %v", p, got.Ino, gerr, want.Ino, werr)
		}
		want, werr = plain.Lstat(ctx, p)
		got, gerr = b.Lstat(ctx, p)
		if got.Ino != want.Ino || errno(gerr) != errno(werr) {
			t.Errorf("Lstat(%s): cached %d %v, meta %d %v", p, got.Ino, gerr, want.Ino, werr)
		}
	}
	if s := b.CacheStats(); s.Invalidations == 0 {
		t.Fatalf("B's cache was never invalidated: %+v", s)
	}
}

// A client that stops acknowledging holds a writer's close up until its
// lease has ended; by then it no longer trusts what it cached, so after
// the close returns it reads the new size all the same.
func TestCacheHungClientDelaysWriter(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	ctx := ctxT(t)
	a := cachedClient(t, fsys.Meta.Addr)
	b := cachedClient(t, fsys.Meta.Addr)
	put(t, a, "/f", "one")
	if st, err := b.Stat(ctx, "/f"); err != nil || st.Size != 3 {
		t.Fatalf("B stat: %+v %v", st, err)
	}
	if st, err := b.Stat(ctx, "/f"); err != nil || st.Size != 3 || b.CacheStats().Hits == 0 {
		t.Fatalf("B stat from its cache: %+v %v %+v", st, err, b.CacheStats())
	}
	thaw := b.FreezeWatch()
	t.Cleanup(thaw)
	put(t, a, "/f", "hello, world")
	if st, err := b.Stat(ctx, "/f"); err != nil || st.Size != 12 {
		t.Fatalf("B (hung watch) stat after A's close: %+v %v, want size 12", st, err)
	}
	thaw()
}

// Many concurrent mutations from a caching client: each waits for every
// watcher's acknowledgement, the client's own too, which must not queue
// behind them on its connections.
func TestCacheConcurrentMutations(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	ctx := ctxT(t)
	a := cachedClient(t, fsys.Meta.Addr)
	cachedClient(t, fsys.Meta.Addr) // another watcher
	const n = 300
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := a.Mkdir(ctx, 1, fmt.Sprintf("d%d", i), 0o755)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if ents, err := a.ReadDir(ctx, "/"); err != nil || len(ents) != n {
		t.Fatalf("readdir: %d entries, %v", len(ents), err)
	}
}

// A client whose watch stops being answered stops trusting its cache once
// its lease ends: it asks meta (here: cannot reach it) instead.
func TestCacheLeaseEndsWhenWatchIsCut(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	ctx := ctxT(t)
	px := newStallProxy(t, fsys.Meta.Addr)
	b := cachedClient(t, px.addr())
	if err := b.MkdirAll(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	px.stall()
	for i := 0; b.CacheStats().Trusted; i++ {
		if i == 1000 {
			t.Fatal("cache still trusted long after its lease")
		}
		time.Sleep(10 * time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if st, err := b.Stat(short, "/d"); err == nil {
		t.Fatalf("stat answered %+v from an untrusted cache", st)
	}
	px.resume()
	// Once a watch is answered again the cache is used again.
	for i := 0; !b.CacheStats().Trusted; i++ {
		if i == 1000 {
			t.Fatal("cache not trusted again after the watch resumed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.Stat(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
}

// stallProxy forwards TCP connections to a server; stall cuts every connection
// and refuses new ones (their bytes go nowhere) until resume.
type stallProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	paused bool
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target}
	done := make(chan struct{})
	go p.serve(done)
	t.Cleanup(func() {
		l.Close()
		<-done
		p.closeAll()
	})
	return p
}

func (p *stallProxy) addr() string { return p.l.Addr().String() }

func (p *stallProxy) serve(done chan struct{}) {
	defer close(done)
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused := p.paused
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if paused {
			continue // held open, never answered: a dead peer, not a refusal
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, s)
		p.mu.Unlock()
		go func() { io.Copy(s, c); s.Close() }()
		go func() { io.Copy(c, s); c.Close() }()
	}
}

func (p *stallProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// stall closes the forwarding connections' server sides silently for
// the client: the client's connections stay open but get no answers.
func (p *stallProxy) stall() {
	p.mu.Lock()
	p.paused = true
	conns := slices.Clone(p.conns)
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok && tc.RemoteAddr().String() == p.target {
			tc.Close()
		} else {
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
		}
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	p.paused = false
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close() // the client redials through the forwarding path
	}
}

// errno is the errno err carries, 0 for nil.
func errno(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	if err != nil {
		return proto.ErrnoOf(err)
	}
	return 0
}

// peerEnv names the metadata server a re-executed test binary serves as a
// caching peer (TestCachePeer) for TestCacheTwoProcesses.
const peerEnv = "CORRAL_TEST_CACHE_PEER"

// TestCachePeer is the other process of TestCacheTwoProcesses: it reads
// "stat PATH", "read PATH" and "misses" lines and answers each with one
// line. Without the variable it does nothing.
func TestCachePeer(t *testing.T) {
	addr := os.Getenv(peerEnv)
	if addr == "" {
		t.Skip("run by TestCacheTwoProcesses")
	}
	c := cachedClient(t, addr)
	ctx := ctxT(t)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, p, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "stat":
			st, err := c.Stat(ctx, p)
			fmt.Printf("%d %v\n", st.Size, err)
		case "read":
			fmt.Printf("%q\n", get(t, c, p))
		case "misses":
			fmt.Println(c.CacheStats().Misses)
		}
	}
}

// Close-to-open between two processes, each with its own cache.
func TestCacheTwoProcesses(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	ctx := ctxT(t)
	a := cachedClient(t, fsys.Meta.Addr)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCachePeer$", "-test.v=false")
	cmd.Env = append(os.Environ(), peerEnv+"="+fsys.Meta.Addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	out := bufio.NewScanner(stdout)
	ask := func(line string) string {
		t.Helper()
		fmt.Fprintln(stdin, line)
		if !out.Scan() {
			t.Fatalf("peer process gave no answer to %q: %v", line, out.Err())
		}
		return out.Text()
	}
	if err := a.MkdirAll(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	put(t, a, "/d/f", "one")
	if got := ask("stat /d/f"); got != "3 <nil>" {
		t.Fatalf("peer stat: %s", got)
	}
	misses := ask("misses")
	for range 20 {
		ask("stat /d/f")
	}
	if got := ask("misses"); got != misses {
		t.Fatalf("peer's repeated stats went to meta: misses %s, then %s", misses, got)
	}
	put(t, a, "/d/f", "hello, world")
	if got := ask("stat /d/f"); got != "12 <nil>" {
		t.Fatalf("peer stat after A's close: %s", got)
	}
	if got := ask("read /d/f"); got != `"hello, world"` {
		t.Fatalf("peer read after A's close: %s", got)
	}
}
