package meta

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
)

func TestMergeExts(t *testing.T) {
	xs := mergeExts(nil, staleExt{1, 100, 50})
	xs = mergeExts(xs, staleExt{2, 150, 10}) // adjacent: one extent
	xs = mergeExts(xs, staleExt{3, 400, 10})
	if want := []staleExt{{2, 100, 60}, {3, 400, 10}}; !slices.Equal(xs, want) {
		t.Fatalf("merged %v, want %v", xs, want)
	}
	xs = mergeExts(xs, staleExt{4, 120, 0}) // to the end swallows the rest
	if want := []staleExt{{4, 100, 0}}; !slices.Equal(xs, want) {
		t.Fatalf("merged with Len 0: %v, want %v", xs, want)
	}
	xs = nil
	for i := range 200 {
		xs = mergeExts(xs, staleExt{uint64(i + 1), uint64(i) * 1000, 10})
	}
	if len(xs) > maxStaleExtents {
		t.Fatalf("%d extents, bound %d", len(xs), maxStaleExtents)
	}
	// Widened, never narrowed: every marked byte is still covered.
	for i := range 200 {
		if !overlaps(xs, staleExt{0, uint64(i) * 1000, 10}) || !overlaps(xs, staleExt{0, uint64(i)*1000 + 9, 1}) {
			t.Fatalf("mark %d lost by the bound: %v", i, xs)
		}
	}
}

// withCopies gives file ino the copies layout (Replicas, Servers, Extra),
// written straight into the store of every machine the engine applies to
// (placement of replicas is not this file's subject); Raft members first
// catch up with the service's store.
func withCopies(t *testing.T, s *Service, ino uint64, replicas uint32, servers, extra []uint32) {
	t.Helper()
	ms := []*machine{s.m}
	if r, ok := s.eng.(*replayed); ok {
		ms = append(ms, r.tee.b)
	}
	groupsMu.Lock()
	g := groups[filepath.Dir(s.m.path)]
	groupsMu.Unlock()
	if g != nil {
		for _, m := range g.ms {
			for end := time.Now().Add(10 * time.Second); m.Applied() < s.m.Applied(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("raft member at %d, the service at %d", m.Applied(), s.m.Applied())
				}
			}
		}
		ms = append(ms, g.ms...)
	}
	for _, m := range ms {
		err := m.db.Update(func(btx *bolt.Tx) error {
			t := tx{Tx: btx}
			n, err := t.inode(ino)
			if err != nil {
				return err
			}
			n.Replicas, n.Servers, n.Extra, n.StripeCount = replicas, servers, extra, uint32(len(servers))
			return t.put(n)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// copyEngines: forEachEngine (withCopies writes every member's store).
func copyEngines(t *testing.T, f func(t *testing.T, o opener)) { forEachEngine(t, f) }

func staleRecs(t *testing.T, s *Service, ino uint64) []proto.StaleRec {
	t.Helper()
	return call[*proto.StaleReply](t, s, &proto.GetStale{Ino: ino}).Recs
}

// A single copy can never be marked stale, a column the sender knows wrong
// is ESTALE, a server outside the column EINVAL: nothing is recorded.
func TestMarkStaleRefusals(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1, Replicas: 1}).Attr
		col := []uint32{a.Servers[0]}
		_, err := s.Handle(context.Background(), &proto.MarkStale{Ino: a.Ino, Column: col, Servers: col, Off: 0, Len: 10})
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "no current copy") {
			t.Fatalf("marking the only copy: %v, want EIO no current copy", err)
		}
		other := a.Servers[0]%3 + 1
		errno(t, s, &proto.MarkStale{Ino: a.Ino, Column: []uint32{col[0], other}, Servers: []uint32{other}, Len: 10}, syscall.ESTALE)
		errno(t, s, &proto.MarkStale{Ino: a.Ino, Index: 1, Column: col, Servers: col, Len: 10}, syscall.EINVAL)
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		errno(t, s, &proto.MarkStale{Ino: d.Ino, Column: col, Servers: col, Len: 10}, syscall.EINVAL)
		if recs := staleRecs(t, s, a.Ino); len(recs) != 0 {
			t.Fatalf("refused marks recorded: %v", recs)
		}
		if st := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr.Stale; st != 0 {
			t.Fatalf("Stale %d after refusals", st)
		}
	})
}

