package iod

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Rule: a head refuses (EINVAL, before applying anything) a ReplWrite
// whose Fwd no layout gives: more than layout.MaxReplicas-1 copies (a
// client could otherwise make a head dial any number of addresses), this
// server itself, or one server twice.
func TestReplWriteRefusesBadFwd(t *testing.T) {
	srv, pool := startIods(t, 2)
	var many []proto.Peer
	for i := range layout.MaxReplicas {
		many = append(many, proto.Peer{ID: uint32(100 + i), Addr: "127.0.0.1:1"})
	}
	cases := []struct {
		name, why string
		fwd       []proto.Peer
	}{
		{"too many", "5 copies to forward to", many},
		{"itself", "is this server", []proto.Peer{srv[1].peer(), srv[0].peer()}},
		{"twice", "listed twice", []proto.Peer{srv[1].peer(), srv[1].peer()}},
	}
	for i, c := range cases {
		h := uint64(70 + i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := pool.Call(ctx, srv[0].addr, &proto.ReplWrite{Handle: h, Fwd: c.fwd, Data: []byte("x")})
		cancel()
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("Fwd %s: %v, want EINVAL saying %q", c.name, err, c.why)
		}
		for _, s := range srv {
			if got := readAll(t, pool, s.addr, h, 0); len(got) != 0 {
				t.Errorf("Fwd %s: server %d applied the refused write", c.name, s.id)
			}
		}
	}
	// A proper Fwd still goes through.
	call(t, pool, srv[0].addr, &proto.ReplWrite{Handle: 79, Fwd: []proto.Peer{srv[1].peer()}, Data: []byte("x")})
}
