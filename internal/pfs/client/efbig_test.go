package client_test

import (
	"errors"
	"math"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Sizes past what the file's I/O servers can hold are EFBIG through the
// client library: truncate, write, and a size sent to meta directly; sizes
// below it work.
func TestSizePastLayoutIsEFBIG(t *testing.T) {
	fsys := pfstest.Start(t, 1) // one column: the limit is one object's
	ctx := ctxT(t)
	c := client.New(fsys.Meta.Addr)
	t.Cleanup(c.Close)
	f, err := c.CreatePath(ctx, "/big", 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(ctx, layout.MaxObjectSize+1); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("truncate past the limit: %v, want EFBIG", err)
	}
	if _, err := f.WriteAt([]byte("x"), layout.MaxObjectSize); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("write past the limit: %v, want EFBIG", err)
	}
	if _, err := f.WriteAt([]byte("x"), math.MaxInt64); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("write at the largest int64: %v, want EFBIG", err)
	}
	// What the node used to turn into a negative size.
	if _, err := c.SetAttr(ctx, &proto.SetAttr{Ino: f.Ino(), Mask: proto.SetSize, Size: math.MaxUint64}); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("setattr size 2^64-1: %v, want EFBIG", err)
	}
	// Below the limit sizes work (the I/O server's own file system may
	// hold less than 2^62: ext4 stops at 16 TiB, also with EFBIG).
	const big = 1 << 40
	if err := f.Truncate(ctx, big); err != nil {
		t.Fatalf("truncate to 1 TiB: %v", err)
	}
	if _, err := f.WriteAt([]byte("x"), big-1); err != nil {
		t.Fatalf("write of the last byte: %v", err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stat(ctx, "/big")
	if err != nil || st.Size != big {
		t.Fatalf("stat: %+v %v, want size %d", st, err, big)
	}
}