func TestMarkStaleRecords(t *testing.T) {
	copyEngines(t, func(t *testing.T, o opener) {
		s := open(t, o)
		ctx := context.Background()
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, a.Ino, 3, []uint32{1}, []uint32{2, 3})
		col := []uint32{1, 2, 3}
		mark := func(server uint32, off, n uint64) error {
			_, err := s.Handle(ctx, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{server}, Off: off, Len: n})
			return err
		}
		s.wmu.Lock()
		before := s.last
		s.wmu.Unlock()
		for _, m := range []struct{ server, off, n uint64 }{{2, 0, 100}, {2, 100, 50}, {3, 50, 10}} {
			if err := mark(uint32(m.server), m.off, m.n); err != nil {
				t.Fatal(err)
			}
		}
		s.wmu.Lock()
		changed, _ := s.changesAfter(before)
		s.wmu.Unlock()
		if !slices.Contains(changed, a.Ino) {
			t.Fatalf("marks did not notify inode %d (changed %v)", a.Ino, changed)
		}
		want := []proto.StaleRec{{Index: 0, Server: 2, Off: 0, Len: 150}, {Index: 0, Server: 3, Off: 50, Len: 10}}
		if got := staleRecs(t, s, a.Ino); !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
		if st := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr.Stale; st != 2 {
			t.Fatalf("Stale %d, want 2 (servers 2 and 3 of column 0)", st)
		}
		// [55, 60) would be stale on every copy.
		err := mark(1, 55, 10)
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "no current copy") {
			t.Fatalf("mark leaving no current copy: %v", err)
		}
		if err := mark(1, 60, 10); err != nil { // server 3 is current there
			t.Fatalf("mark with server 3 current: %v", err)
		}
		if got := staleRecs(t, s, a.Ino); len(got) != 3 || got[0] != (proto.StaleRec{Index: 0, Server: 1, Off: 60, Len: 10}) {
			t.Fatalf("records %v", got)
		}

		// A clear up to a sequence number keeps later marks.
		var seq uint64
		s.view(func(t tx) error { seq = t.peekStaleSeq() - 1; return nil })
		if err := mark(3, 1000, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.propose(ctx, &command{Kind: cmdClearStale, Ino: a.Ino, Left: []uint32{0, 3}, Cut: int64(seq)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.propose(ctx, &command{Kind: cmdClearStale, Ino: a.Ino, Left: []uint32{0, 1}, Cut: int64(seq)}); err != nil {
			t.Fatal(err)
		}
		want = []proto.StaleRec{{Index: 0, Server: 2, Off: 0, Len: 150}, {Index: 0, Server: 3, Off: 1000, Len: 0}}
		if got := staleRecs(t, s, a.Ino); !slices.Equal(got, want) {
			t.Fatalf("after clear up to %d: %v, want %v", seq, got, want)
		}
		if st := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr.Stale; st != 2 {
			t.Fatalf("Stale %d after clear, want 2", st)
		}

		// Cut to 0: the records stay (a copy that missed the truncate
		// holds old bytes); removed: none left.
		call[*proto.AttrReply](t, s, &proto.SetAttr{Ino: a.Ino, Mask: proto.SetSize, Size: 0})
		if got := staleRecs(t, s, a.Ino); !slices.Equal(got, want) {
			t.Fatalf("records after truncate to 0: %v, want %v", got, want)
		}
		if err := mark(2, 0, 10); err != nil {
			t.Fatal(err)
		}
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "f"})
		s.view(func(tt tx) error {
			if n := tt.countStale(a.Ino); n != 0 {
				t.Errorf("%d records left of a removed file", n)
			}
			return nil
		})
	})
}

// fakeIOD answers Heal like an I/O server would (Copied: the ranges'
// bytes, Len 0 counted as 1 MiB), recording the requests.
type fakeIOD struct {
	mu    sync.Mutex
	heals []proto.Heal
	fail  bool
	gate  chan struct{} // if set, each Heal waits for it
	addr  string
	// who, if set, answers Identify (the probe of a server that is up).
	who *proto.ServersReply
}

func (f *fakeIOD) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	f.mu.Lock()
	who := f.who
	f.mu.Unlock()
	if _, ok := req.(*proto.Identify); ok && who != nil {
		return who, nil
	}
	m, ok := req.(*proto.Heal)
	if !ok {
		return nil, proto.Errorf(syscall.EOPNOTSUPP, "fake iod")
	}
	f.mu.Lock()
	gate, fail := f.gate, f.fail
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail {
		return nil, proto.Errorf(syscall.EIO, "fake iod: heal refused")
	}
	f.mu.Lock()
	f.heals = append(f.heals, *m)
	f.mu.Unlock()
	var n uint64
	for _, x := range m.Ranges {
		n += cmpOr(x.Len, 1<<20)
	}
	return &proto.HealReply{Copied: n}, nil
}

