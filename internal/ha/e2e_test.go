package ha_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// The HA group end to end on a test bed (10.83.0.0/24): real directors
// with XDP on veths, the election in a real etcd, the clients' connections
// checked one by one, every director's forwarding captured on the wire.

// needHA: the test bed and XDP.
func needHA(t *testing.T) {
	t.Helper()
	lab.Need(t, lab.Netns, lab.XDP)
}

func startBed(t *testing.T, mode string, directors int) *bench.HABed {
	t.Helper()
	bin := pfstest.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hb, err := bench.StartHABed(ctx, bench.HABedConfig{Bin: bin, Data: t.TempDir(), Name: fmt.Sprintf("h4%d", time.Now().UnixNano()%100000),
		Subnet: netip.MustParsePrefix("10.83.0.0/24"), Directors: directors, Mode: mode, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hb.Close)
	if _, err := hb.WaitSettled(ctx, 30*time.Second); err != nil {
		t.Fatalf("%v%s", err, hb.Logs(5))
	}
	if err := hb.WaitServing(ctx, 20*time.Second); err != nil {
		t.Fatalf("%v%s", err, hb.Logs(5))
	}
	return hb
}

// load is the clients during a test: keep-alive connections requesting
// every 50 ms (checked one by one), new connections at 20/s, the capture.
type load struct {
	hb    *bench.HABed
	fleet *bench.Fleet
	ol    *bench.OpenLoop
	capt  *bench.Capture
}

func startLoad(t *testing.T, hb *bench.HABed, conns int) *load {
	t.Helper()
	ctx := context.Background()
	capt, err := bench.StartCapture(hb.Bed, hb.VIP.Addr(), hb.Names()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capt.Close)
	dial := hb.Bed.DialContext("client")
	fleet, err := bench.StartFleet(ctx, bench.FleetConfig{Dial: dial, Target: hb.VIP.String(), Path: "/big.bin", Host: launch.SampleDomain,
		Conns: conns, Chunk: 16 << 10, Interval: 50 * time.Millisecond, Timeout: 10 * time.Second, Span: 2 * time.Minute})
	if err != nil {
		t.Fatalf("%v%s", err, hb.Logs(5))
	}
	t.Cleanup(fleet.Stop)
	ol := bench.StartOpenLoop(ctx, dial, hb.VIP.String(), launch.SampleDomain, "/", 20, 3*time.Second, 2*time.Minute)
	t.Cleanup(ol.Stop)
	return &load{hb: hb, fleet: fleet, ol: ol, capt: capt}
}

// takeover waits (at most wait) for a director other than old to forward
// after t and returns when and which.
func (l *load) takeover(t *testing.T, at time.Time, old string, wait time.Duration) (time.Time, string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if first, who, ok := l.capt.First(at, old); ok {
			return first, who
		}
		if time.Now().After(deadline) {
			var states []string
			for _, d := range l.hb.Running() {
				st, err := l.hb.Status(context.Background(), d)
				states = append(states, fmt.Sprintf("%s: %s (active %q, fence left %v, %s) %v", d, st.State, st.Active, st.FenceLeft, st.LastReason, err))
			}
			neigh, _ := exec.Command("ip", "netns", "exec", l.hb.Bed.Netns("client"), "ip", "neigh", "show", l.hb.VIP.Addr().String()).CombinedOutput()
			var macs []string
			for _, d := range l.hb.Directors {
				macs = append(macs, d.Name+"="+d.MAC.String())
			}
			t.Fatalf("no director but %s forwarded within %v; %v; the client's neighbour entry for the VIP: %s (%v)%s",
				old, wait, states, strings.TrimSpace(string(neigh)), macs, l.hb.Logs(12))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check lets the load run 2 s past the takeover, then requires every
// connection established at the event to have survived, no new connection
// started after the takeover to have failed, and no two directors to have
// forwarded at once since from.
func (l *load) check(t *testing.T, what string, event, took time.Time, from time.Time) {
	t.Helper()
	time.Sleep(time.Until(took.Add(2 * time.Second)))
	s := l.fleet.Survival(event, took)
	if s.Established == 0 || s.Survived != s.Established {
		t.Errorf("%s: %d of %d established connections survived: %+v", what, s.Survived, s.Established, s)
	}
	// Attempts started after the takeover and already judged (3 s timeout).
	after := l.ol.Count(took, time.Now().Add(-100*time.Millisecond))
	if after.Failed > 0 {
		t.Errorf("%s: %d of %d new connections after the takeover failed: %v", what, after.Failed, after.Tried, after.Errors)
	}
	if ov, _ := l.capt.SplitBrain(from, time.Now(), 10*time.Millisecond); len(ov) > 0 {
		t.Errorf("%s: two directors forwarded at once: %v", what, ov[0])
	}
	t.Logf("%s: takeover %v after the event; %d/%d connections survived; new connections after: %d, %d failed",
		what, took.Sub(event).Round(time.Millisecond), s.Survived, s.Established, after.Tried, after.Failed)
}

func TestActiveStandby(t *testing.T) {
	needHA(t)
	hb := startBed(t, ha.ActiveStandby, 2)
	ctx := context.Background()
	l := startLoad(t, hb, 40)
	time.Sleep(time.Second)
	start := time.Now()
	settled := func() string {
		t.Helper()
		a, err := hb.WaitSettled(ctx, 30*time.Second)
		if err != nil {
			t.Fatalf("%v%s", err, hb.Logs(5))
		}
		return a
	}
	other := func(name string) string {
		if name == "d1" {
			return "d2"
		}
		return "d1"
	}

	t.Run("kill -9 of the active under load", func(t *testing.T) {
		active := settled()
		at, err := hb.Kill(active)
		if err != nil {
			t.Fatal(err)
		}
		took, who := l.takeover(t, at, active, 10*time.Second)
		if who != other(active) {
			t.Fatalf("%s took over, want %s", who, other(active))
		}
		l.check(t, "kill -9", at, took, start)
		if took.Sub(at) > 2*time.Second {
			t.Errorf("takeover %v after the kill: the stream's end did not move the election (a TTL is 2 s)", took.Sub(at))
		}
	})

	t.Run("fail-back", func(t *testing.T) {
		active := settled()
		if active == "d1" {
			t.Fatal("d1 is active after the kill: the kill moved nothing")
		}
		at := time.Now()
		if err := hb.StartDirector(ctx, "d1"); err != nil {
			t.Fatal(err)
		}
		{
			took, who := l.takeover(t, at, active, 30*time.Second)
			if who != "d1" {
				t.Fatalf("%s took the VIP, want d1 (priority 200) back", who)
			}
			l.check(t, "fail-back", at, took, start)
		}
		if a := settled(); a != "d1" {
			t.Fatalf("after fail-back %s is active, want d1", a)
		}
	})

	t.Run("clean handover", func(t *testing.T) {
		active := settled()
		at := time.Now()
		if err := hb.Handover(ctx, active, other(active)); err != nil {
			t.Fatal(err)
		}
		took, who := l.takeover(t, at, active, 10*time.Second)
		if who != other(active) {
			t.Fatalf("%s took over, want %s", who, other(active))
		}
		l.check(t, "handover", at, took, start)
	})

	t.Run("a standby restarted mid-sync", func(t *testing.T) {
		active := settled()
		standby := other(active)
		// Killed and started again at once: its stream from the active
		// ends in the middle and a new one begins with a full table.
		if _, err := hb.Kill(standby); err != nil {
			t.Fatal(err)
		}
		if err := hb.StartDirector(ctx, standby); err != nil {
			t.Fatal(err)
		}
		if a := settled(); a != active && a != standby {
			t.Fatalf("active %s", a)
		}
		st, err := hb.Status(ctx, active)
		if err != nil {
			t.Fatal(err)
		}
		// It now holds every flow: the active's death loses none.
		active = settled()
		at, err := hb.Kill(active)
		if err != nil {
			t.Fatal(err)
		}
		took, _ := l.takeover(t, at, active, 10*time.Second)
		l.check(t, "kill after a standby's resync", at, took, start)
		t.Logf("the active's view before the kill: resyncs %d, peers %+v", st.Resyncs, st.Peers)
		if err := hb.StartDirector(ctx, active); err != nil {
			t.Fatal(err)
		}
		settled()
	})

	t.Run("partition: the active's link down", func(t *testing.T) {
		active := settled()
		at := time.Now()
		if err := hb.Bed.LinkDown(active); err != nil {
			t.Fatal(err)
		}
		took, _ := l.takeover(t, at, active, 10*time.Second)
		// Back on the wire after the lease has gone: it must come back
		// fenced (not forwarding) and join as a standby or take the VIP
		// back only through the election.
		time.Sleep(500 * time.Millisecond)
		if err := hb.Bed.LinkUp(active); err != nil {
			t.Fatal(err)
		}
		l.check(t, "partition", at, took, start)
		settled()
		if ov, near := l.capt.SplitBrain(start, time.Now(), 10*time.Millisecond); len(ov) > 0 {
			t.Fatalf("after the link came back: %v (%d near)", ov[0], near)
		}
	})

	t.Run("flapping: 5 kills in a row", func(t *testing.T) {
		for i := range 5 {
			active := settled()
			at, err := hb.Kill(active)
			if err != nil {
				t.Fatal(err)
			}
			took, _ := l.takeover(t, at, active, 10*time.Second)
			l.check(t, fmt.Sprintf("kill %d", i+1), at, took, start)
			if err := hb.StartDirector(ctx, active); err != nil {
				t.Fatal(err)
			}
		}
		settled()
		if ov, _ := l.capt.SplitBrain(start, time.Now(), 10*time.Millisecond); len(ov) > 0 {
			t.Fatalf("split brain while flapping: %v", ov[0])
		}
	})
}

// TestActiveActiveFlowMoves: a flow whose packets the router moves to
// another director mid-connection keeps its real server (the table is
// synced, and the Maglev fallback agrees).
func TestActiveActiveFlowMoves(t *testing.T) {
	needHA(t)
	hb := startBed(t, ha.ActiveActive, 2)
	if err := hb.Bed.SetECMP("router", hb.VIP.Addr(), "d1"); err != nil {
		t.Fatal(err)
	}
	capt, err := bench.StartCapture(hb.Bed, hb.VIP.Addr(), hb.Names()...)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Close()
	fleet, err := bench.StartFleet(context.Background(), bench.FleetConfig{Dial: hb.Bed.DialContext("client"), Target: hb.VIP.String(),
		Path: "/big.bin", Host: launch.SampleDomain, Conns: 30, Chunk: 4096, Interval: 50 * time.Millisecond, Timeout: 10 * time.Second, Span: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Stop()
	time.Sleep(time.Second)
	before := fleet.Servers()
	if len(before) < 2 {
		t.Fatalf("30 connections (rr) reached %v: want several real servers", before)
	}
	moved := time.Now()
	if err := hb.Bed.SetECMP("router", hb.VIP.Addr(), "d2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if n := capt.Frames("d2", moved, time.Now()); n == 0 {
		t.Fatal("d2 forwarded nothing after the route moved to it")
	}
	if n := capt.Frames("d1", moved.Add(100*time.Millisecond), time.Now()); n != 0 {
		t.Fatalf("d1 forwarded %d frames after the route left it", n)
	}
	s := fleet.Survival(moved, moved.Add(500*time.Millisecond))
	if s.Established != 30 || s.Survived != s.Established {
		t.Fatalf("%d of %d connections survived the move: %+v", s.Survived, s.Established, s)
	}
	// A connection whose real server changed would have failed (the new
	// server has no such TCP connection): survival is the proof; the
	// servers' shares are the same.
	after := fleet.Servers()
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("servers before the move %v, after %v", before, after)
		}
	}
	t.Logf("%d connections moved from d1 to d2 and kept their servers %v", s.Survived, after)
}
