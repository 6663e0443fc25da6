package launch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestLeaderKillUnderLoad: three metadata members; kill -9 of the leader
// while a client creates files (exclusively: a retry that applied twice
// would say EEXIST) fails no operation, the client resumes on the new
// leader, and every acknowledged create is there afterwards.
func TestLeaderKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three metadata members")
	}
	bin := pfstest.Binary(t)
	fsys, err := launch.StartFS(context.Background(), bin, t.TempDir(), "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0",
		[]string{"127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fsys.Stop()
		if t.Failed() {
			for _, p := range append(append([]*launch.Proc{}, fsys.Metas...), fsys.IODs...) {
				t.Logf("%s log: %s", p.Name, launch.Tail(p.Log, 20))
			}
		}
	})
	if len(fsys.Metas) != 3 {
		t.Fatalf("%d members started", len(fsys.Metas))
	}
	cl := client.New(fsys.MetaAddr(), client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer cl.Close()
	ctx := ctxT(t)
	if err := cl.MkdirAll(ctx, "/k", 0o755); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var acked []string
	var failed error
	var lastOK time.Time
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("/k/f%d", i)
			f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{Excl: true})
			if err == nil {
				err = f.Close()
			}
			mu.Lock()
			if err != nil {
				failed = fmt.Errorf("create %s: %w", p, err)
				mu.Unlock()
				return
			}
			acked = append(acked, p)
			lastOK = time.Now()
			mu.Unlock()
		}
	}()
	time.Sleep(time.Second)
	leader := cl.Leader().Current()
	var victim *launch.Proc
	for _, p := range fsys.Metas {
		if p.Addr == leader {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("the client follows %s, no member of %s", leader, fsys.MetaAddr())
	}
	victim.Kill()
	killed := time.Now()
	var resumed time.Duration
	for deadline := killed.Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		ok, f := lastOK, failed
		mu.Unlock()
		if f != nil {
			break
		}
		if ok.After(killed) {
			resumed = ok.Sub(killed)
			break
		}
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	if failed != nil {
		t.Fatalf("under the leader's kill: %v", failed)
	}
	if resumed == 0 {
		t.Fatal("no create succeeded within 15 s of the leader's kill")
	}
	t.Logf("creates resumed %v after the leader's kill; now following %s", resumed.Round(time.Millisecond), cl.Leader().Current())
	for _, p := range acked {
		if _, err := cl.Stat(ctx, p); err != nil {
			t.Errorf("acknowledged create lost: %v", err)
		}
	}
}

// TestCacheOverMembers: a caching client given the three members' list
// finds the leader for its watch too: repeated stats come from the cache,
// and a change made by another client reaches it (close-to-open).
func TestCacheOverMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three metadata members")
	}
	bin := pfstest.Binary(t)
	fsys, err := launch.StartFS(context.Background(), bin, t.TempDir(), "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0",
		[]string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fsys.Stop)
	sec := client.WithSecurity(proto.Security{Cred: fsys.Cred})
	writer := client.New(fsys.MetaAddr(), sec)
	defer writer.Close()
	reader := client.New(fsys.MetaAddr(), sec, client.WithCache())
	defer reader.Close()
	ctx := ctxT(t)
	if err := writer.WriteFile(ctx, "/f", strings.NewReader("one"), 0o644, client.CreateOpts{}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !reader.CacheStats().Trusted {
		if _, err := reader.Stat(ctx, "/f"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache's watch never ran over the members: %+v", reader.CacheStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := reader.CacheStats().Hits
	for i := 0; i < 100; i++ {
		if _, err := reader.Stat(ctx, "/f"); err != nil {
			t.Fatal(err)
		}
	}
	if hits := reader.CacheStats().Hits - before; hits < 90 {
		t.Fatalf("%d of 100 stats from the cache", hits)
	}
	if err := writer.WriteFile(ctx, "/f", strings.NewReader("three"), 0o644, client.CreateOpts{}, nil); err != nil {
		t.Fatal(err)
	}
	if a, err := reader.Stat(ctx, "/f"); err != nil || a.Size != 5 {
		t.Fatalf("after the other client's close: size %d, %v (want 5)", a.Size, err)
	}
}
