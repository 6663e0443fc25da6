package meta

import (
	"context"
	"errors"
	"fmt"
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
	f := &follower{}
	s, err = Open(Config{Data: dir, Log: quiet, Engine: func(sm replog.StateMachine) (replog.Engine, error) {
		f.Single = replog.NewSingle(sm, "127.0.0.1:7000")
		return f, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errno(t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}, proto.ErrnoNotLeader)
	f.lead.Store(true) // the election is won; the 100 ms loop has not seen it
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
}
