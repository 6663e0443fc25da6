package launch_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSupervise: in process (under -race), a role killed is reported with
// its signal and restarted on its address, the delays grow while it keeps
// dying, a failed restart is tried again, and cancelling stops every role
// with no restart after.
func TestSupervise(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cfg := launch.ClusterConfig{Bin: pfstest.Binary(t), Data: t.TempDir(), MetaListen: "127.0.0.1:0",
		IODListens: []string{"127.0.0.1:0"}, NodeListen: []string{"127.0.0.1:0", "127.0.0.1:0"},
		VIP: freeAddr(t), Admin: freeAddr(t), Dataplane: "l7", Scheduler: "rr"}
	c, err := launch.StartCluster(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan launch.Event, 100)
	done := make(chan struct{})
	go func() {
		c.Supervise(ctx, launch.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second, Reset: time.Minute},
			func(e launch.Event) { events <- e })
		close(done)
	}()
	next := func() launch.Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(30 * time.Second):
			t.Fatal("no event within 30 s")
		}
		return launch.Event{}
	}
	var delays []time.Duration
	for range 3 {
		old := c.Proc("node1")
		old.Kill()
		e := next()
		if e.Role != "node1" || e.Kind != "died" || !strings.Contains(e.Status, "signal 9") {
			t.Fatalf("event %+v, want node1 died by signal 9", e)
		}
		delays = append(delays, e.Delay)
		if e = next(); e.Role != "node1" || e.Kind != "restarted" || e.Addr != old.Addr {
			t.Fatalf("event %+v, want node1 restarted on %s", e, old.Addr)
		}
		if p := c.Proc("node1"); p == old || p.Addr != old.Addr {
			t.Fatalf("node1 is %v on %s after the restart", p.Pid(), p.Addr)
		}
	}
	if delays[0] != 200*time.Millisecond || delays[1] != 400*time.Millisecond || delays[2] != 800*time.Millisecond {
		t.Errorf("delays %v, want 200ms 400ms 800ms", delays)
	}

	// A restart that fails (node2's address taken meanwhile) is reported
	// and tried again later.
	old := c.Proc("node2")
	old.Kill()
	if e := next(); e.Role != "node2" || e.Kind != "died" {
		t.Fatalf("event %+v, want node2 died", e)
	}
	l, err := net.Listen("tcp", old.Addr)
	if err != nil {
		t.Fatal(err)
	}
	e := next()
	l.Close()
	if e.Role != "node2" || e.Kind != "failed" || e.Err == nil || e.Delay != 400*time.Millisecond {
		t.Fatalf("event %+v, want node2's restart failed, next try in 400ms", e)
	}
	if e = next(); e.Role != "node2" || e.Kind != "restarted" || e.Addr != old.Addr {
		t.Fatalf("event %+v, want node2 restarted on %s", e, old.Addr)
	}
	procs := c.Procs()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Supervise did not return within 30 s of the cancel")
	}
	for _, p := range procs {
		select {
		case <-p.Done():
		default:
			t.Errorf("%s still running after Supervise returned", p.Name)
		}
	}
	select {
	case e := <-events:
		t.Errorf("event after the stop: %v", e)
	default:
	}
}
