package ha

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
)

// Tests run on 127.0.81.0/24 (this package's loopback range).
const testIP = "127.0.81.1"

// startEtcd runs a real etcd in-process. Short ticks let a 1 s lease be
// granted as asked (etcd raises TTLs below 1.5 election timeouts).
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "ha-test"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(t.TempDir(), "etcd.log")}
	cfg.TickMs, cfg.ElectionMs = 10, 100
	// A test's etcd need not survive a power cut; fsyncs on a shared
	// machine's disk would only add jitter.
	cfg.UnsafeNoFsync = true
	pu, _ := url.Parse("http://" + freeAddr(t))
	cu, _ := url.Parse("http://" + freeAddr(t))
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(10 * time.Second):
		t.Fatal("embedded etcd not ready in 10 s")
	}
	return cu.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fakeDP stands for the XDP program: it records every SetHA call and keeps
// the table in a map. The real program is tested in internal/dataplane/xdp
// and in the test bed.
type fakeDP struct {
	mu          sync.Mutex
	calls       []setHACall
	table       map[string]xdp.Conn
	ch          chan []xdp.ConnEvent
	lost        uint64
	dead        bool
	exportDelay time.Duration
}

func newFakeDP() *fakeDP {
	return &fakeDP{table: map[string]xdp.Conn{}, ch: make(chan []xdp.ConnEvent, 4096)}
}

func connKey(c xdp.Conn) string { return c.Proto + " " + c.Client.String() + " " + c.VIP.String() }

func (f *fakeDP) SetHA(mode xdp.HAMode, until time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return fmt.Errorf("fake dataplane: link gone")
	}
	f.calls = append(f.calls, setHACall{at: xdp.MonoNow(), mode: mode, until: until})
	return nil
}

func (f *fakeDP) ExportConns() ([]xdp.Conn, error) {
	f.mu.Lock()
	d := f.exportDelay
	f.mu.Unlock()
	time.Sleep(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []xdp.Conn
	for _, c := range f.table {
		cs = append(cs, c)
	}
	return cs, nil
}

func (f *fakeDP) ApplyConns(evs []xdp.ConnEvent) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		if ev.Op == xdp.OpDelete {
			delete(f.table, connKey(ev.Conn))
		} else {
			f.table[connKey(ev.Conn)] = ev.Conn
		}
	}
	return len(evs), 0, nil
}

func (f *fakeDP) Changes() <-chan []xdp.ConnEvent { return f.ch }

func (f *fakeDP) Lost() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

// forward is the program scheduling new flows (while its fence is open).
func (f *fakeDP) forward(cs ...xdp.Conn) {
	f.mu.Lock()
	var evs []xdp.ConnEvent
	for _, c := range cs {
		f.table[connKey(c)] = c
		evs = append(evs, xdp.ConnEvent{Op: xdp.OpNew, Conn: c})
	}
	f.mu.Unlock()
	f.ch <- evs
}

// kill is what kill -9 does to the program: the link goes with the fd, so
// the fence closes now whatever its deadline.
func (f *fakeDP) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, setHACall{at: xdp.MonoNow(), mode: xdp.HAFenced})
	f.dead = true
}

func (f *fakeDP) snapshot() map[string]xdp.Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]xdp.Conn, len(f.table))
	for k, v := range f.table {
		m[k] = v
	}
	return m
}

// span is a time the program forwarded: [from, to) in MonoNow terms.
type span struct{ from, to time.Duration }

// windows are the spans the fence was open, each cut by the next call.
func (f *fakeDP) windows() []span {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ws []span
	for i, c := range f.calls {
		if c.mode != xdp.HAFenced || c.until <= c.at {
			continue
		}
		end := c.until
		if i+1 < len(f.calls) && f.calls[i+1].at < end {
			end = f.calls[i+1].at
		}
		ws = append(ws, span{c.at, end})
	}
	return ws
}

// firstOpen is the first time the fence opened after t (-1: never).
func (f *fakeDP) firstOpen(after time.Duration) time.Duration {
	for _, w := range f.windows() {
		if w.from >= after {
			return w.from
		}
	}
	return -1
}

