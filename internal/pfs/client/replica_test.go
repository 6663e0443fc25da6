package client_test

// Tests of the client's side of replicas against test doubles over
// loopback: fakeIOD (objects in memory; ReplWrite applies and forwards as
// the protocol says) and fakeMeta (one file's attributes, Servers,
// MarkStale with its Column check, GetStale). The real iod's ReplWrite and
// meta's stale records are other work; these doubles follow the contract
// in proto/msgs_redundancy.go.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Modes of a fakeIOD.
const (
	modeOK     = iota
	modeFail   // every request: EIO
	modeHang   // every request waits until the test ends (a stopped process)
	modeBadMsg // reads: EBADMSG (checksum mismatch)
	// modeSlowThenHang: the next answerN requests are answered after
	// 300 ms, then the server stops as modeHang (a busy server that stops).
	modeSlowThenHang
)

type fakeIOD struct {
	id      uint32
	addr    string
	srv     *proto.Server
	pool    *proto.Pool
	release chan struct{}
	mode    atomic.Int32
	answerN atomic.Int64 // modeSlowThenHang

	mu    sync.Mutex
	objs  map[[2]uint64][]byte
	reads atomic.Int64
	repl  atomic.Int64 // ReplWrites served as head (Fwd not empty or single)
	fwds  atomic.Int64 // forwarded writes received
	plain atomic.Int64 // plain Writes
	syncs atomic.Int64
	truns atomic.Int64
	hung  atomic.Int64 // requests received in modeHang
}

func (s *fakeIOD) obj(h uint64, k uint32) []byte { return s.objs[[2]uint64{h, uint64(k)}] }

func (s *fakeIOD) Data(h uint64, k uint32) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.obj(h, k)...)
}

func (s *fakeIOD) write(h uint64, k uint32, off uint64, d []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.obj(h, k)
	if end := int(off) + len(d); end > len(o) {
		o = append(o, make([]byte, end-len(o))...)
	}
	copy(o[off:], d)
	s.objs[[2]uint64{h, uint64(k)}] = o
}

func (s *fakeIOD) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	mode := s.mode.Load()
	if _, ok := req.(*proto.Identify); ok {
		// A liveness probe: a stopped server answers it no more than
		// anything else, a running one at once; it is not counted as a
		// request and spends none of answerN.
		if mode == modeHang || mode == modeSlowThenHang && s.answerN.Load() <= 0 {
			select {
			case <-s.release:
			case <-ctx.Done():
			}
			return nil, proto.Errorf(syscall.EIO, "released")
		}
		return &proto.ServersReply{Servers: []proto.ServerInfo{{ID: s.id, State: proto.ServerUp}}}, nil
	}
	if mode == modeSlowThenHang {
		mode = modeHang
		if s.answerN.Add(-1) >= 0 {
			mode = modeOK
			time.Sleep(300 * time.Millisecond)
		}
	}
	switch mode {
	case modeFail:
		return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("server %d: injected failure", s.id))
	case modeHang:
		s.hung.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
		return nil, proto.Errorf(syscall.EIO, "released")
	}
	switch m := req.(type) {
	case *proto.Read:
		s.reads.Add(1)
		if s.mode.Load() == modeBadMsg {
			return nil, proto.Errorf(syscall.EBADMSG, fmt.Sprintf("server %d: checksum mismatch", s.id))
		}
		s.mu.Lock()
		o := s.obj(m.Handle, m.Index)
		out := []byte{}
		if int(m.Off) < len(o) {
			out = append(out, o[m.Off:min(len(o), int(m.Off)+int(m.Len))]...)
		}
		s.mu.Unlock()
		return &proto.DataReply{Data: out}, nil
	case *proto.Write:
		s.plain.Add(1)
		s.write(m.Handle, m.Index, m.Off, m.Data)
		return &proto.OK{}, nil
	case *proto.ReplWrite:
		if len(m.Fwd) == 0 {
			s.fwds.Add(1)
		} else {
			s.repl.Add(1)
		}
		s.write(m.Handle, m.Index, m.Off, m.Data)
		var mu sync.Mutex
		rr := &proto.ReplReply{}
		var wg sync.WaitGroup
		for _, p := range m.Fwd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fctx, cancel := context.WithTimeout(context.Background(), proto.ReplicaTimeout(len(m.Data)))
				defer cancel()
				_, err := s.pool.Call(fctx, p.Addr, &proto.ReplWrite{Handle: m.Handle, Index: m.Index, Off: m.Off, Data: m.Data})
				if err != nil {
					mu.Lock()
					rr.Failed = append(rr.Failed, p.ID)
					rr.Why = append(rr.Why, err.Error())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return rr, nil
	case *proto.Truncate:
		s.truns.Add(1)
		s.mu.Lock()
		o := s.obj(m.Handle, m.Index)
		if int(m.Size) <= len(o) {
			o = o[:m.Size]
		} else {
			o = append(o, make([]byte, int(m.Size)-len(o))...)
		}
		s.objs[[2]uint64{m.Handle, uint64(m.Index)}] = o
		s.mu.Unlock()
		return &proto.OK{}, nil
	case *proto.Sync:
		s.syncs.Add(1)
		return &proto.OK{}, nil
	case *proto.Punch, *proto.Alloc:
		return &proto.OK{}, nil
	}
	return nil, proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("fake iod: op %d", req.Op()))
}