func cmpOr(a, b uint64) uint64 {
	if a != 0 {
		return a
	}
	return b
}

func (f *fakeIOD) got() []proto.Heal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.heals)
}

// openWithIODs opens a service with n fake I/O servers registered (IDs
// 1..n, every one up).
func openWithIODs(t *testing.T, o opener, cfg Config, n int) (*Service, []*fakeIOD) {
	t.Helper()
	cfg.Data, cfg.Log = t.TempDir(), quiet
	s, err := o(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var fakes []*fakeIOD
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeIOD{addr: l.Addr().String()}
		srv := &proto.Server{Handler: f, Log: quiet, Security: s.sec}
		go srv.Serve(l)
		t.Cleanup(srv.Close)
		if _, err := register(t, s, &proto.Register{Addr: f.addr}); err != nil {
			t.Fatal(err)
		}
		fakes = append(fakes, f)
	}
	return s, fakes
}

// waitFor polls cond (bounded) while kicking the healer.
func waitFor(t *testing.T, s *Service, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		s.kickHealer()
	}
}

// The leader heals a stale copy from the current one and clears the
// record; a mark made while the heal runs survives it.
func TestHealClearsWhatItHealed(t *testing.T) {
	copyEngines(t, func(t *testing.T, o opener) {
		s, fakes := openWithIODs(t, o, Config{}, 2)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{2})
		col := []uint32{1, 2}
		gate := make(chan struct{})
		fakes[1].mu.Lock()
		fakes[1].gate = gate
		fakes[1].mu.Unlock()
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{2}, Off: 0, Len: 8192})
		s.kickHealer()
		// While the heal waits in the iod, a new write fails on server 2.
		time.Sleep(200 * time.Millisecond)
		call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: col, Servers: []uint32{2}, Off: 1 << 20, Len: 100})
		close(gate)
		waitFor(t, s, "the first heal's clear", func() bool {
			recs := staleRecs(t, s, a.Ino)
			return !slices.ContainsFunc(recs, func(r proto.StaleRec) bool { return r.Off == 0 })
		})
		waitFor(t, s, "the second heal", func() bool { return len(staleRecs(t, s, a.Ino)) == 0 })
		hs := fakes[1].got()
		if len(hs) < 2 {
			t.Fatalf("server 2 got %d heals, want 2", len(hs))
		}
		first := hs[0]
		if first.Handle != a.Ino || first.Index != 0 || first.Whole || !slices.Equal(first.Ranges, []proto.Extent{{Off: 0, Len: 8192}}) ||
			len(first.From) != 1 || first.From[0].ID != 1 || first.From[0].Addr != fakes[0].addr {
			t.Fatalf("heal request %+v", first)
		}
		if !slices.ContainsFunc(hs, func(h proto.Heal) bool { return slices.Contains(h.Ranges, proto.Extent{Off: 1 << 20, Len: 100}) }) {
			t.Fatalf("the mark made during the heal was not healed: %+v", hs)
		}
		if len(fakes[0].got()) != 0 {
			t.Fatalf("the current copy was healed: %+v", fakes[0].got())
		}
		if st := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr.Stale; st != 0 {
			t.Fatalf("Stale %d after heal", st)
		}
		waitFor(t, s, "the healed figure", func() bool {
			for _, si := range call[*proto.ServersReply](t, s, &proto.Servers{}).Servers {
				if si.ID == 2 {
					return si.Healed >= 8192+100 && si.Stale == 0
				}
			}
			return false
		})
	})
}

func TestTokenBucketRate(t *testing.T) {
	var now time.Time = time.Unix(1000, 0)
	start := now
	b := newTokenBucket(1 << 20)
	b.now = func() time.Time { return now }
	b.sleep = func(_ context.Context, d time.Duration) error { now = now.Add(d); return nil }
	const total = 20 << 20
	for range total / (256 << 10) {
		if err := b.take(context.Background(), 256<<10); err != nil {
			t.Fatal(err)
		}
	}
	// A burst of one second's worth, then the rate: at least 19 s for
	// 20 MiB at 1 MiB/s, and not much more.
	el := now.Sub(start)
	if el < 18*time.Second || el > 21*time.Second {
		t.Fatalf("20 MiB at 1 MiB/s took %s of the clock", el)
	}
}

