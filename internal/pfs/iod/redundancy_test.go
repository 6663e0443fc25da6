package iod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// iodServer is one in-process I/O server of a test cluster.
type iodServer struct {
	addr string
	id   uint32
}

func (s iodServer) peer() proto.Peer { return proto.Peer{ID: s.id, Addr: s.addr} }

// startIods starts n I/O servers (iod.Run over loopback) registered with
// a fresh metadata server, and a pool to call them with.
func startIods(t *testing.T, n int) ([]iodServer, *proto.Pool) {
	t.Helper()
	metaAddr := startMeta(t, t.TempDir())
	var out []iodServer
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		type up struct {
			addr string
			id   uint32
		}
		upc := make(chan up, 1)
		done := make(chan error, 1)
		cfg := Config{Data: t.TempDir(), Meta: metaAddr, Log: quiet, Security: testSec, SweepGrace: -1, Zone: "z"}
		go func() {
			done <- Run(ctx, "127.0.0.1:0", cfg, func(a string, id uint32) { upc <- up{a, id} })
		}()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case u := <-upc:
			out = append(out, iodServer{u.addr, u.id})
		case err := <-done:
			t.Fatalf("iod did not start: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("iod did not start within 30 s")
		}
	}
	pool := &proto.Pool{Security: testSec}
	t.Cleanup(pool.Close)
	return out, pool
}

func call(t *testing.T, pool *proto.Pool, addr string, req proto.Msg) proto.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := pool.Call(ctx, addr, req)
	if err != nil {
		t.Fatalf("%T to %s: %v", req, addr, err)
	}
	return r
}

// readAll reads object (h, idx) of the server at addr, up to 16 MiB.
func readAll(t *testing.T, pool *proto.Pool, addr string, h uint64, idx uint32) []byte {
	t.Helper()
	var out []byte
	for len(out) < 16<<20 {
		d := call(t, pool, addr, &proto.Read{Handle: h, Index: idx, Off: uint64(len(out)), Len: 1 << 20}).(*proto.DataReply)
		out = append(out, d.Data...)
		if len(d.Data) < 1<<20 {
			break
		}
	}
	return out
}

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// A ReplWrite to the head lands on the head and on every copy it names.
func TestReplWriteReachesAllCopies(t *testing.T) {
	srv, pool := startIods(t, 3)
	data := pattern(7, 300<<10)
	r := call(t, pool, srv[0].addr, &proto.ReplWrite{Handle: 40, Index: 2, Off: 1000, Fwd: []proto.Peer{srv[1].peer(), srv[2].peer()}, Data: data})
	if rep := r.(*proto.ReplReply); len(rep.Failed) != 0 {
		t.Fatalf("failed copies %v: %v", rep.Failed, rep.Why)
	}
	want := append(make([]byte, 1000), data...)
	for _, s := range srv {
		if got := readAll(t, pool, s.addr, 40, 2); !bytes.Equal(got, want) {
			t.Fatalf("server %d holds %d bytes, not the write", s.id, len(got))
		}
	}
}