// fakeMeta serves one replicated file.
type fakeMeta struct {
	mu      sync.Mutex
	attr    proto.Attr
	servers []proto.ServerInfo
	stale   []proto.StaleRec
	marks   []proto.MarkStale
	// next, if set, is the layout the file takes at the next MarkStale
	// (as if a server were lost meanwhile): that MarkStale gets ESTALE.
	next *proto.Attr
	// The watch, as meta's (docs/meta.md): change index (bumped by every
	// MarkStale), each watcher's acknowledged index; a MarkStale is
	// answered once every watcher acknowledged it.
	index    uint64
	watchers map[uint64]uint64
	getStale atomic.Int64
	// eio, if > 0, is how many MarkStales are refused with EIO "no current
	// copy" (another writer marked the other copies stale meanwhile).
	eio int
}

// watch answers a Watch: the file changed (or Reset for a new watcher),
// else a heartbeat after 100 ms.
func (m *fakeMeta) watch(w *proto.Watch) proto.Msg {
	for i := 0; i < 10; i++ {
		m.mu.Lock()
		if m.watchers == nil {
			m.watchers = map[uint64]uint64{}
		}
		if w.Epoch != 1 {
			m.watchers[w.Client] = 0
			r := &proto.ChangesReply{Index: m.index, Epoch: 1, Reset: true}
			m.mu.Unlock()
			return r
		}
		m.watchers[w.Client] = w.Since
		if w.Since < m.index {
			r := &proto.ChangesReply{Index: m.index, Epoch: 1, Inos: []uint64{m.attr.Ino}}
			m.mu.Unlock()
			return r
		}
		m.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return &proto.ChangesReply{Index: m.index, Epoch: 1}
}

// awaitWatchers returns once every watcher acknowledged index (3 s at
// most: a test's watcher that went away).
func (m *fakeMeta) awaitWatchers(index uint64) {
	for i := 0; i < 300; i++ {
		m.mu.Lock()
		slow := 0
		for _, acked := range m.watchers {
			if acked < index {
				slow++
			}
		}
		m.mu.Unlock()
		if slow == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (m *fakeMeta) Marks() []proto.MarkStale {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.marks)
}

func (m *fakeMeta) column(k int) []uint32 {
	r := int(m.attr.Replicas)
	return append([]uint32{m.attr.Servers[k]}, m.attr.Extra[k*(r-1):(k+1)*(r-1)]...)
}

func (m *fakeMeta) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if id, ok := req.(*proto.Idem); ok {
		req = id.Req
	}
	switch r := req.(type) {
	case *proto.Watch:
		return m.watch(r), nil
	case *proto.Unwatch:
		m.mu.Lock()
		delete(m.watchers, r.Client)
		m.mu.Unlock()
		return &proto.OK{}, nil
	case *proto.MarkStale:
		rep, err := m.handle(req)
		m.mu.Lock()
		idx := m.index
		m.mu.Unlock()
		m.awaitWatchers(idx)
		return rep, err
	case *proto.GetStale:
		m.getStale.Add(1)
	}
	return m.handle(req)
}

func (m *fakeMeta) handle(req proto.Msg) (proto.Msg, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r := req.(type) {
	case *proto.Servers:
		return &proto.ServersReply{Servers: m.servers}, nil
	case *proto.GetAttr:
		a := m.attr
		a.Stale = uint32(len(m.stale))
		return &proto.AttrReply{Attr: a}, nil
	case *proto.SetAttr:
		if r.Mask&(proto.SetSize|proto.SetSizeExtend) != 0 {
			if r.Mask&proto.SetSize != 0 || r.Size > m.attr.Size {
				m.attr.Size = r.Size
			}
		}
		m.attr.Ctime++
		return &proto.AttrReply{Attr: m.attr}, nil
	case *proto.MarkStale:
		if m.next != nil {
			m.attr, m.next = *m.next, nil
			return nil, proto.Errorf(syscall.ESTALE, "layout changed")
		}
		if m.eio > 0 {
			m.eio--
			return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("mark stale: servers %v would leave no current copy", r.Servers))
		}
		if !slices.Equal(r.Column, m.column(int(r.Index))) {
			return nil, proto.Errorf(syscall.ESTALE, fmt.Sprintf("column %d is %v, not %v", r.Index, m.column(int(r.Index)), r.Column))
		}
		m.marks = append(m.marks, *r)
		m.index++
		for _, id := range r.Servers {
			m.stale = append(m.stale, proto.StaleRec{Index: r.Index, Server: id, Off: r.Off, Len: r.Len})
		}
		return &proto.OK{}, nil
	case *proto.GetStale:
		return &proto.StaleReply{Recs: slices.Clone(m.stale)}, nil
	}
	return nil, proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("fake meta: op %d", req.Op()))
}

