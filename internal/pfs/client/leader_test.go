package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
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

// fakeCluster is a set of metadata members served by proto servers on
// loopback: the one named by leader serves, the others answer NotLeader
// naming it (or all answer no quorum). Every request is recorded.
type fakeCluster struct {
	sec      proto.Security
	addrs    []string
	leader   atomic.Value // string
	noQuorum atomic.Bool

	mu   sync.Mutex
	seen map[string][]proto.Msg // by member: the requests it served as leader
	// dropFirst: the leader applies the first Idem request, then the
	// connection is cut before its reply leaves (a lost reply).
	dropFirst atomic.Bool
	dropped   atomic.Bool
	proxies   []*proxy
	// silent: this member answers nothing (stopped, or cut off) until
	// release closes.
	silent  atomic.Value // string
	release chan struct{}
}

type member struct {
	c    *fakeCluster
	addr string
}

func (m member) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	c := m.c
	if c.silent.Load() == m.addr {
		select {
		case <-c.release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}
	if c.noQuorum.Load() {
		return nil, &proto.RemoteError{Errno: proto.ErrnoNoQuorum, Msg: "no quorum: 1 of 3 members reachable"}
	}
	if lead := c.leader.Load().(string); lead != m.addr {
		return nil, proto.NotLeader(lead)
	}
	c.mu.Lock()
	c.seen[m.addr] = append(c.seen[m.addr], req)
	c.mu.Unlock()
	if _, ok := req.(*proto.Idem); ok && c.dropFirst.Load() && !c.dropped.Swap(true) {
		for _, p := range c.proxies {
			p.cut()
		}
	}
	return &proto.AttrReply{Attr: proto.Attr{Ino: 1, Mode: syscall.S_IFDIR | 0o755, Nlink: 2}, Created: true}, nil
}

// startFake starts n members, each behind a proxy whose client side can be
// cut; addrs are the proxies'.
func startFake(t *testing.T, n int) *fakeCluster {
	t.Helper()
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{sec: proto.Security{Cred: cred}, seen: map[string][]proto.Msg{}, release: make(chan struct{})}
	c.silent.Store("")
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := startProxy(t, l.Addr().String())
		c.proxies = append(c.proxies, p)
		c.addrs = append(c.addrs, p.addr)
		s := &proto.Server{Handler: member{c, p.addr}, Security: c.sec, Log: slog.New(slog.DiscardHandler)}
		go s.Serve(l)
		t.Cleanup(s.Close)
	}
	c.leader.Store(c.addrs[n-1])
	t.Cleanup(func() { close(c.release) }) // before the servers close
	return c
}

func (c *fakeCluster) served(addr string) []proto.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]proto.Msg(nil), c.seen[addr]...)
}

func (c *fakeCluster) client(t *testing.T, opts ...client.Option) *client.Client {
	cl := client.New(strings.Join(c.addrs, ","), append([]client.Option{client.WithSecurity(c.sec)}, opts...)...)
	t.Cleanup(cl.Close)
	return cl
}

// proxy forwards TCP connections to a server; cut drops every client
// connection at once, as a crash or network failure would.
type proxy struct {
	addr string
	mu   sync.Mutex
	cs   []net.Conn
	// dropReply: the next bytes from the server (a reply) are not passed
	// on; both connections close instead: the request applied, its reply
	// lost.
	dropReply atomic.Bool
}

func startProxy(t *testing.T, to string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String()}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { p.back(in, out); in.Close() }()
		}
	}()
	return p
}