// A lost server's copies move to the other servers, spread over them,
// stale whole there; a file whose only copy was there stays.
func TestLostServerReReplicates(t *testing.T) {
	copyEngines(t, func(t *testing.T, o opener) {
		s, fakes := openWithIODs(t, o, Config{}, 4)
		for _, f := range fakes {
			f.mu.Lock()
			f.fail = true // keep the records: this test looks at them
			f.mu.Unlock()
		}
		var files []uint64
		for i := range 9 {
			a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f" + string(rune('a'+i)), Mode: 0o644, StripeCount: 1}).Attr
			withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{uint32(2 + i%3)})
			files = append(files, a.Ino)
		}
		only := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "only", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, only.Ino, 1, []uint32{1}, nil)

		r := call[*proto.ServersReply](t, s, &proto.LoseServer{ID: 1})
		if r.Servers[0].State != proto.ServerLost {
			t.Fatalf("LoseServer answered state %s", proto.StateName(r.Servers[0].State))
		}
		errno(t, s, &proto.LoseServer{ID: 9}, syscall.ENOENT)
		waitFor(t, s, "re-replication", func() bool {
			for _, ino := range files {
				if slices.Contains(call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: ino}).Attr.Servers, 1) {
					return false
				}
			}
			return true
		})
		per := map[uint32]int{}
		for i, ino := range files {
			a := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: ino}).Attr
			kept := uint32(2 + i%3)
			nw := a.Servers[0]
			if !slices.Equal(a.Extra, []uint32{kept}) || nw == kept || nw == 1 {
				t.Fatalf("file %d: servers %v extra %v, want a new first copy beside %d", ino, a.Servers, a.Extra, kept)
			}
			per[nw]++
			want := []proto.StaleRec{{Index: 0, Server: nw, Off: 0, Len: 0}}
			if got := staleRecs(t, s, ino); !slices.Equal(got, want) || a.Stale != 1 {
				t.Fatalf("file %d: records %v (Stale %d), want %v", ino, got, a.Stale, want)
			}
		}
		for id := uint32(2); id <= 4; id++ {
			if per[id] < 2 || per[id] > 4 {
				t.Fatalf("new copies per server %v, want them spread (3 each, give or take one)", per)
			}
		}
		if a := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: only.Ino}).Attr; !slices.Equal(a.Servers, []uint32{1}) {
			t.Fatalf("file with its only copy lost moved to %v", a.Servers)
		}
	})
}

// A server down longer than --lost-after becomes lost.
func TestDownServerBecomesLost(t *testing.T) {
	s, _ := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{LostAfter: time.Minute}, 2)
	s.iodsMu.Lock()
	s.heard[2] = time.Now().Add(-2 * time.Minute).UnixNano()
	s.iodsMu.Unlock()
	s.checkLost()
	if st := stateOf(t, s, 2); st != proto.ServerLost {
		t.Fatalf("server 2 down 2 minutes with --lost-after 1m: %s", proto.StateName(st))
	}
	if st := stateOf(t, s, 1); st != proto.ServerUp {
		t.Fatalf("server 1: %s", proto.StateName(st))
	}
}

// A server whose disk is being replaced has every copy it holds marked
// stale whole (rebuilt from the others once the new disk registers); a
// file with no other copy is left alone.
func TestReplacedServerRebuilt(t *testing.T) {
	copyEngines(t, func(t *testing.T, o opener) {
		s, _ := openWithIODs(t, o, Config{}, 2)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{2})
		only := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "only", Mode: 0o644, StripeCount: 1}).Attr
		withCopies(t, s, only.Ino, 1, []uint32{2}, nil)
		call[*proto.ServersReply](t, s, &proto.ReplaceServer{ID: 2})
		want := []proto.StaleRec{{Index: 0, Server: 2, Off: 0, Len: 0}}
		waitFor(t, s, "the rebuild records", func() bool { return slices.Equal(staleRecs(t, s, a.Ino), want) })
		if got := staleRecs(t, s, only.Ino); len(got) != 0 {
			t.Fatalf("file without another copy marked: %v", got)
		}
		if a := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr; !slices.Equal(a.Extra, []uint32{2}) {
			t.Fatalf("a replaced server's copy moved: extra %v", a.Extra)
		}
	})
}