type replEnv struct {
	meta *fakeMeta
	iods []*fakeIOD
	cl   *client.Client
	sec  proto.Security
}

func serve(t *testing.T, h proto.Handler, sec proto.Security) (*proto.Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &proto.Server{Handler: h, Security: sec, Log: slog.New(slog.DiscardHandler)}
	go s.Serve(l)
	t.Cleanup(s.Close)
	return s, l.Addr().String()
}

// startRepl starts n fake I/O servers and a fake meta serving inode 7 with
// stripe 4 KiB over cols columns, r copies: column k on servers k, k+1, ...
// (mod n), IDs from 1.
func startRepl(t *testing.T, n, cols, r int) *replEnv {
	t.Helper()
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	e := &replEnv{meta: &fakeMeta{}, sec: proto.Security{Cred: cred}}
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		s := &fakeIOD{id: uint32(i + 1), objs: map[[2]uint64][]byte{}, release: release, pool: &proto.Pool{Security: e.sec}}
		s.srv, s.addr = serve(t, s, e.sec)
		t.Cleanup(s.pool.Close)
		e.iods = append(e.iods, s)
		e.meta.servers = append(e.meta.servers, proto.ServerInfo{ID: s.id, Addr: s.addr})
	}
	t.Cleanup(func() { close(release) }) // runs before the servers close
	a := proto.Attr{Ino: 7, Mode: 0o100644, StripeSize: 4096, Replicas: uint32(r)}
	for k := 0; k < cols; k++ {
		a.Servers = append(a.Servers, uint32(k%n+1))
	}
	for k := 0; k < cols; k++ {
		for c := 1; c < r; c++ {
			a.Extra = append(a.Extra, uint32((k+c)%n+1))
		}
	}
	e.meta.attr = a
	_, maddr := serve(t, e.meta, e.sec)
	e.cl = client.New(maddr, client.WithSecurity(e.sec))
	t.Cleanup(e.cl.Close)
	return e
}