// back copies the server's bytes to the client until either side ends or a
// reply is to be dropped.
func (p *proxy) back(in, out net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := out.Read(buf)
		if n > 0 && p.dropReply.CompareAndSwap(true, false) {
			out.Close()
			return
		}
		if n > 0 {
			if _, werr := in.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

func TestFindsLeader(t *testing.T) {
	c := startFake(t, 3)
	cl := c.client(t)
	ctx := ctxT(t)
	if _, err := cl.Lstat(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	if got := cl.Leader().Current(); got != c.addrs[2] {
		t.Errorf("believed leader %s, want %s", got, c.addrs[2])
	}
	if n := len(c.served(c.addrs[2])); n != 1 {
		t.Errorf("leader served %d requests, want 1", n)
	}
}

func TestFollowsLeader(t *testing.T) {
	c := startFake(t, 3)
	cl := c.client(t)
	ctx := ctxT(t)
	for i := 0; i < 40; i++ {
		switch i {
		case 10:
			c.leader.Store(c.addrs[0])
		case 20:
			// An election: nobody knows the leader for a moment.
			c.leader.Store("")
			go func() { time.Sleep(50 * time.Millisecond); c.leader.Store(c.addrs[1]) }()
		}
		if _, err := cl.Mkdir(ctx, 1, "d", 0o755); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := cl.Leader().Current(); got != c.addrs[1] {
		t.Errorf("believed leader %s, want %s", got, c.addrs[1])
	}
	if len(c.served(c.addrs[0])) != 10 || len(c.served(c.addrs[2])) != 10 || len(c.served(c.addrs[1])) != 20 {
		t.Errorf("served %d/%d/%d, want 10/20/10", len(c.served(c.addrs[0])), len(c.served(c.addrs[1])), len(c.served(c.addrs[2])))
	}
	// Mutating requests carry request IDs: one client, increasing Seq.
	var client, seq uint64
	for _, m := range c.served(c.addrs[1]) {
		id, ok := m.(*proto.Idem)
		if !ok {
			t.Fatalf("mkdir sent as %T, not in an Idem", m)
		}
		if client == 0 {
			client = id.Client
		}
		if id.Client != client || id.Seq <= seq || id.Done > id.Seq {
			t.Errorf("idem client %x seq %d done %d after client %x seq %d", id.Client, id.Seq, id.Done, client, seq)
		}
		seq = id.Seq
	}
}

func TestLostReplyRetriesSameID(t *testing.T) {
	c := startFake(t, 3)
	c.dropFirst.Store(true)
	cl := c.client(t)
	ctx := ctxT(t)
	if _, _, err := cl.Create(ctx, 1, "f", 0o644, client.CreateOpts{Excl: true}); err != nil {
		t.Fatal(err)
	}
	got := c.served(c.addrs[2])
	if len(got) != 2 {
		t.Fatalf("leader saw %d requests, want the create and its retry", len(got))
	}
	a, b := got[0].(*proto.Idem), got[1].(*proto.Idem)
	if a.Client != b.Client || a.Seq != b.Seq {
		t.Errorf("retry has a new request ID: (%x,%d) then (%x,%d)", a.Client, a.Seq, b.Client, b.Seq)
	}
	if _, ok := b.Req.(*proto.Create); !ok {
		t.Errorf("retry carries %T", b.Req)
	}
}

func TestNoQuorumGivesUp(t *testing.T) {
	c := startFake(t, 3)
	c.noQuorum.Store(true)
	// 2 s: every member is asked (and dialled) within it even on a loaded
	// machine, so each one's last answer is known.
	cl := c.client(t, client.WithTimeout(2*time.Second))
	ctx := ctxT(t)
	start := time.Now()
	_, err := cl.Mkdir(ctx, 1, "d", 0o755)
	if err == nil {
		t.Fatal("mkdir without quorum succeeded")
	}
	if d := time.Since(start); d > 7*time.Second {
		t.Errorf("gave up after %v, timeout 2s", d)
	}
	if !errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, proto.ErrnoNoQuorum) || errors.Is(err, proto.ErrnoNotLeader) {
		t.Errorf("error %v: want ETIMEDOUT and none of the members' own errnos", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "metadata: no quorum: members "+strings.Join(c.addrs, ",")) {
		t.Errorf("error %q does not name the members", msg)
	}
	for _, a := range c.addrs {
		if !strings.Contains(msg, a+": no quorum: 1 of 3") {
			t.Errorf("error %q lacks %s's last answer", msg, a)
		}
	}
	// Reads give up the same way, and a caller's shorter context wins.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := cl.Lstat(cctx, "/"); !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stat: %v", err)
	}
}

// A member that is down (nothing listens) is skipped.
func TestMemberDown(t *testing.T) {
	c := startFake(t, 2)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	cl := client.New(dead+","+strings.Join(c.addrs, ","), client.WithSecurity(c.sec))
	t.Cleanup(cl.Close)
	if _, err := cl.Lstat(ctxT(t), "/"); err != nil {
		t.Fatal(err)
	}
}

// A leader that stops answering (SIGSTOP, a partition) is given up on after
// one attempt's time; the others name the new leader.
func TestSilentLeader(t *testing.T) {
	c := startFake(t, 3)
	cl := c.client(t)
	ctx := ctxT(t)
	if _, err := cl.Mkdir(ctx, 1, "a", 0o755); err != nil {
		t.Fatal(err)
	}
	c.silent.Store(c.addrs[2])
	c.leader.Store(c.addrs[0])
	if _, err := cl.Mkdir(ctx, 1, "b", 0o755); err != nil {
		t.Fatalf("mkdir with the old leader silent: %v", err)
	}
	if got := cl.Leader().Current(); got != c.addrs[0] {
		t.Errorf("following %s, want %s", got, c.addrs[0])
	}
}

// TestLostReplyAppliesOnce: against the real metadata server, a create and
// a rename whose replies are lost (the connection drops after the server
// applied them) are retried with their request IDs and applied once: the
// exclusive create does not turn into EEXIST, the rename not into ENOENT.
func TestLostReplyAppliesOnce(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	p := startProxy(t, fsys.Meta.Addr)
	cl := client.New(p.addr)
	defer cl.Close()
	ctx := ctxT(t)
	root, err := cl.Lstat(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	// Every pooled connection up first, so that what is dropped is a
	// reply, not a new connection's handshake (a request never sent).
	warm := func() {
		for range 4 {
			if _, err := cl.Lstat(ctx, "/"); err != nil {
				t.Fatal(err)
			}
		}
	}
	warm()
	p.dropReply.Store(true)
	a, created, err := cl.Create(ctx, root.Ino, "f", 0o644, client.CreateOpts{Excl: true})
	if err != nil || !created {
		t.Fatalf("exclusive create with its reply lost: created %v, %v", created, err)
	}
	if p.dropReply.Load() {
		t.Fatal("no reply was dropped")
	}
	warm()
	p.dropReply.Store(true)
	if err := cl.Rename(ctx, root.Ino, "f", root.Ino, "g", 0); err != nil {
		t.Fatalf("rename with its reply lost: %v", err)
	}
	ents, err := cl.Readdir(ctx, root.Ino)
	if err != nil || len(ents) != 1 || ents[0].Name != "g" || ents[0].Attr.Ino != a.Ino {
		t.Fatalf("after the retries: %+v, %v; want only g (inode %d)", ents, err, a.Ino)
	}
}

// Metrics see the operation, not its request-ID wrapper.
func TestObserveNamesInnerOp(t *testing.T) {
	c := startFake(t, 1)
	cl := c.client(t)
	var mu sync.Mutex
	var ops []proto.Op
	cl.Pool().Observe = func(op proto.Op, _ time.Duration, _ error) { mu.Lock(); ops = append(ops, op); mu.Unlock() }
	if _, _, err := cl.Create(ctxT(t), 1, "f", 0o644, client.CreateOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.served(c.addrs[0])[0].(*proto.Idem); !ok {
		t.Fatal("create not sent in an Idem")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) != 1 || ops[0] != proto.OpCreate {
		t.Errorf("observed %v, want [%d] (create)", ops, proto.OpCreate)
	}
}

// A request that is neither idempotent nor request-numbered (a membership
// change, a backup) goes on to the next member when the first is down: it
// was never sent, so trying another cannot apply it twice.
func TestMemberDownNonRetryable(t *testing.T) {
	c := startFake(t, 2)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	cl := client.New(dead+","+strings.Join(c.addrs, ","), client.WithSecurity(c.sec))
	t.Cleanup(cl.Close)
	if _, err := cl.Call(ctxT(t), &proto.MemberChange{Change: proto.MemberRemove, ID: 3}); err != nil {
		t.Fatalf("with the first member down: %v", err)
	}
	if got := c.served(c.addrs[1]); len(got) != 1 {
		t.Errorf("the leader served %d requests, want 1", len(got))
	}
}
