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

// Whole never cuts below the start of the to-the-end range: the healed copy
// is current there, while the source may be stale and shorter. Both copies
// were truncated to 0, the healed one got a write at [2000, 3000) that the
// source missed (the source is stale there), and the healed one is stale
// from 4096 (a truncate it missed before). Cutting it to the source's size
// (0) would lose the only current copy of [2000, 3000).
func TestHealWholeKeepsBytesBelowItsRange(t *testing.T) {
	srv, pool := startIods(t, 2)
	for _, s := range srv {
		call(t, pool, s.addr, &proto.Write{Handle: 51, Index: 0, Data: bytes.Repeat([]byte("A"), 8192)})
		call(t, pool, s.addr, &proto.Truncate{Handle: 51, Index: 0, Size: 0})
	}
	data := bytes.Repeat([]byte("w"), 1000)
	call(t, pool, srv[1].addr, &proto.Write{Handle: 51, Index: 0, Off: 2000, Data: data}) // the source missed it
	call(t, pool, srv[1].addr, &proto.Heal{Handle: 51, Index: 0, Whole: true, Ranges: []proto.Extent{{Off: 4096, Len: 0}}, From: []proto.Peer{srv[0].peer()}})
	got := readAll(t, pool, srv[1].addr, 51, 0)
	if len(got) != 3000 || !bytes.Equal(got[2000:3000], data) {
		t.Fatalf("healed copy of [4096, end) is %d bytes after the heal, want 3000 with [2000, 3000) kept", len(got))
	}
}