func (e *replEnv) open(t *testing.T) *client.File {
	t.Helper()
	e.meta.mu.Lock()
	a := e.meta.attr
	a.Stale = uint32(len(e.meta.stale))
	e.meta.mu.Unlock()
	f, err := e.cl.OpenAttr(ctxT(t), a)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (e *replEnv) iod(id uint32) *fakeIOD { return e.iods[id-1] }

// TestReplicaLayoutAndAddrs: a replicated file's copies are resolved
// column by column, first copy first, to the servers' addresses.
func TestReplicaLayoutAndAddrs(t *testing.T) {
	e := startRepl(t, 4, 3, 3)
	f := e.open(t)
	defer f.Close()
	want := [][]uint32{{1, 2, 3}, {2, 3, 4}, {3, 4, 1}}
	if got := f.Replicas(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("copies %v, want %v", got, want)
	}
	if l := f.Layout(); l.Copies() != 3 || len(l.Extra) != 6 {
		t.Fatalf("layout %+v: want 3 copies and 6 extra servers", l)
	}
	for k, a := range f.Addrs() {
		if a != e.iod(want[k][0]).addr {
			t.Fatalf("column %d: address %s, want server %d's %s", k, a, want[k][0], e.iod(want[k][0]).addr)
		}
	}
}

// TestReplicaWriteReachesEveryCopy: writes go to the head as ReplWrite and
// land on every copy; nothing is marked stale when all took it; sync and
// truncate reach every copy.
func TestReplicaWriteReachesEveryCopy(t *testing.T) {
	e := startRepl(t, 3, 3, 2)
	f := e.open(t)
	data := randBytes(rand.New(rand.NewPCG(1, 2)), 50000)
	mustWrite(t, f, data, 0)
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for k, col := range f.Replicas() {
		want := e.iod(col[0]).Data(7, uint32(k))
		if len(want) == 0 {
			t.Fatalf("column %d: head %d has no data", k, col[0])
		}
		for _, id := range col[1:] {
			if got := e.iod(id).Data(7, uint32(k)); !bytes.Equal(got, want) {
				t.Fatalf("column %d: copy on %d differs from the head's", k, id)
			}
		}
	}
	for _, s := range e.iods {
		if s.plain.Load() != 0 {
			t.Fatalf("server %d got %d plain writes: a replicated file writes through ReplWrite", s.id, s.plain.Load())
		}
		if s.syncs.Load() == 0 {
			t.Fatalf("server %d got no sync", s.id)
		}
	}
	if m := e.meta.Marks(); len(m) != 0 {
		t.Fatalf("marked stale with every copy up: %+v", m)
	}
	if err := f.Truncate(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.iods {
		if s.truns.Load() != 2 {
			t.Fatalf("server %d got %d truncates, want 2 (one per column it holds)", s.id, s.truns.Load())
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaHeadFailover: with the head of column 0 failing, the write goes
// to the next copy as head, the failed head is marked stale over the
// write's range before the write is acknowledged, and reads come from the
// current copy only.
func TestReplicaHeadFailover(t *testing.T) {
	for _, mode := range []int32{modeFail, modeHang} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			e := startRepl(t, 3, 1, 3)
			f := e.open(t)
			e.iod(1).mode.Store(mode)
			data := bytes.Repeat([]byte("x"), 3000)
			start := time.Now()
			mustWrite(t, f, data, 100)
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
			if mode == modeHang && time.Since(start) > 5*time.Second {
				t.Fatalf("write over a stopped head took %v: more than 5 s", time.Since(start))
			}
			m := e.meta.Marks()
			if len(m) != 1 || !slices.Equal(m[0].Servers, []uint32{1}) || m[0].Off != 100 || m[0].Len != 3000 || !slices.Equal(m[0].Column, []uint32{1, 2, 3}) {
				t.Fatalf("marks %+v: want server 1 stale over [100, 3100) of column [1 2 3]", m)
			}
			if e.iod(2).repl.Load() != 1 {
				t.Fatalf("server 2 headed %d writes, want 1", e.iod(2).repl.Load())
			}
			if !bytes.Equal(e.iod(3).Data(7, 0)[100:], data) {
				t.Fatal("server 3 did not get the forward from the new head")
			}
			if mode == modeHang && !e.cl.Down(1) {
				t.Fatal("a head that timed out is not remembered as down")
			}
			// Reads: never from the stale copy, even when it answers again.
			e.iod(1).mode.Store(modeOK)
			got := make([]byte, 3000)
			for i := 0; i < 20; i++ {
				if _, err := f.ReadAt(got, 100); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data) {
					t.Fatal("read other bytes than written")
				}
			}
			if n := e.iod(1).reads.Load(); n != 0 {
				t.Fatalf("the stale copy served %d reads", n)
			}
		})
	}
}

// TestReplicaForwardFailure: a copy the head could not forward to is marked
// stale; the write succeeds; later writes skip it (remembered down) and
// still mark it stale.
func TestReplicaForwardFailure(t *testing.T) {
	e := startRepl(t, 3, 1, 3)
	f := e.open(t)
	defer f.Close()
	e.iod(3).srv.Close() // a killed server: refused connections
	mustWrite(t, f, []byte("hello"), 0)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := e.meta.Marks(); len(m) != 1 || !slices.Equal(m[0].Servers, []uint32{3}) {
		t.Fatalf("marks %+v: want server 3 stale", m)
	}
	if !e.cl.Down(3) {
		t.Fatal("a copy the head could not reach is not remembered as down")
	}
	mustWrite(t, f, []byte("world"), 4096)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	m := e.meta.Marks()
	if len(m) != 2 || !slices.Equal(m[1].Servers, []uint32{3}) || m[1].Off != 4096 {
		t.Fatalf("marks %+v: the second write must mark server 3 stale too", m)
	}
}

// TestReplicaDownHeadSkipped: once a head failed, the next writes go to the
// next copy at once (no wait for the dead one), still marking it stale.
func TestReplicaDownHeadSkipped(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	e.iod(1).mode.Store(modeHang)
	mustWrite(t, f, []byte("a"), 0)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		mustWrite(t, f, []byte("b"), i*4096)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.iod(1).hung.Load(); n != 1 {
		t.Fatalf("the stopped head got %d requests, want 1 (the first write): later writes tried it again", n)
	}
	if m := e.meta.Marks(); len(m) != 6 {
		t.Fatalf("%d marks, want 6 (every write marks the dead head stale)", len(m))
	}
	// Close syncs every copy but does not wait for the stopped one: it is
	// marked stale over what was written since the last sync.
	start := time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("close took %v with one copy stopped", d)
	}
	m := e.meta.Marks()
	if last := m[len(m)-1]; len(m) != 7 || !slices.Equal(last.Servers, []uint32{1}) || last.Off != 0 || last.Len != 5*4096+1 {
		t.Fatalf("marks %+v: want the sync to mark server 1 stale over [0, %d)", m, 5*4096+1)
	}
}

