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
