package client

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestDownMemory: a failed server is skipped for DownFor; failing again
// right after that doubles the period (up to maxDown); a server healthy for
// a period starts afresh.
func TestDownMemory(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	clock := t0
	now = func() time.Time { return clock }
	t.Cleanup(func() { now = time.Now })
	c := &Client{}
	at := func(d time.Duration) { clock = t0.Add(d) }
	c.markDown(3)
	if !c.Down(3) || c.Down(4) {
		t.Fatal("server 3 failed: it is down, 4 is not")
	}
	at(DownFor - time.Second)
	c.markDown(3) // the same outage: no longer
	at(DownFor + time.Millisecond)
	if c.Down(3) {
		t.Fatal("still down after DownFor")
	}
	c.markDown(3) // tried again, failed again: twice as long
	at(DownFor + 2*DownFor - time.Second)
	if !c.Down(3) {
		t.Fatal("the second period is not doubled")
	}
	for i := 0; i < 10; i++ {
		r := c.down[3]
		at(r.until.Sub(t0) + time.Millisecond)
		c.markDown(3)
	}
	if p := c.down[3].period; p != maxDown {
		t.Fatalf("period %v after many failures, want the cap %v", p, maxDown)
	}
	r := c.down[3]
	at(r.until.Sub(t0) + r.period + time.Second) // healthy for a period
	if c.Down(3) {
		t.Fatal("down after being healthy")
	}
	c.markDown(3)
	if p := c.down[3].period; p != DownFor {
		t.Fatalf("period %v after a healthy spell, want %v afresh", p, DownFor)
	}
}

// TestAddStaleMerges: records of one copy that overlap or touch merge
// (Len 0 stays "to the end"); others stay apart.
func TestAddStaleMerges(t *testing.T) {
	var recs []proto.StaleRec
	for i := uint64(0); i < 100; i++ {
		recs = addStale(recs, proto.StaleRec{Index: 1, Server: 2, Off: i * 4096, Len: 4096})
	}
	recs = addStale(recs, proto.StaleRec{Index: 1, Server: 3, Off: 0, Len: 10})
	recs = addStale(recs, proto.StaleRec{Index: 0, Server: 2, Off: 0, Len: 10})
	if len(recs) != 3 || recs[0] != (proto.StaleRec{Index: 1, Server: 2, Off: 0, Len: 100 * 4096}) {
		t.Fatalf("records %+v: want one for [0, 400 KiB) of server 2 column 1 and two others", recs)
	}
	recs = addStale(recs, proto.StaleRec{Index: 1, Server: 2, Off: 8192, Len: 0})
	if recs[0] != (proto.StaleRec{Index: 1, Server: 2, Off: 0, Len: 0}) {
		t.Fatalf("record %+v: want [0, end)", recs[0])
	}
}

// silentServer answers nothing until its request is cancelled: a stopped
// I/O server.
type silentServer struct{}

func (silentServer) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestReplicaCtxPatience: an attempt at a copy that has answered none of
// this client's requests for Patience ends then, though 64 MiB queued ahead
// of it would allow headTimeout (19 s); one at a server that keeps
// answering other requests keeps the long bound; the last copy to try has
// no such bound.
func TestReplicaCtxPatience(t *testing.T) {
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec := proto.Security{Cred: cred}
	var addrs []string
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &proto.Server{Handler: silentServer{}, Security: sec, Log: slog.New(slog.DiscardHandler)}
		go s.Serve(l)
		t.Cleanup(s.Close)
		addrs = append(addrs, l.Addr().String())
	}
	c := New("127.0.0.1:1", WithSecurity(sec))
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(addr string, last bool) <-chan time.Duration {
		done := make(chan time.Duration, 1)
		start := time.Now()
		go func() {
			actx, acancel := c.replicaCtx(ctx, addr, 64<<20, last)
			defer acancel()
			c.pool.Call(actx, addr, &proto.Sync{Handle: 7})
			done <- time.Since(start)
		}()
		return done
	}
	silent, busy, last := call(addrs[0], false), call(addrs[1], false), call(addrs[0], true)
	// addrs[1] answers something every 500 ms for 6 s (as hear records a
	// reply to another request).
	stopHear := time.After(6 * time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var silentTook time.Duration
	for hearing := true; hearing; {
		select {
		case <-tick.C:
			c.hear(addrs[1], nil)
		case silentTook = <-silent:
			if silentTook > Patience+2*time.Second {
				t.Fatalf("the silent copy's attempt ended after %v, want about Patience = %v", silentTook, Patience)
			}
		case d := <-busy:
			t.Fatalf("the attempt at a server still answering others ended after %v, within the 6 s it kept answering", d)
		case d := <-last:
			t.Fatalf("the last copy's attempt ended after %v, want no Patience bound", d)
		case <-stopHear:
			hearing = false
		}
	}
	if silentTook == 0 {
		t.Fatal("the silent copy's attempt did not end in 6 s")
	}
	// Silent from now on: it ends Patience after the last answer.
	select {
	case d := <-busy:
		if d > 6*time.Second+Patience+2*time.Second {
			t.Fatalf("attempt ended after %v, want about Patience after its server went silent at 6 s", d)
		}
	case <-time.After(Patience + 3*time.Second):
		t.Fatal("the attempt did not end Patience after its server went silent")
	}
	select {
	case d := <-last:
		t.Fatalf("the last copy's attempt ended after %v, want no Patience bound", d)
	default:
	}
}

// slowServer answers Identify at once and every other request after delay:
// an I/O server behind a saturated link, busy but alive.
type slowServer struct{ delay time.Duration }

func (s slowServer) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if _, ok := req.(*proto.Identify); ok {
		return &proto.ServersReply{}, nil
	}
	select {
	case <-time.After(s.delay):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestReplicaCtxSlowServerWaited: a copy that completes nothing for longer
// than Patience but answers liveness probes is waited for (slow progress
// is not death); its request completes.
func TestReplicaCtxSlowServerWaited(t *testing.T) {
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec := proto.Security{Cred: cred}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	delay := Patience + 2*time.Second
	s := &proto.Server{Handler: slowServer{delay}, Security: sec, Log: slog.New(slog.DiscardHandler)}
	go s.Serve(l)
	t.Cleanup(s.Close)
	addr := l.Addr().String()
	c := New("127.0.0.1:1", WithSecurity(sec))
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	actx, acancel := c.replicaCtx(ctx, addr, 1<<20, false)
	defer acancel()
	_, err = c.pool.Call(actx, addr, &proto.Sync{Handle: 7})
	if err = proto.Why(actx, err); err != nil {
		t.Fatalf("a request to a server that answers probes but takes %v was given up after %v: %v", delay, time.Since(start).Round(time.Millisecond), err)
	}
}