// TestReplicaAllCopiesFail: a write no copy takes is the write error.
func TestReplicaAllCopiesFail(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	e.iod(1).mode.Store(modeFail)
	e.iod(2).mode.Store(modeFail)
	mustWrite(t, f, []byte("a"), 0)
	err := f.Flush()
	if err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush: %v, want EIO from both copies", err)
	}
	if m := e.meta.Marks(); len(m) != 0 {
		t.Fatalf("marks %+v with no copy written", m)
	}
	f.Close()
}

// TestReplicaEstaleResends: MarkStale answered ESTALE (the layout changed
// meanwhile) makes the client re-read the layout and write again to the
// new column.
func TestReplicaEstaleResends(t *testing.T) {
	e := startRepl(t, 4, 1, 2)
	f := e.open(t)
	defer f.Close()
	next := e.meta.attr
	next.Extra = []uint32{4} // server 2's copy moved to server 4
	next.Extra = slices.Clone(next.Extra)
	e.meta.next = &next
	e.iod(2).mode.Store(modeFail)
	mustWrite(t, f, []byte("moved"), 10)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := e.iod(4).Data(7, 0); !bytes.Equal(got[10:], []byte("moved")) {
		t.Fatalf("server 4 (the new copy) has %q", got)
	}
	if got := f.Replicas(); !slices.Equal(got[0], []uint32{1, 4}) {
		t.Fatalf("copies after the change: %v, want [1 4]", got)
	}
}

