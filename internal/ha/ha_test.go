package ha

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

func TestElectExactlyOne(t *testing.T) {
	for _, size := range []int{2, 3} {
		t.Run(string(rune('0'+size)), func(t *testing.T) {
			g := newGroup(t)
			names := []string{"a", "b", "c"}[:size]
			for _, name := range names {
				g.start(name, 100)
			}
			act := g.waitActive(5 * time.Second)
			// Rank: equal priorities, then the name (usually: a member's
			// in-sync record may reach etcd late).
			if act != "a" {
				t.Logf("active %s, want a (equal priorities rank by name)", act)
			}
			end := time.Now().Add(time.Second)
			for time.Now().Before(end) {
				if a := g.actives(); len(a) != 1 {
					t.Fatalf("actives %v", a)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, name := range names {
				waitFor(t, 2*time.Second, name+" standby or active", func() bool {
					st := g.nodes[name].n.Status()
					return st.State == StateActive || st.State == StateStandby
				})
				if s := g.nodes[name].n.Status(); s.Active != act || len(s.Peers) != size-1 {
					t.Errorf("%s status: %+v", name, s)
				}
			}
			g.checkNoOverlap()
		})
	}
}

func TestKillFailover(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	g.start("b", 100)
	act := g.waitActive(5 * time.Second)
	other := map[string]string{"a": "b", "b": "a"}[act]
	g.nodes[act].dp.forward(flows(500, 0)...)
	waitFor(t, 3*time.Second, "standby holds the table", func() bool {
		return g.sameTable(act, other) && g.peerSynced(act, other)
	})
	// Member records (the peers' states) follow through etcd.
	waitFor(t, 2*time.Second, "member records", func() bool {
		sa, sb := g.nodes[act].n.Status(), g.nodes[other].n.Status()
		return len(sa.Peers) == 1 && len(sb.Peers) == 1 && sa.Peers[0].State == StateStandby && sb.Peers[0].State == StateActive
	})
	sa, sb := g.nodes[act].n.Status(), g.nodes[other].n.Status()
	if p := sa.Peers[0]; !p.OutConnected || p.OutSent < 500 || p.OutAcked != p.OutSent || p.Lag != 0 || p.State != StateStandby || !p.InConnected {
		t.Errorf("the active's view of the standby: %+v", p)
	}
	if p := sb.Peers[0]; !p.InSynced || p.InApplied < 500 || p.State != StateActive {
		t.Errorf("the standby's view of the active: %+v", p)
	}
	if sa.LastReason != "won the election" || sa.Transitions < 2 || sa.FenceLeft <= 0 || sa.LeaseTTL != time.Second {
		t.Errorf("active's status: %+v", sa)
	}
	newDP := g.nodes[other].dp
	killed := xdp.MonoNow()
	g.kill(act)
	waitFor(t, 2*time.Second, other+" active", func() bool { return newDP.firstOpen(killed) > 0 })
	took := newDP.firstOpen(killed) - killed
	t.Logf("kill -> new active's fence open: %v", took)
	if took > 300*time.Millisecond {
		t.Errorf("takeover took %v (> 300 ms)", took)
	}
	if len(newDP.snapshot()) != 500 {
		t.Errorf("new active has %d flows, want 500", len(newDP.snapshot()))
	}
	if st := g.nodes[other].n.Status(); st.State != StateActive || st.Active != other || st.FenceLeft <= 0 {
		t.Errorf("status after takeover: %+v", st)
	}
	g.checkNoOverlap()
}

// proxy is a TCP relay to etcd that a test can cut (a partition).
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newProxy(t *testing.T, to string) *proxy {
	ln, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.DialTimeout("tcp", to, time.Second)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				c.Close()
				d.Close()
			}
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go func() { copyClose(c, d) }()
			go func() { copyClose(d, c) }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func copyClose(a, b net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := a.Read(buf)
		if k > 0 {
			if _, werr := b.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	a.Close()
	b.Close()
}

func (p *proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

func TestPartitionFenceClosesFirst(t *testing.T) {
	g := newGroup(t)
	px := newProxy(t, g.etcd[len("http://"):])
	g.start("a", 200, func(c *Config, _ *fakeDP) { c.Etcd = []string{"http://" + px.ln.Addr().String()} })
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s, want a (priority 200)", act)
	}
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(100, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	cut := xdp.MonoNow()
	px.close()
	bdp := g.nodes["b"].dp
	waitFor(t, 5*time.Second, "b active after the partition", func() bool { return bdp.firstOpen(cut) > 0 })
	bOpen := bdp.firstOpen(cut)
	ws := g.nodes["a"].dp.windows()
	aEnd := ws[len(ws)-1].to
	t.Logf("partition at 0: a's fence closed at %v, b's opened at %v", aEnd-cut, bOpen-cut)
	if aEnd >= bOpen {
		t.Errorf("a forwarded until %v, b from %v: overlap", aEnd-cut, bOpen-cut)
	}
	waitFor(t, 2*time.Second, "a fenced", func() bool {
		s := g.nodes["a"].n.Status().State
		return s == StateFenced || s == StateSyncing
	})
	if len(bdp.snapshot()) != 100 {
		t.Errorf("b holds %d flows, want 100", len(bdp.snapshot()))
	}
	g.checkNoOverlap()
}

func TestHandoverKeepsFlows(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	adp := g.nodes["a"].dp
	adp.forward(flows(1000, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	// The last flows, just before the handover, must arrive too.
	adp.forward(flows(10, 5000)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.nodes["b"].n.Handover(ctx, "a"); err != ErrNotActive {
		t.Errorf("handover by a standby: %v", err)
	}
	if err := g.nodes["a"].n.Handover(ctx, ""); err != nil {
		t.Fatalf("handover: %v", err)
	}
	waitFor(t, 2*time.Second, "b active", func() bool { return g.nodes["b"].n.Status().State == StateActive })
	if !g.sameTable("a", "b") || len(g.nodes["b"].dp.snapshot()) != 1010 {
		t.Errorf("b has %d flows, a %d", len(g.nodes["b"].dp.snapshot()), len(adp.snapshot()))
	}
	if a := g.actives(); len(a) != 1 || a[0] != "b" {
		t.Errorf("actives %v", a)
	}
	g.checkNoOverlap()
}

func TestFailbackAfterResync(t *testing.T) {
	g := newGroup(t)
	g.start("a", 200)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(200, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	g.kill("a")
	waitFor(t, 2*time.Second, "b active", func() bool { return g.nodes["b"].n.Status().State == StateActive })
	g.nodes["b"].dp.forward(flows(50, 1000)...)
	back := time.Now()
	g.start("a", 200)
	waitFor(t, 6*time.Second, "a back", func() bool { return g.nodes["a"].n.Status().State == StateActive })
	t.Logf("fail-back %v after the restart", time.Since(back))
	if time.Since(back) < failbackSynced {
		t.Errorf("fail-back before a was in sync for %v", failbackSynced)
	}
	if len(g.nodes["a"].dp.snapshot()) != 250 || !g.sameTable("a", "b") {
		t.Errorf("a holds %d flows, want 250", len(g.nodes["a"].dp.snapshot()))
	}
	g.checkNoOverlap()
}

func TestRestartedMidSyncDoesNotCampaign(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(100, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	// a's next snapshot is slow: b restarts and a dies before it is sent.
	g.nodes["a"].dp.mu.Lock()
	g.nodes["a"].dp.exportDelay = 800 * time.Millisecond
	g.nodes["a"].dp.mu.Unlock()
	g.kill("b")
	b := g.start("b", 100)
	waitFor(t, 2*time.Second, "a streams to b", func() bool {
		a := g.nodes["a"].n
		a.mu.Lock()
		defer a.mu.Unlock()
		o := a.out["b"]
		// The stream to the new b (the old one may not have ended yet).
		return o != nil && o.conn != nil && o.source && o.addr == g.nodes["b"].n.ln.Addr().String()
	})
	killed := time.Now()
	g.kill("a")
	waitFor(t, 5*time.Second, "b active", func() bool { return b.n.Status().State == StateActive })
	waited := time.Since(killed)
	t.Logf("b, not in sync, took over %v after a died", waited)
	if waited < 2*b.cfg.LeaseTTL-100*time.Millisecond {
		t.Errorf("b campaigned %v after the active died, without a snapshot (want >= 2×TTL)", waited)
	}
	g.checkNoOverlap()
}

func TestFlappingNeverTwoActives(t *testing.T) {
	g := newGroup(t)
	for _, name := range []string{"a", "b", "c"} {
		g.start(name, 100)
	}
	act := g.waitActive(5 * time.Second)
	start := time.Now()
	for i := 0; i < 10; i++ {
		g.nodes[act].dp.forward(flows(20, i*100)...)
		prio := g.nodes[act].cfg.Priority
		old := act
		// The others must be in sync, else nobody may campaign for 2×TTL.
		waitFor(t, 3*time.Second, "peers in sync", func() bool {
			for name := range g.nodes {
				if name != old && !(g.sameTable(old, name) && g.peerSynced(old, name)) {
					return false
				}
			}
			return true
		})
		g.kill(old)
		act = g.waitActive(2 * time.Second)
		if act == old {
			t.Fatalf("round %d: %s still active", i, act)
		}
		g.start(old, prio)
	}
	t.Logf("10 kills and restarts in %v", time.Since(start))
	g.checkNoOverlap()
	if len(g.nodes[act].dp.snapshot()) != 200 {
		t.Errorf("the last active holds %d flows, want 200", len(g.nodes[act].dp.snapshot()))
	}
}

func TestWrongKeyRefused(t *testing.T) {
	g := newGroup(t)
	a := g.start("a", 100)
	b := g.start("b", 100, func(c *Config, _ *fakeDP) { c.Key = []byte("another-key-of-16-bytes") })
	waitFor(t, 3*time.Second, "sync errors counted", func() bool {
		return a.n.Status().SyncErrors > 0 && b.n.Status().SyncErrors > 0
	})
	for _, p := range a.n.Status().Peers {
		if p.OutConnected || p.InConnected {
			t.Errorf("a connected to %s with a wrong key: %+v", p.Name, p)
		}
	}
}

func TestActiveActive(t *testing.T) {
	g := newGroup(t)
	aa := func(c *Config, _ *fakeDP) { c.Mode = ActiveActive }
	g.start("a", 100, aa)
	g.start("b", 100, aa)
	waitFor(t, 2*time.Second, "both active", func() bool { return len(g.actives()) == 2 })
	for _, tn := range g.nodes {
		tn.dp.mu.Lock()
		c := tn.dp.calls[0]
		tn.dp.mu.Unlock()
		if c.mode != xdp.HAActiveActive {
			t.Errorf("%s: first SetHA mode %d", tn.name, c.mode)
		}
	}
	waitFor(t, 2*time.Second, "streams", func() bool { return g.peerSynced("a", "b") && g.peerSynced("b", "a") })
	g.nodes["a"].dp.forward(flows(30, 0)...)
	g.nodes["b"].dp.forward(flows(40, 1000)...)
	waitFor(t, 2*time.Second, "both hold every flow", func() bool {
		return len(g.nodes["a"].dp.snapshot()) == 70 && g.sameTable("a", "b")
	})
}

func TestCloseHandsOver(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(100, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	a := g.nodes["a"]
	delete(g.nodes, "a")
	if err := a.n.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "b active", func() bool { return g.nodes["b"].n.Status().State == StateActive })
	if len(g.nodes["b"].dp.snapshot()) != 100 {
		t.Errorf("b holds %d flows", len(g.nodes["b"].dp.snapshot()))
	}
	a.dp.mu.Lock()
	last := a.dp.calls[len(a.dp.calls)-1]
	a.dp.mu.Unlock()
	if last.until != 0 {
		t.Errorf("a's fence left open after Close: %+v", last)
	}
	g.checkNoOverlap()
}

func TestLostChangesResync(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	adp := g.nodes["a"].dp
	adp.forward(flows(10, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	// The kernel dropped changes: the table has a flow b never heard of.
	adp.mu.Lock()
	for _, c := range flows(5, 100) {
		adp.table[connKey(c)] = c
	}
	adp.lost++
	adp.mu.Unlock()
	adp.forward(flows(1, 200)...)
	waitFor(t, 3*time.Second, "b resynced", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	if s := g.nodes["a"].n.Status(); s.Resyncs == 0 {
		t.Errorf("no resync counted: %+v", s)
	}
	if len(g.nodes["b"].dp.snapshot()) != 16 {
		t.Errorf("b holds %d flows, want 16", len(g.nodes["b"].dp.snapshot()))
	}
}

// TestProbeDead: only a refused or reset sync port proves a process gone.
func TestProbeDead(t *testing.T) {
	g := newGroup(t)
	a := g.start("a", 100)
	if a.n.probeDead(a.n.ln.Addr().String()) {
		t.Error("a live director probed dead")
	}
	if s := a.n.Status(); s.SyncErrors != 0 {
		t.Errorf("a probe counted as a sync error: %+v", s)
	}
	closed := freeAddr(t)
	if !a.n.probeDead(closed) {
		t.Error("a refused port probed alive")
	}
	// Accepts, then closes without a word: a listener going away.
	ln, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if !a.n.probeDead(ln.Addr().String()) {
		t.Error("a port that closes at once probed alive")
	}
	// Accepts and says nothing: frozen (SIGSTOP). Not proof.
	frozen, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	if a.n.probeDead(frozen.Addr().String()) {
		t.Error("a silent (frozen) port probed dead")
	}
}

// TestInSyncStandbyWinsOverSyncing: of two standbys, the one in sync takes
// over when the active dies; the one restarted mid-sync does not, even if
// it ranks higher.
func TestInSyncStandbyWinsOverSyncing(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	g.start("c", 100)
	g.nodes["a"].dp.forward(flows(50, 0)...)
	waitFor(t, 3*time.Second, "b and c in sync", func() bool {
		return g.sameTable("a", "b") && g.peerSynced("a", "b") && g.sameTable("a", "c") && g.peerSynced("a", "c")
	})
	adp := g.nodes["a"].dp
	adp.mu.Lock()
	adp.exportDelay = 800 * time.Millisecond
	adp.mu.Unlock()
	g.kill("b")
	g.start("b", 200) // would rank first, but has no snapshot
	waitFor(t, 2*time.Second, "a streams to b", func() bool {
		a := g.nodes["a"].n
		a.mu.Lock()
		defer a.mu.Unlock()
		o := a.out["b"]
		// The stream to the new b (the old one may not have ended yet).
		return o != nil && o.conn != nil && o.source && o.addr == g.nodes["b"].n.ln.Addr().String()
	})
	g.kill("a")
	if act := g.waitActive(time.Second); act != "c" {
		t.Fatalf("active %s, want c (in sync)", act)
	}
	if n := len(g.nodes["c"].dp.snapshot()); n != 50 {
		t.Errorf("c holds %d flows, want 50", n)
	}
	g.checkNoOverlap()
}

// TestFrozenActive: a frozen (SIGSTOP) active keeps its sockets open and
// says nothing. That is not proof of death: nobody revokes its lease, its
// fence closes by its deadline, and the standby takes over once etcd
// expires the lease. Thawed, it finds itself fenced.
func TestFrozenActive(t *testing.T) {
	g := newGroup(t)
	g.start("a", 100)
	if act := g.waitActive(5 * time.Second); act != "a" {
		t.Fatalf("active %s", act)
	}
	g.start("b", 100)
	g.nodes["a"].dp.forward(flows(20, 0)...)
	waitFor(t, 3*time.Second, "b in sync", func() bool { return g.sameTable("a", "b") && g.peerSynced("a", "b") })
	bdp := g.nodes["b"].dp
	frozen := xdp.MonoNow()
	g.nodes["a"].n.frozen.Store(true)
	waitFor(t, 5*time.Second, "b active", func() bool { return bdp.firstOpen(frozen) > 0 })
	took := bdp.firstOpen(frozen) - frozen
	ttl := g.nodes["b"].cfg.LeaseTTL
	t.Logf("frozen at 0: b opened at %v", took)
	if took < ttl/2 {
		t.Errorf("b took over %v after the freeze: the frozen active's lease was revoked early", took)
	}
	ws := g.nodes["a"].dp.windows()
	if end := ws[len(ws)-1].to; end >= bdp.firstOpen(frozen) {
		t.Errorf("a's fence open until %v, b's opened at %v", end-frozen, took)
	}
	g.nodes["a"].n.frozen.Store(false)
	waitFor(t, 3*time.Second, "a standby again", func() bool {
		s := g.nodes["a"].n.Status()
		return s.State != StateActive && s.Active == "b"
	})
	if a := g.actives(); len(a) != 1 || a[0] != "b" {
		t.Errorf("actives after the thaw: %v", a)
	}
	g.checkNoOverlap()
}