// The heal figures reach `corral fs servers` and the metrics.
func TestHealFiguresAndMetrics(t *testing.T) {
	s, fakes := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{}, 2)
	fakes[1].mu.Lock()
	fakes[1].fail = true
	fakes[1].mu.Unlock()
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
	withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{2})
	call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: []uint32{1, 2}, Servers: []uint32{2}, Off: 0, Len: 4096})
	waitFor(t, s, "the stale figure", func() bool {
		for _, si := range call[*proto.ServersReply](t, s, &proto.Servers{}).Servers {
			if si.ID == 2 {
				return si.Stale == 4096
			}
		}
		return false
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(healCollector{s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			switch {
			case m.Gauge != nil:
				got[name] = m.GetGauge().GetValue()
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			}
		}
	}
	if got["corral_meta_stale_bytes{2}"] != 4096 || got["corral_meta_stale_bytes{1}"] != 0 || got["corral_meta_heal_pending"] != 1 {
		t.Fatalf("metrics %v", got)
	}
	if _, ok := got["corral_meta_healed_bytes_total"]; !ok {
		t.Fatalf("no healed counter: %v", got)
	}
}

// The healer's copies go through --heal-rate: 20 MiB at 1 MiB/s take at
// least 14 s of the (fake) clock (a second of burst, the last piece's
// debt unpaid).
func TestHealHonoursRate(t *testing.T) {
	s, _ := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{HealRate: 1 << 20}, 2)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	start := now
	b := s.hl.bucket
	b.mu.Lock()
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b.sleep = func(_ context.Context, d time.Duration) error { mu.Lock(); now = now.Add(d); mu.Unlock(); return nil }
	b.tokens, b.last = b.burst, time.Time{}
	b.mu.Unlock()
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 1}).Attr
	withCopies(t, s, a.Ino, 2, []uint32{1}, []uint32{2})
	call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: []uint32{1, 2}, Servers: []uint32{2}, Off: 0, Len: 20 << 20})
	waitFor(t, s, "the heal", func() bool { return len(staleRecs(t, s, a.Ino)) == 0 })
	mu.Lock()
	el := now.Sub(start)
	mu.Unlock()
	if el < 14*time.Second {
		t.Fatalf("20 MiB healed in %s of the clock at 1 MiB/s", el)
	}
}

// A server that answers as itself cannot be declared lost (its next
// heartbeat would bring it back); once it stops answering it can.
func TestLoseServerRefusesAnUpServer(t *testing.T) {
	s, fakes := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{}, 2)
	fakes[1].mu.Lock()
	fakes[1].who = &proto.ServersReply{Servers: []proto.ServerInfo{{ID: 2, Addr: fakes[1].addr}}, Cluster: s.Cluster()}
	fakes[1].mu.Unlock()
	errno(t, s, &proto.LoseServer{ID: 2}, syscall.EBUSY)
	fakes[1].mu.Lock()
	fakes[1].who = nil
	fakes[1].mu.Unlock()
	if st := call[*proto.ServersReply](t, s, &proto.LoseServer{ID: 2}).Servers[0].State; st != proto.ServerLost {
		t.Fatalf("state %s", proto.StateName(st))
	}
}

// A pass holds a bounded number of records, going on from where the last
// one stopped: a record that cannot be healed (its only source is down)
// does not hold back the ones after it.
func TestHealPassesGoRound(t *testing.T) {
	old := maxHealJobs
	maxHealJobs = 1
	t.Cleanup(func() { maxHealJobs = old })
	s, fakes := openWithIODs(t, func(cfg Config) (*Service, error) { return Open(cfg) }, Config{}, 3)
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "a", Mode: 0o644, StripeCount: 1}).Attr
	withCopies(t, s, a.Ino, 2, []uint32{3}, []uint32{2})
	s.iodsMu.Lock()
	s.heard[3] = time.Now().Add(-time.Minute).UnixNano() // down, not yet lost
	s.iodsMu.Unlock()
	b := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "b", Mode: 0o644, StripeCount: 1}).Attr
	withCopies(t, s, b.Ino, 2, []uint32{1}, []uint32{2})
	call[*proto.OK](t, s, &proto.MarkStale{Ino: a.Ino, Column: []uint32{3, 2}, Servers: []uint32{2}, Len: 10})
	call[*proto.OK](t, s, &proto.MarkStale{Ino: b.Ino, Column: []uint32{1, 2}, Servers: []uint32{2}, Len: 10})
	waitFor(t, s, "file b's heal", func() bool { return len(staleRecs(t, s, b.Ino)) == 0 })
	if got := staleRecs(t, s, a.Ino); len(got) != 1 {
		t.Fatalf("file a (source down) records %v", got)
	}
	for _, h := range fakes[1].got() {
		if h.Handle == a.Ino {
			t.Fatalf("heal of file a sent with its source down: %+v", h)
		}
	}
}