// TestReplicaReadSpread: reads use every current copy, not always the
// first: one reader at a time takes copies at random (equal load), and
// concurrent readers still reach them all.
func TestReplicaReadSpread(t *testing.T) {
	e := startRepl(t, 3, 1, 3)
	f := e.open(t)
	defer f.Close()
	f.SetReadAhead(-1)
	mustWrite(t, f, bytes.Repeat([]byte("r"), 4096), 0)
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	for i := 0; i < 120; i++ {
		if _, err := f.ReadAt(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() []int64 {
		var c []int64
		for _, s := range e.iods {
			c = append(c, s.reads.Load())
		}
		return c
	}
	// Binomial(120, 1/3): below 10 has odds under 1e-7.
	c1 := counts()
	if slices.Min(c1) < 10 {
		t.Fatalf("reads per server %v of 120 one at a time: not spread", c1)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for i := 0; i < 30; i++ {
				if _, err := f.ReadAt(p, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, n := range counts() {
		if n == c1[i] {
			t.Fatalf("server %d got none of 120 reads from 4 concurrent readers (%v, then %v)", i+1, c1, counts())
		}
	}
}

// TestReplicaReadFailover: a read moves to another copy on error, timeout
// or EBADMSG; EBADMSG also marks that range of that copy stale. The reader
// sees an error only when no copy answers.
func TestReplicaReadFailover(t *testing.T) {
	e := startRepl(t, 3, 1, 3)
	f := e.open(t)
	defer f.Close()
	f.SetReadAhead(-1)
	data := bytes.Repeat([]byte("q"), 8192)
	mustWrite(t, f, data, 0)
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.iod(1).mode.Store(modeBadMsg)
	e.iod(2).mode.Store(modeFail)
	p := make([]byte, 8192)
	for i := 0; i < 5; i++ {
		if _, err := f.ReadAt(p, 0); err != nil || !bytes.Equal(p, data) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	var bad bool
	for _, m := range e.meta.Marks() {
		if slices.Equal(m.Servers, []uint32{1}) && m.Len > 0 {
			bad = true
		}
	}
	if !bad {
		t.Fatalf("EBADMSG from server 1 did not mark it stale: %+v", e.meta.Marks())
	}
	e.iod(3).mode.Store(modeFail)
	if _, err := f.ReadAt(p, 0); err == nil {
		t.Fatal("read succeeded with no copy answering")
	}
}

// TestOneCopyPathUnchanged: a file with one copy (Replicas 1, or 0 from an
// older meta) writes with plain Writes to its one server per column and
// never asks meta about stale copies.
func TestOneCopyPathUnchanged(t *testing.T) {
	for _, r := range []int{0, 1} {
		e := startRepl(t, 2, 2, 1)
		e.meta.attr.Replicas = uint32(r)
		f := e.open(t)
		if f.Replicas() != nil {
			t.Fatalf("replicas %d: copies %v, want none", r, f.Replicas())
		}
		mustWrite(t, f, bytes.Repeat([]byte("1"), 8192), 0)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for _, s := range e.iods {
			if s.plain.Load() != 1 || s.repl.Load()+s.fwds.Load() != 0 {
				t.Fatalf("replicas %d: server %d got %d plain and %d replicated writes, want 1 and 0", r, s.id, s.plain.Load(), s.repl.Load()+s.fwds.Load())
			}
		}
	}
}

// TestReplicaTruncateFailure: a copy that fails a truncate is marked stale
// from the new object size to its end (Len 0); the truncate succeeds.
func TestReplicaTruncateFailure(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	f := e.open(t)
	defer f.Close()
	mustWrite(t, f, bytes.Repeat([]byte("t"), 9000), 0)
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.iod(2).mode.Store(modeFail)
	if err := f.Truncate(ctxT(t), 5000); err != nil {
		t.Fatal(err)
	}
	m := e.meta.Marks()
	if len(m) != 1 || !slices.Equal(m[0].Servers, []uint32{2}) || m[0].Off != 5000 || m[0].Len != 0 {
		t.Fatalf("marks %+v: want server 2 stale from 5000 to the end", m)
	}
	e.iod(1).mode.Store(modeFail)
	if err := f.Truncate(ctxT(t), 10); err == nil {
		t.Fatal("truncate succeeded with no copy taking it")
	}
}

// TestReplicaReadAheadFailover: a sequential reader (read-ahead on) of a
// file whose first copies' server was killed reads every byte from the
// other copies, without an error.
func TestReplicaReadAheadFailover(t *testing.T) {
	e := startRepl(t, 3, 3, 2)
	f := e.open(t)
	defer f.Close()
	data := randBytes(rand.New(rand.NewPCG(3, 4)), 200000)
	mustWrite(t, f, data, 0)
	if err := f.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.iod(1).srv.Close()
	got := make([]byte, len(data))
	for off := 0; off < len(got); off += 10000 {
		if _, err := f.ReadAt(got[off:min(off+10000, len(got))], int64(off)); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read other bytes than written")
	}
}

// estaleIOD answers ReplWrite with ESTALE (as a head that knows the
// layout moved on) until the test lets it through.
type estaleIOD struct {
	*fakeIOD
	refuse atomic.Int32
}

func (s *estaleIOD) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if _, ok := req.(*proto.ReplWrite); ok && s.refuse.Add(-1) >= 0 {
		return nil, proto.Errorf(syscall.ESTALE, "layout moved")
	}
	return s.fakeIOD.Handle(ctx, req)
}

// TestReplicaHeadEstale: a head answering ESTALE makes the client re-read
// the layout and send the write again, not mark the head stale.
func TestReplicaHeadEstale(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	h := &estaleIOD{fakeIOD: e.iod(1)}
	h.refuse.Store(1)
	h.srv.Close()
	srv, addr := serve(t, h, e.sec)
	h.srv, h.addr = srv, addr
	e.meta.servers[0].Addr = addr
	f := e.open(t)
	defer f.Close()
	mustWrite(t, f, []byte("again"), 0)
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := e.meta.Marks(); len(m) != 0 {
		t.Fatalf("marks %+v: ESTALE is no failure of the head", m)
	}
	for _, s := range e.iods {
		if got := s.Data(7, 0); !bytes.Equal(got, []byte("again")) {
			t.Fatalf("server %d has %q", s.id, got)
		}
	}
}

// TestReplicaCurrentCopiesMatch: random overlapping writes to a file with
// three copies while servers fail, hang and come back. Afterwards every
// byte of every copy that meta does not call stale equals what was
// written last (no copy applied overlapping writes in another order, no
// missed write went unrecorded), and the file reads back whole.
func TestReplicaCurrentCopiesMatch(t *testing.T) {
	e := startRepl(t, 4, 3, 3)
	f := e.open(t)
	r := rand.New(rand.NewPCG(5, 6))
	const size = 96 << 10
	model := make([]byte, size)
	for op := 0; op < 400; op++ {
		switch op {
		case 100:
			e.iod(2).mode.Store(modeFail)
		case 200:
			e.iod(3).mode.Store(modeHang)
		case 300:
			e.iod(2).mode.Store(modeOK)
		}
		off := r.IntN(size - 1)
		n := 1 + r.IntN(min(size-off, 20000))
		data := randBytes(r, n)
		mustWrite(t, f, data, off)
		copy(model[off:], data)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e.iod(3).mode.Store(modeOK)
	lay := f.Layout()
	e.meta.mu.Lock()
	stale := slices.Clone(e.meta.stale)
	e.meta.mu.Unlock()
	if len(stale) == 0 {
		t.Fatal("no stale records although servers failed")
	}
	checked := 0
	for k, col := range f.Replicas() {
		want := make([]byte, lay.ObjectSize(k, size))
		for u := int64(0); u*int64(lay.StripeSize) < int64(len(want)); u++ {
			fo := (u*int64(len(lay.Servers)) + int64(k)) * int64(lay.StripeSize)
			copy(want[u*int64(lay.StripeSize):], model[fo:min(int64(size), fo+int64(lay.StripeSize))])
		}
		for _, id := range col {
			got := e.iod(id).Data(7, uint32(k))
			for b := 0; b < len(want); b++ {
				isStale := false
				for _, s := range stale {
					if int(s.Index) == k && s.Server == id && uint64(b) >= s.Off && (s.Len == 0 || uint64(b) < s.Off+s.Len) {
						isStale = true
						break
					}
				}
				if isStale {
					continue
				}
				checked++
				g := byte(0) // past the object's end: a hole
				if b < len(got) {
					g = got[b]
				}
				if g != want[b] {
					var mine []proto.StaleRec
					for _, s := range stale {
						if int(s.Index) == k && s.Server == id {
							mine = append(mine, s)
						}
					}
					t.Fatalf("column %d copy on server %d (%d bytes): byte %d is current by meta but differs from the last write (its stale records %+v)", k, id, len(got), b, mine)
				}
			}
		}
	}
	if checked < size {
		t.Fatalf("only %d bytes of copies were current: the check proves little", checked)
	}
	g := e.open(t)
	defer g.Close()
	got := make([]byte, g.Size())
	if _, err := g.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model[:len(got)]) || slices.ContainsFunc(model[len(got):], func(b byte) bool { return b != 0 }) {
		t.Fatal(firstDiff(got, model))
	}
}