// Overlapping ReplWrites sent at once through one head leave every copy
// identical: the head applies and forwards them in one order.
func TestReplWriteConcurrentOverlapsKeepCopiesEqual(t *testing.T) {
	srv, pool := startIods(t, 3)
	fwd := []proto.Peer{srv[1].peer(), srv[2].peer()}
	const writers, rounds = 4, 40
	for round := range rounds {
		h := uint64(100 + round)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Different sizes and offsets, all overlapping [64K, 128K).
				off := uint64(w) * 16 << 10
				data := pattern(byte(w*50+round), 128<<10+w*8<<10)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				r, err := pool.Call(ctx, srv[0].addr, &proto.ReplWrite{Handle: h, Off: off, Fwd: fwd, Data: data})
				if err == nil && len(r.(*proto.ReplReply).Failed) > 0 {
					err = fmt.Errorf("failed copies %v", r.(*proto.ReplReply).Why)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		head := readAll(t, pool, srv[0].addr, h, 0)
		for _, s := range srv[1:] {
			if got := readAll(t, pool, s.addr, h, 0); !bytes.Equal(got, head) {
				t.Fatalf("round %d: server %d differs from the head", round, s.id)
			}
		}
	}
}

// silentPeer accepts connections and never answers (not even the
// handshake): a copy that hangs.
func silentPeer(t *testing.T) string {
	addr, _ := countingSilentPeer(t)
	return addr
}

// countingSilentPeer is silentPeer that also says how many connections it
// accepted.
func countingSilentPeer(t *testing.T) (string, func() int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// A copy that does not answer is reported failed, after the forward's
// timeout, and the others still take the write.
func TestReplWriteDeadCopyReported(t *testing.T) {
	srv, pool := startIods(t, 2)
	dead := proto.Peer{ID: 99, Addr: silentPeer(t)}
	data := []byte("written while a copy hangs")
	r := call(t, pool, srv[0].addr, &proto.ReplWrite{Handle: 41, Fwd: []proto.Peer{dead, srv[1].peer()}, Data: data})
	rep := r.(*proto.ReplReply)
	if len(rep.Failed) != 1 || rep.Failed[0] != 99 || len(rep.Why) != 1 || rep.Why[0] == "" {
		t.Fatalf("reply %+v, want server 99 failed with a reason", rep)
	}
	for _, s := range srv {
		if got := readAll(t, pool, s.addr, 41, 0); !bytes.Equal(got, data) {
			t.Fatalf("server %d holds %q", s.id, got)
		}
	}
}

// Heal copies exactly the ranges asked (Len 0: to the source's end), from
// the first source that answers.
func TestHealCopiesRanges(t *testing.T) {
	srv, pool := startIods(t, 2)
	const size = 3<<20 + 12345
	good, stale := pattern(1, size), pattern(100, size)
	call(t, pool, srv[0].addr, &proto.Write{Handle: 42, Index: 1, Data: good})
	call(t, pool, srv[1].addr, &proto.Write{Handle: 42, Index: 1, Data: stale})
	gone := proto.Peer{ID: 98, Addr: "127.0.0.1:1"} // nothing listens there
	r := call(t, pool, srv[1].addr, &proto.Heal{Handle: 42, Index: 1,
		Ranges: []proto.Extent{{Off: 100, Len: 1000}, {Off: 2 << 20, Len: 0}}, From: []proto.Peer{gone, srv[0].peer()}})
	want := bytes.Clone(stale)
	copy(want[100:1100], good[100:1100])
	copy(want[2<<20:], good[2<<20:])
	if got := r.(*proto.HealReply).Copied; got != 1000+size-2<<20 {
		t.Fatalf("copied %d bytes, want %d", got, 1000+size-2<<20)
	}
	if got := readAll(t, pool, srv[1].addr, 42, 1); !bytes.Equal(got, want) {
		t.Fatal("healed copy differs from the asked mix of source and old bytes")
	}
}

// Whole cuts the copy to the source's size, or extends it.
func TestHealWholeSetsSize(t *testing.T) {
	srv, pool := startIods(t, 2)
	for i, sizes := range [][2]int{{500, 2000}, {3000, 10}} {
		h := uint64(50 + i)
		good := pattern(3, sizes[0])
		call(t, pool, srv[0].addr, &proto.Write{Handle: h, Data: good})
		call(t, pool, srv[1].addr, &proto.Write{Handle: h, Data: pattern(9, sizes[1])})
		call(t, pool, srv[1].addr, &proto.Heal{Handle: h, Whole: true, Ranges: []proto.Extent{{}}, From: []proto.Peer{srv[0].peer()}})
		if got := readAll(t, pool, srv[1].addr, h, 0); !bytes.Equal(got, good) {
			t.Fatalf("source %d bytes, stale copy %d: healed copy has %d bytes, want the source's", sizes[0], sizes[1], len(got))
		}
	}
}

// slowSource is a copy whose reads wait for release: a heal in progress.
type slowSource struct {
	data    []byte
	reading chan struct{} // a read arrived
	release chan struct{}
	once    sync.Once
}

func (s *slowSource) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	switch m := req.(type) {
	case *proto.ObjStat:
		return &proto.SizeReply{Size: uint64(len(s.data))}, nil
	case *proto.Read:
		s.once.Do(func() { close(s.reading) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		end := min(m.Off+uint64(m.Len), uint64(len(s.data)))
		return &proto.DataReply{Data: s.data[min(m.Off, end):end]}, nil
	}
	return nil, fmt.Errorf("slow source: %T not served", req)
}

// healing starts a heal of [0, 8192) of object (60, 0) on a fresh store
// from a source whose read waits for release, and returns once the heal
// holds its piece; healed reports the heal's end.
func healing(t *testing.T) (st *Store, src *slowSource, healed chan error) {
	src = &slowSource{data: pattern(1, 8192), reading: make(chan struct{}), release: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &proto.Server{Handler: src, Log: quiet, Security: testSec}
	go ps.Serve(l)
	t.Cleanup(ps.Close)
	st = openStore(t, t.TempDir())
	st.registered.Store(true)
	st.r.peers = &proto.Pool{Security: testSec}
	t.Cleanup(st.r.peers.Close)
	healed = make(chan error, 1)
	go func() {
		_, err := st.Handle(context.Background(), &proto.Heal{Handle: 60, Ranges: []proto.Extent{{Off: 0, Len: 8192}},
			From: []proto.Peer{{ID: 5, Addr: l.Addr().String()}}})
		healed <- err
	}()
	select {
	case <-src.reading:
	case err := <-healed:
		t.Fatalf("heal ended before reading: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("heal did not read its source within 30 s")
	}
	return st, src, healed
}

// racingHeal sends req to st while the heal holds its range, lets the heal
// go once req waits behind it (or, without the lock, has been applied),
// and checks both succeed.
func racingHeal(t *testing.T, st *Store, src *slowSource, healed chan error, req proto.Msg) {
	done := make(chan error, 1)
	go func() {
		_, err := st.Handle(context.Background(), req)
		done <- err
	}()
	for i := 0; i < 3000; i++ {
		st.r.locks.mu.Lock()
		waiting := len(st.r.locks.objs[objKey{60, 0}])
		st.r.locks.mu.Unlock()
		if waiting >= 2 || len(done) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(src.release)
	if err := <-healed; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A write to a range being healed waits for the heal: the heal's older
// bytes never overwrite it.
func TestHealDoesNotOverwriteConcurrentWrite(t *testing.T) {
	st, src, healed := healing(t)
	newer := bytes.Repeat([]byte("N"), 100)
	racingHeal(t, st, src, healed, &proto.ReplWrite{Handle: 60, Off: 4000, Data: newer})
	want := bytes.Clone(src.data)
	copy(want[4000:], newer)
	p := make([]byte, 9000)
	n, err := st.readObj(objKey{60, 0}, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p[:n], want) {
		t.Fatalf("after heal and write: bytes 4000-4100 are %q", p[4000:4100])
	}
}

// A truncate during a heal waits for it too: the heal does not grow the
// object back.
func TestHealDoesNotUndoConcurrentTruncate(t *testing.T) {
	st, src, healed := healing(t)
	racingHeal(t, st, src, healed, &proto.Truncate{Handle: 60, Size: 100})
	if size, _, err := st.objSize(objKey{60, 0}); err != nil || size != 100 {
		t.Fatalf("after heal and truncate to 100: size %d (%v)", size, err)
	}
}

// Overlapping ranges wait in arrival order; disjoint ones do not wait.
func TestRangeLocksOrder(t *testing.T) {
	var l rangeLocks
	ctx := context.Background()
	k := objKey{1, 0}
	u1, _ := l.lock(ctx, k, 0, 100)
	u2, err := l.lock(ctx, k, 100, 200) // disjoint: no wait
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 2)
	go func() { u, _ := l.lock(ctx, k, 50, 60); order <- 3; u() }()
	for i := 0; i < 1000; i++ { // until the first waiter is queued
		l.mu.Lock()
		n := len(l.objs[k])
		l.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	go func() { u, _ := l.lock(ctx, k, 0, toEnd); order <- 4; u() }()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	if _, err := l.lock(cctx, k, 150, 151); err == nil {
		t.Fatal("a lock over a held range did not wait")
	}
	cancel()
	u2()
	u1()
	if a, b := <-order, <-order; a != 3 || b != 4 {
		t.Fatalf("order %d, %d: want arrival order 3, 4", a, b)
	}
	for i := 0; ; i++ { // the last holder lets go just after it reports
		l.mu.Lock()
		n := len(l.objs)
		l.mu.Unlock()
		if n == 0 {
			break
		}
		if i == 1000 {
			t.Fatalf("holds left on %d objects", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The load is KiB/s of the bytes read and written since the last heartbeat.
func TestLoadMeter(t *testing.T) {
	var m loadMeter
	now := time.Unix(1000, 0)
	m.kibps(now)
	m.note(&proto.Write{Data: make([]byte, 512<<10)})
	m.note(&proto.ReplWrite{Data: make([]byte, 256<<10)})
	m.note(&proto.Read{Len: 256 << 10})
	m.note(&proto.ObjStat{})
	if got := m.kibps(now.Add(time.Second)); got != 512 { // (0 + 1024) / 2
		t.Fatalf("load %d KiB/s, want 512", got)
	}
	if got := m.kibps(now.Add(2 * time.Second)); got != 256 {
		t.Fatalf("idle second: load %d KiB/s, want 256", got)
	}
}

// recordingMeta answers Register like a metadata server and keeps what it
// was sent.
type recordingMeta struct {
	mu  sync.Mutex
	got []proto.Register
}

func (m *recordingMeta) Handle(_ context.Context, req proto.Msg) (proto.Msg, error) {
	r, ok := req.(*proto.Register)
	if !ok {
		return nil, fmt.Errorf("recording meta: %T not served", req)
	}
	m.mu.Lock()
	m.got = append(m.got, *r)
	m.mu.Unlock()
	return &proto.ServersReply{Servers: []proto.ServerInfo{{ID: 3, Addr: r.Addr}}, Cluster: "test-cluster"}, nil
}

// Every heartbeat carries the server's zone and its load.
func TestHeartbeatCarriesZoneAndLoad(t *testing.T) {
	rm := &recordingMeta{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &proto.Server{Handler: rm, Log: quiet, Security: testSec}
	go ps.Serve(l)
	t.Cleanup(ps.Close)
	pool := &proto.Pool{Security: testSec}
	t.Cleanup(pool.Close)
	lead := client.NewLeader(pool, l.Addr().String(), 0)

	st := openStore(t, t.TempDir())
	st.r.zone = "rack-7"
	ctx := context.Background()
	if _, err := st.register(ctx, lead, "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	for range 4 { // 4 MiB written, in any interval shorter than 4000 s
		if _, err := st.Handle(ctx, &proto.Write{Handle: 70, Data: make([]byte, 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.register(ctx, lead, "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if len(rm.got) != 2 {
		t.Fatalf("%d registrations, want 2", len(rm.got))
	}
	for i, r := range rm.got {
		if r.Zone != "rack-7" {
			t.Errorf("registration %d: zone %q, want rack-7", i, r.Zone)
		}
	}
	if rm.got[1].Load == 0 {
		t.Errorf("heartbeat after 4 MiB of writes reports load 0")
	}
}

// A head that cannot apply a write answers an error and forwards nothing;
// a write whose sender left while it waited for the lock is not applied.
func TestReplWriteLocalFailureAndAbandonedWait(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.ident = identity{cluster: "c", id: 1, base: 10}
	st.registered.Store(true)
	st.r.peers = &proto.Pool{Security: testSec}
	t.Cleanup(st.r.peers.Close)
	ctx := context.Background()
	// File 5 is older than the store's base: its object was lost (EIO).
	// Were it forwarded, the head would wait (up to its forward timeout)
	// on a connection the silent copy accepted.
	silent, accepted := countingSilentPeer(t)
	_, err := st.Handle(ctx, &proto.ReplWrite{Handle: 5, Fwd: []proto.Peer{{ID: 2, Addr: silent}}, Data: []byte("x")})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write to a lost object: %v, want EIO", err)
	}
	if n := accepted(); n != 0 {
		t.Fatalf("a failed local write was forwarded: the copy accepted %d connections", n)
	}

	unlock, err := st.r.locks.lock(ctx, objKey{20, 0}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := st.Handle(cctx, &proto.ReplWrite{Handle: 20, Data: []byte("late")})
		done <- err
	}()
	for i := 0; i < 3000; i++ { // until it waits behind the held range
		st.r.locks.mu.Lock()
		n := len(st.r.locks.objs[objKey{20, 0}])
		st.r.locks.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a write whose sender left while it waited was applied")
		}
	case <-time.After(30 * time.Second):
		unlock()
		t.Fatal("a write whose sender left still waits for the lock")
	}
	unlock()
	if _, ok, _ := st.objSize(objKey{20, 0}); ok {
		t.Fatal("the abandoned write created the object")
	}
}

// badSource is a copy whose reads fail their checksum.
type badSource struct{}

func (badSource) Handle(_ context.Context, req proto.Msg) (proto.Msg, error) {
	switch req.(type) {
	case *proto.ObjStat:
		return &proto.SizeReply{Size: 5000}, nil
	case *proto.Read:
		return nil, proto.Errorf(syscall.EBADMSG, "bad source: checksum mismatch")
	}
	return nil, fmt.Errorf("bad source: %T not served", req)
}

// A source answering EBADMSG is skipped for the next; with no good source
// the heal fails naming them.
func TestHealSkipsBadSource(t *testing.T) {
	srv, pool := startIods(t, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &proto.Server{Handler: badSource{}, Log: quiet, Security: testSec}
	go ps.Serve(l)
	t.Cleanup(ps.Close)
	bad := proto.Peer{ID: 97, Addr: l.Addr().String()}
	good := pattern(5, 5000)
	call(t, pool, srv[0].addr, &proto.Write{Handle: 80, Data: good})
	call(t, pool, srv[1].addr, &proto.Heal{Handle: 80, Ranges: []proto.Extent{{Off: 0, Len: 5000}}, From: []proto.Peer{bad, srv[0].peer()}})
	if got := readAll(t, pool, srv[1].addr, 80, 0); !bytes.Equal(got, good) {
		t.Fatalf("healed past a bad source: %d bytes, not the good copy", len(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pool.Call(ctx, srv[1].addr, &proto.Heal{Handle: 81, Ranges: []proto.Extent{{Off: 0, Len: 10}}, From: []proto.Peer{bad}})
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "I/O server 97") {
		t.Fatalf("heal from a bad source only: %v, want EIO naming server 97", err)
	}
}

// After clients failed over to a copy (it took their writes as head), a
// late forward from the old head (a stopped server going on) is refused
// there, not laid over the newer bytes.
func TestLateForwardRefusedByNewHead(t *testing.T) {
	srv, pool := startIods(t, 2)
	newer := pattern(1, 8<<10)
	call(t, pool, srv[1].addr, &proto.ReplWrite{Handle: 50, Index: 0, Data: newer})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pool.Call(ctx, srv[1].addr, &proto.ReplWrite{Handle: 50, Index: 0, Head: srv[0].id, Data: pattern(9, 8<<10)})
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("late forward: %v, want EAGAIN", err)
	}
	if got := readAll(t, pool, srv[1].addr, 50, 0); !bytes.Equal(got, newer) {
		t.Fatal("the late forward was applied over the newer write")
	}
	// Another object of the same server still takes forwards.
	call(t, pool, srv[1].addr, &proto.ReplWrite{Handle: 51, Index: 0, Head: srv[0].id, Data: newer})
}

// A copy that headed some writes of an object (a client failed over to it
// while other writes were still in flight through the old head) refuses
// only the forwards that overlap them: the others are not late copies of
// anything it holds newer. Refusing them too made the two copies refuse
// each other's forwards for headedFor and mark each other stale until a
// write found no current copy left.
func TestForwardRefusedOnlyOverHeadedRange(t *testing.T) {
	srv, pool := startIods(t, 2)
	newer := pattern(1, 8<<10)
	call(t, pool, srv[1].addr, &proto.ReplWrite{Handle: 52, Index: 0, Data: newer})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := pattern(2, 8<<10)
	if _, err := pool.Call(ctx, srv[1].addr, &proto.ReplWrite{Handle: 52, Index: 0, Off: 8 << 10, Head: srv[0].id, Data: next}); err != nil {
		t.Fatalf("forward of bytes this copy never headed: %v, want it applied", err)
	}
	_, err := pool.Call(ctx, srv[1].addr, &proto.ReplWrite{Handle: 52, Index: 0, Off: 4 << 10, Head: srv[0].id, Data: pattern(9, 8<<10)})
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("forward overlapping a headed range: %v, want EAGAIN", err)
	}
	want := append(slices.Clone(newer), next...)
	if got := readAll(t, pool, srv[1].addr, 52, 0); !bytes.Equal(got, want) {
		t.Fatal("the copy does not hold its headed write followed by the forwarded one")
	}
}

// A head that froze (as a stopped server does) after a write arrived and
// is past forwardBudget does not forward it: its client may have moved on
// to another head. One that only waited (here for a lock, as under load)
// forwards it: slowness is not a failure.
func TestHeadDoesNotForwardLate(t *testing.T) {
	_, pool := startIods(t, 0)
	srv, _ := startIods(t, 1)
	for _, froze := range []bool{true, false} {
		st := openStore(t, t.TempDir())
		st.registered.Store(true)
		st.r.peers = &proto.Pool{Security: testSec}
		t.Cleanup(st.r.peers.Close)
		ino := uint64(52)
		if !froze {
			ino = 53
		}
		unlock, err := st.r.locks.lock(context.Background(), objKey{ino, 0}, 0, toEnd)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(forwardBudget + 300*time.Millisecond)
			if froze {
				st.r.clock.frozeAt.Store(time.Now().UnixNano()) // as the ticker records a gap
			}
			unlock()
		}()
		data := pattern(3, 4096)
		_, err = st.Handle(context.Background(), &proto.ReplWrite{Handle: ino, Index: 0, Fwd: []proto.Peer{srv[0].peer()}, Data: data})
		got := readAll(t, pool, srv[0].addr, ino, 0)
		if froze {
			if !errors.Is(err, syscall.ETIMEDOUT) {
				t.Fatalf("write forwarded %v after it arrived by a head that froze: %v, want ETIMEDOUT", forwardBudget+300*time.Millisecond, err)
			}
			if len(got) != 0 {
				t.Fatalf("the copy got %d bytes of a write forwarded too late", len(got))
			}
			continue
		}
		if err != nil {
			t.Fatalf("a head that waited %v for a lock (no freeze) did not forward: %v", forwardBudget+300*time.Millisecond, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("the copy has %d bytes, not the write its head forwarded after a wait", len(got))
		}
	}
}

// slowCopy is an I/O server whose writes take delay (a copy behind a
// saturated link) but that answers Identify at once: busy, not gone.
type slowCopy struct {
	st    *Store
	delay time.Duration
}

func (s slowCopy) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if _, ok := req.(*proto.Identify); !ok {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.st.Handle(ctx, req)
}

// A head waits for a copy that takes longer than any deadline from the
// write's size but is alive (answers liveness probes): the copy gets the
// write and is not reported failed. A copy that answers nothing at all is
// reported failed about fwdPatience after the forward.
func TestForwardWaitsForSlowCopy(t *testing.T) {
	srv, pool := startIods(t, 1)
	peerStore := openStore(t, t.TempDir())
	peerStore.registered.Store(true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	delay := proto.ReplicaTimeout(4096) + 2*time.Second
	ps := &proto.Server{Handler: slowCopy{st: peerStore, delay: delay}, Log: quiet, Security: testSec}
	go ps.Serve(l)
	t.Cleanup(ps.Close)
	slow := proto.Peer{ID: 98, Addr: l.Addr().String()}
	data := pattern(4, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	r, err := pool.Call(ctx, srv[0].addr, &proto.ReplWrite{Handle: 60, Index: 0, Fwd: []proto.Peer{slow}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if rr := r.(*proto.ReplReply); len(rr.Failed) != 0 {
		t.Fatalf("a copy slower than %v but alive reported failed after %v: %v", proto.ReplicaTimeout(4096), time.Since(start).Round(time.Millisecond), rr.Why)
	}
	if n, err := peerStore.readObj(objKey{60, 0}, make([]byte, 4096), 0); err != nil || n != 4096 {
		t.Fatalf("the slow copy holds %d bytes (%v), want the write", n, err)
	}

	// A copy that answers nothing, probes included: failed in about
	// fwdPatience.
	start = time.Now()
	r, err = pool.Call(ctx, srv[0].addr, &proto.ReplWrite{Handle: 61, Index: 0, Fwd: []proto.Peer{{ID: 99, Addr: silentPeer(t)}}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if rr := r.(*proto.ReplReply); len(rr.Failed) != 1 || rr.Failed[0] != 99 || !strings.Contains(strings.Join(rr.Why, ""), "liveness") {
		t.Fatalf("a silent copy: reply %+v, want it failed for giving no sign of life", rr)
	}
	if d > fwdPatience+3*time.Second {
		t.Fatalf("a silent copy was given up after %v, want about fwdPatience = %v", d.Round(time.Millisecond), fwdPatience)
	}
}

// A source whose object is gone (a lost file, a removed object) is never
// copied as zeros: with Held (the object size meta's file size gives) the
// heal reads answer missing, the next source is tried, and with none the
// heal fails and the copy keeps its bytes (meta keeps it stale). Before,
// an absent source read as a hole, the whole heal cut the copy to 0 and
// meta cleared its stale mark.
func TestHealFromMissingSourceIsAnError(t *testing.T) {
	srv, pool := startIods(t, 3)
	const size = 70000
	good, old := pattern(6, size), pattern(60, size)
	// srv[0] has lost its object (never written here); srv[2] holds it.
	call(t, pool, srv[1].addr, &proto.Write{Handle: 90, Data: old})
	call(t, pool, srv[2].addr, &proto.Write{Handle: 90, Data: good})
	call(t, pool, srv[1].addr, &proto.Heal{Handle: 90, Whole: true, Ranges: []proto.Extent{{}}, Held: size,
		From: []proto.Peer{srv[0].peer(), srv[2].peer()}})
	if got := readAll(t, pool, srv[1].addr, 90, 0); !bytes.Equal(got, good) {
		t.Fatalf("healed past a source without the object: %d bytes, not the good copy's %d", len(got), size)
	}
	// The only source lost it: an error, and the copy is left as it was.
	call(t, pool, srv[1].addr, &proto.Write{Handle: 91, Data: old})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, whole := range []bool{false, true} {
		_, err := pool.Call(ctx, srv[1].addr, &proto.Heal{Handle: 91, Whole: whole, Ranges: []proto.Extent{{Off: 0, Len: 0}}, Held: size,
			From: []proto.Peer{srv[0].peer()}})
		if err == nil {
			t.Fatalf("heal (whole %v) from the only source, whose object is gone: no error", whole)
		}
		if got := readAll(t, pool, srv[1].addr, 91, 0); !bytes.Equal(got, old) {
			t.Fatalf("heal (whole %v) from a missing source changed the copy: %d bytes", whole, len(got))
		}
	}
}
