package iod

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A running iod that meta declared lost (its copies made again elsewhere)
// has its heartbeat refused with EAGAIN: from then on it answers EIO
// instead of serving its old objects, which clients holding the old layout
// would otherwise still write to.
func TestRefusedHeartbeatStopsServing(t *testing.T) {
	metaAddr := startMeta(t, t.TempDir())
	pool := proto.Pool{Security: testSec}
	defer pool.Close()
	ctx := context.Background()
	const addr = "127.0.0.1:9" // nothing answers there: LoseServer's probe fails
	st := openStore(t, t.TempDir())
	meta := client.NewLeader(&pool, metaAddr, 0)
	id, err := st.register(ctx, meta, addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := do(t, st, &proto.Write{Handle: 5, Index: 0, Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Call(ctx, metaAddr, &proto.LoseServer{ID: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.register(ctx, meta, addr); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("heartbeat of a lost server: %v, want EAGAIN", err)
	}
	if _, err := st.Handle(ctx, &proto.Read{Handle: 5, Index: 0, Len: 3}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read from an iod whose heartbeat was refused: %v, want EIO", err)
	}
	if _, err := st.Handle(ctx, &proto.ReplWrite{Handle: 5, Index: 0, Data: []byte("new")}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write to an iod whose heartbeat was refused: %v, want EIO", err)
	}
}
