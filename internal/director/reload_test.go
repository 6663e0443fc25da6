package director

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

func mustParse(t *testing.T, conf string) *config.Director {
	t.Helper()
	cfg, err := config.Parse("test.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ask connects to a VIP served by tcpName servers and returns the server
// that answered.
func ask(vip string) (string, error) {
	c, err := net.DialTimeout("tcp", vip, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestStatusDuringReloads: the admin API reads the service map while
// reloads add and remove services. Before the fix, Apply deleted from the
// live map (a concurrent map write: the race detector, or the runtime,
// stopped the program).
func TestStatusDuringReloads(t *testing.T) {
	a := tcpName(t)
	v1, v2 := freeAddr(t, "tcp"), freeAddr(t, "tcp")
	one := fmt.Sprintf("service s1 {\n vip %s\n check none\n server %s\n}\n", v1, a)
	two := one + fmt.Sprintf("service s2 {\n vip %s\n check none\n server %s\n}\n", v2, a)
	d := start(t, two)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d.Status()
				d.Conns()
			}
		}()
	}
	for i := 0; i < 40; i++ {
		conf := one
		if i%2 == 1 {
			conf = two
		}
		if err := d.Apply(mustParse(t, conf)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestRejectedReloadChangesNothing: a configuration that cannot start (a
// VIP someone else holds) is rejected as a whole. Before the fix, the
// services before the bad one had already been changed in place and a
// service changing shape had been stopped.
func TestRejectedReloadChangesNothing(t *testing.T) {
	a, b := tcpName(t), tcpName(t)
	v1, v2 := freeAddr(t, "tcp"), freeAddr(t, "tcp")
	taken, err := net.Listen("tcp", "127.0.0.1:0") // someone else's
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	good := fmt.Sprintf("service s1 {\n vip %s\n scheduler rr\n check none\n server %s\n}\nservice s2 {\n vip %s\n check none\n server %s\n}\n", v1, a, v2, b)
	d := start(t, good)
	// s1 changes its scheduler and pool, s2 changes shape (l4 -> l7 on
	// the same VIP), and s3 wants a VIP that is taken.
	bad := fmt.Sprintf("service s1 {\n vip %s\n scheduler wlc\n check none\n server %s\n}\nservice s2 {\n vip %s\n dataplane l7\n check none\n server %s\n}\nservice s3 {\n vip %s\n check none\n server %s\n}\n",
		v1, b, v2, b, taken.Addr(), a)
	if err := d.Apply(mustParse(t, bad)); err == nil || !strings.Contains(err.Error(), "service s3") {
		t.Fatalf("Apply of a config with a taken VIP: %v", err)
	}
	st := d.Status()
	if len(st) != 2 || st[0].Scheduler != "rr" || st[0].Servers[0].Addr != a || st[1].Dataplane != "l4" {
		t.Fatalf("after a rejected reload: %+v", st)
	}
	for _, vip := range []string{v1, v2} {
		if _, err := ask(vip); err != nil {
			t.Fatalf("%s after a rejected reload: %v", vip, err)
		}
	}
	// Without s3 the same change goes through: s2 moves to l7 on its VIP.
	ok := bad[:strings.Index(bad, "service s3")]
	if err := d.Apply(mustParse(t, ok)); err != nil {
		t.Fatal(err)
	}
	if st := d.Status(); st[0].Scheduler != "wlc" || st[1].Dataplane != "l7" {
		t.Fatalf("after the reload: %+v", st)
	}
}

// TestReshapeFailureRestoresOld: a service that must rebind its own VIP
// (l4 -> udp... here l4 -> l7) and fails gets its old dataplane back.
func TestReshapeFailureRestoresOld(t *testing.T) {
	a := tcpName(t)
	v1 := freeAddr(t, "tcp")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	d := start(t, fmt.Sprintf("service s1 {\n vip %s\n check none\n server %s\n}\n", v1, a))
	// s1 goes l7 on its VIP (it must let go of it first) and s0, started
	// after it, cannot bind.
	bad := fmt.Sprintf("service s1 {\n vip %s\n dataplane l7\n check none\n server %s\n}\nservice s0 {\n vip %s\n check none\n server %s\n}\n", v1, a, taken.Addr(), a)
	if err := d.Apply(mustParse(t, bad)); err == nil {
		t.Fatal("accepted")
	}
	if got, err := ask(v1); err != nil || got != a {
		t.Fatalf("s1 after the rejected reshape: %q %v", got, err)
	}
}

// TestReloadStatusAndCheck: a rejected file shows, with every error's
// place, in ReloadStatus; Check finds the same errors without running.
func TestReloadStatusAndCheck(t *testing.T) {
	a := tcpName(t)
	v1 := freeAddr(t, "tcp")
	path := filepath.Join(t.TempDir(), "director.conf")
	good := fmt.Sprintf("admin 127.0.0.1:7599\nservice s1 {\n vip %s\n check none\n server %s\n}\n", v1, a)
	os.WriteFile(path, []byte(good), 0o644)
	d := New(quiet)
	t.Cleanup(d.Close)
	if err := d.reloadFrom(path, fileStamp(path)); err != nil {
		t.Fatal(err)
	}
	if st := d.ReloadStatus(); st == nil || !st.OK || st.File != path {
		t.Fatalf("status %+v", st)
	}
	if err := Check(path); err != nil {
		t.Fatalf("Check of a good file: %v", err)
	}
	bad := strings.Replace(good, "check none", "scheduler fastest\n server nowhere", 1)
	os.WriteFile(path, []byte(bad), 0o644)
	if err := d.reloadFrom(path, fileStamp(path)); err == nil {
		t.Fatal("bad file accepted")
	}
	st := d.ReloadStatus()
	want := []string{path + ":4: service s1: scheduler: unknown scheduler \"fastest\"", path + ":5: service s1: server: \"nowhere\" is not an address:port"}
	for _, w := range want {
		if st.OK || !strings.Contains(st.Error, w) {
			t.Fatalf("status %+v lacks %q", st, w)
		}
	}
	if err := Check(path); err == nil || !strings.Contains(err.Error(), want[0]) || !strings.Contains(err.Error(), want[1]) {
		t.Fatalf("Check: %v", err)
	}
	if got, err := ask(v1); err != nil || got != a {
		t.Fatalf("service after the rejected reload: %q %v", got, err)
	}
	os.WriteFile(path, []byte(strings.Replace(good, "127.0.0.1:7599", "localhost:7599", 1)), 0o644)
	if err := Check(path); err == nil || !strings.Contains(err.Error(), ":1: admin:") {
		t.Fatalf("Check of an admin address by name: %v", err)
	}
}

// TestRejectedReloadStartsNoChecks: a configuration rejected because one
// of its new services cannot bind its VIP leaves no health check of its
// new services probing. Before the fix a new service's checks started
// while the plan was built and a rejected reload stopped only the
// services whose dataplanes had started: s3's check went on for good.
func TestRejectedReloadStartsNoChecks(t *testing.T) {
	var probes atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { probes.Add(1) }))
	defer hs.Close()
	a := tcpName(t)
	v1 := freeAddr(t, "tcp")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	d := start(t, fmt.Sprintf("service s1 {\n vip %s\n check none\n server %s\n}\n", v1, a))
	bad := fmt.Sprintf("service s1 {\n vip %s\n check none\n server %s\n}\n"+
		"service s3 {\n vip %s\n check http path=/ interval=50ms timeout=50ms\n server %s\n}\n",
		v1, a, taken.Addr(), hs.Listener.Addr())
	if err := d.Apply(mustParse(t, bad)); err == nil {
		t.Fatal("a service on a VIP someone else holds was accepted")
	}
	// At 50 ms, a check left running would have probed about ten times.
	time.Sleep(500 * time.Millisecond)
	if n := probes.Load(); n > 0 {
		t.Fatalf("the rejected service's health check probed %d times", n)
	}
}

// TestRuntimeChangeKeepsReload: ctl add/remove racing reloads of the file.
// Before the fix the run-time change copied the configuration before a
// reload and applied the copy after it: the reload was undone while
// ReloadStatus said it was loaded.
func TestRuntimeChangeKeepsReload(t *testing.T) {
	a, b := tcpName(t), tcpName(t)
	v1 := freeAddr(t, "tcp")
	path := filepath.Join(t.TempDir(), "director.conf")
	d := New(quiet)
	t.Cleanup(d.Close)
	lost := 0
	for i := 0; i < 200; i++ {
		sch := []string{"rr", "wlc"}[i%2]
		conf := fmt.Sprintf("service s1 {\n vip %s\n scheduler %s\n check none\n server %s\n}\n", v1, sch, a)
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.AddServer("s1", b, 1) // "no service" before the first load
			d.RemoveServer("s1", b)
		}()
		if err := d.reloadFrom(path, fileStamp(path)); err != nil {
			t.Fatal(err)
		}
		<-done
		if got := d.cfg.Load().Services[0].Scheduler; got != sch {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of 200 reloads undone by a concurrent ctl add/remove", lost)
	}
}

// TestCheckEditKeepsDeadServerDown: a reload that changes only a down
// server's check (its interval) keeps it down until the new check passes
// rise times. Before the fix every new checker started the server up: the
// reload sent traffic to a dead server for fall intervals.
func TestCheckEditKeepsDeadServerDown(t *testing.T) {
	var status atomic.Int64
	status.Store(500)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(status.Load())) }))
	defer hs.Close()
	v1 := freeAddr(t, "tcp")
	conf := func(iv string) string {
		return fmt.Sprintf("service s1 {\n vip %s\n check http path=/ interval=%s timeout=250ms rise=1 fall=1\n server %s\n}\n", v1, iv, hs.Listener.Addr())
	}
	d := start(t, conf("300ms"))
	healthy := func() bool { return d.Status()[0].Servers[0].Healthy }
	waitFor(t, "the failing server marked down", 10*time.Second, func() bool { return !healthy() })
	if err := d.Apply(mustParse(t, conf("400ms"))); err != nil {
		t.Fatal(err)
	}
	if s := d.Status()[0].Servers[0]; s.Healthy || s.Weight != 0 {
		t.Fatalf("a failing server is up (weight %d) right after a reload that changed only its check interval", s.Weight)
	}
	// The new check still brings it back once it passes.
	status.Store(200)
	waitFor(t, "the server back up under the new check", 10*time.Second, healthy)
}