type tnode struct {
	name string
	cfg  Config
	n    *Node
	dp   *fakeDP
}

type group struct {
	t     *testing.T
	etcd  string
	nodes map[string]*tnode
	dps   []*fakeDP // every dataplane ever used, for the overlap check
	key   []byte
}

func newGroup(t *testing.T) *group {
	g := &group{t: t, etcd: startEtcd(t), nodes: map[string]*tnode{}, key: []byte("0123456789abcdef-group-key")}
	t.Cleanup(func() {
		for _, tn := range g.nodes {
			tn.n.crash()
		}
	})
	return g
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		level := slog.LevelInfo
		if os.Getenv("HA_TEST_DEBUG") != "" {
			level = slog.LevelDebug
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start starts (or restarts, with a fresh dataplane) a director.
func (g *group) start(name string, prio int, mutate ...func(*Config, *fakeDP)) *tnode {
	g.t.Helper()
	cfg := Config{
		Name: name, Group: "g1", Priority: prio, Etcd: []string{g.etcd},
		LeaseTTL: time.Second, SyncListen: testIP + ":0", Key: g.key,
		VIPs: []netip.Addr{netip.MustParseAddr("127.0.81.100")},
		Log:  testLog(g.t).With("node", name),
	}
	dp := newFakeDP()
	for _, m := range mutate {
		m(&cfg, dp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg, dp)
	if err != nil {
		g.t.Fatalf("start %s: %v", name, err)
	}
	tn := &tnode{name: name, cfg: cfg, n: n, dp: dp}
	g.nodes[name] = tn
	g.dps = append(g.dps, dp)
	return tn
}

// kill ends a director as kill -9 would.
func (g *group) kill(name string) {
	tn := g.nodes[name]
	tn.dp.kill()
	tn.n.crash()
	delete(g.nodes, name)
}

func (g *group) actives() []string {
	var a []string
	for name, tn := range g.nodes {
		if tn.n.Status().State == StateActive {
			a = append(a, name)
		}
	}
	sort.Strings(a)
	return a
}

// waitActive waits for exactly one active director and returns it.
func (g *group) waitActive(within time.Duration) string {
	g.t.Helper()
	var a []string
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if a = g.actives(); len(a) == 1 {
			return a[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatalf("no single active within %v: %v", within, a)
	return ""
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
}

// checkNoOverlap: no two dataplanes' open windows ever overlap.
func (g *group) checkNoOverlap() {
	g.t.Helper()
	for i, a := range g.dps {
		for j, b := range g.dps {
			if i >= j {
				continue
			}
			for _, x := range a.windows() {
				for _, y := range b.windows() {
					if x.from < y.to && y.from < x.to {
						g.t.Errorf("dataplanes %d and %d forwarded together: [%v, %v) and [%v, %v)", i, j, x.from, x.to, y.from, y.to)
					}
				}
			}
		}
	}
}

// inSync: the standby holds the active's table.
func (g *group) sameTable(a, b string) bool {
	ta, tb := g.nodes[a].dp.snapshot(), g.nodes[b].dp.snapshot()
	if len(ta) != len(tb) {
		return false
	}
	for k, v := range ta {
		if tb[k] != v {
			return false
		}
	}
	return true
}

func flows(n int, base int) []xdp.Conn {
	cs := make([]xdp.Conn, n)
	for i := range cs {
		cs[i] = xdp.Conn{
			Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte((base + i) >> 8), byte(base + i)}), uint16(1024+i)),
			VIP:    netip.MustParseAddrPort("127.0.81.100:80"),
			Proto:  "tcp",
			Real:   netip.MustParseAddr("10.9.0.1"),
			State:  xdp.StateEstablished,
		}
	}
	return cs
}

// peerSynced: from's status says to has acknowledged everything.
func (g *group) peerSynced(from, to string) bool {
	tn := g.nodes[from]
	tn.n.mu.Lock()
	defer tn.n.mu.Unlock()
	o := tn.n.out[to]
	return o != nil && o.caughtUpLocked()
}
