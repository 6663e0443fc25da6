package meta

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
)

// TestEngineErrRetryable: engine failures reach clients as errors they
// retry (another member, or later), not as EIO.
func TestEngineErrRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{replog.ErrStopped, proto.NotLeader("")},
		{fmt.Errorf("propose: %w", replog.ErrStopped), proto.NotLeader("")},
		{context.DeadlineExceeded, proto.Errorf(proto.ErrnoNoQuorum, "")},
		{context.Canceled, proto.Errorf(proto.ErrnoNoQuorum, "")},
		{replog.ErrNoQuorum, proto.Errorf(proto.ErrnoNoQuorum, "")},
		{&replog.NotLeaderError{Leader: 2, Addr: "127.0.0.2:1"}, proto.NotLeader("127.0.0.2:1")},
	} {
		got := engineErr(c.err)
		var g, w *proto.RemoteError
		if !errors.As(got, &g) || !errors.As(c.want, &w) || g.Errno != w.Errno {
			t.Errorf("engineErr(%v) = %v, want errno of %v", c.err, got, c.want)
		}
	}
	// Through the service: a member whose engine stopped sends clients on.
	s := open(t, Open)
	s.eng.Close()
	_, err := s.Handle(context.Background(), &proto.Mkdir{Parent: RootIno, Name: "x", Mode: 0o755})
	if _, ok := proto.LeaderHint(err); !ok {
		t.Fatalf("mkdir on a stopped engine: %v, want not leader", err)
	}
}

// TestJustElectedServes: right after this member wins an election, before
// the leadership loop notices, it serves mutations instead of answering
// "not leader" naming itself.
func TestJustElectedServes(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, f := openFollower(t, dir)
	errno(t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}, proto.ErrnoNotLeader)
	f.lead.Store(true) // the election is won; the 100 ms loop has not seen it
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
}

// lagging is a follower engine that, once leading, reports Lag committed
// commands not yet applied here, and counts read barriers.
type lagging struct {
	follower
	lag      atomic.Uint64
	barriers atomic.Int64
}

func (l *lagging) Status() replog.Status {
	st := l.follower.Status()
	st.Commit += l.lag.Load()
	return st
}

func (l *lagging) ReadBarrier(ctx context.Context) error {
	l.barriers.Add(1)
	return l.follower.ReadBarrier(ctx)
}

// TestNewLeaderCatchesUpFirst: a member just elected with committed
// commands not yet applied serves no leader-only request (refusing "not
// leader" naming no one, not itself); once caught up it serves them, each
// after a read barrier.
func TestNewLeaderCatchesUpFirst(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	l := &lagging{}
	s, err = Open(Config{Data: dir, Log: quiet, Engine: func(sm replog.StateMachine) (replog.Engine, error) {
		l.Single = replog.NewSingle(sm, "127.0.0.1:7000")
		return l, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l.lag.Store(3)
	l.lead.Store(true)
	for _, req := range []proto.Msg{&proto.Register{Addr: "127.0.0.1:1"}, &proto.Servers{},
		&proto.Create{Parent: RootIno, Name: "f"}, &proto.SetLayout{Ino: RootIno, StripeCount: 1}} {
		_, err := s.Handle(context.Background(), req)
		if addr, ok := proto.LeaderHint(err); !ok || addr != "" {
			t.Errorf("%T on a leader still applying: %v, want not-leader naming no one", req, err)
		}
	}
	l.lag.Store(0)
	before := l.barriers.Load()
	call[*proto.ServersReply](t, s, &proto.Register{Addr: "127.0.0.1:1"})
	call[*proto.ServersReply](t, s, &proto.Servers{})
	call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: RootIno, StripeCount: 1})
	if n := l.barriers.Load() - before; n < 3 {
		t.Errorf("%d read barriers for 3 leader-only requests", n)
	}
}

// TestDefaultStripeSizeIsState: the default stripe size is the one the
// store was made with; a member started later with another flag places
// alike.
func TestDefaultStripeSizeIsState(t *testing.T) {
	dir := t.TempDir()
	var id uint32
	reg := func(s *Service) {
		r, err := s.Handle(context.Background(), &proto.Register{ID: id, Addr: "127.0.0.1:1", Cluster: s.Cluster()})
		if err != nil {
			t.Fatal(err)
		}
		id = r.(*proto.ServersReply).Servers[0].ID
	}
	s, err := Open(Config{Data: dir, Log: quiet, DefaultStripeSize: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	reg(s)
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "a", Mode: 0o644}).Attr
	s.Close()
	s, err = Open(Config{Data: dir, Log: quiet, DefaultStripeSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg(s)
	b := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "b", Mode: 0o644}).Attr
	if a.StripeSize != 128<<10 || b.StripeSize != 128<<10 {
		t.Fatalf("stripe sizes %d then %d, want the store's 128 KiB both times", a.StripeSize, b.StripeSize)
	}
}

// openFollower reopens the store in dir under a one-process engine that
// the test can turn into a follower (closed with the test).
func openFollower(t *testing.T, dir string) (*Service, *follower) {
	t.Helper()
	f := &follower{}
	s, err := Open(Config{Data: dir, Log: quiet, Engine: func(sm replog.StateMachine) (replog.Engine, error) {
		f.Single = replog.NewSingle(sm, "127.0.0.1:7000")
		return f, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f
}
