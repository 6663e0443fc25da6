package iod

import (
	"bytes"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// A copy that missed a truncate to 4096 is stale over [4096, end); meta
// heals that range with Whole (every extent to the end carries it), so the
// copy is cut to the source's size: once the file grows again (a write at
// 16 KiB on both copies) the hole [4096, 16384) reads as zeros on both,
// not as the old bytes on the healed copy.
func TestHealOfMissedTruncateCutsTail(t *testing.T) {
	srv, pool := startIods(t, 2)
	old := bytes.Repeat([]byte("A"), 8192)
	call(t, pool, srv[0].addr, &proto.Write{Handle: 50, Index: 0, Data: old})
	call(t, pool, srv[1].addr, &proto.Write{Handle: 50, Index: 0, Data: old})
	call(t, pool, srv[0].addr, &proto.Truncate{Handle: 50, Index: 0, Size: 4096}) // copy 1 missed it
	call(t, pool, srv[1].addr, &proto.Heal{Handle: 50, Index: 0, Whole: true, Ranges: []proto.Extent{{Off: 4096, Len: 0}}, From: []proto.Peer{srv[0].peer()}})
	for _, s := range srv {
		call(t, pool, s.addr, &proto.Write{Handle: 50, Index: 0, Off: 16384, Data: []byte("z")})
	}
	a, b := readAll(t, pool, srv[0].addr, 50, 0), readAll(t, pool, srv[1].addr, 50, 0)
	if !bytes.Equal(a, b) {
		t.Fatalf("after heal the copies differ: source [4096,8192) %q..., healed copy %q...", a[4096:4100], b[4096:4100])
	}
}
