package iod

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// rot flips one bit of object k's file at local offset off, behind the
// store's back (bit rot).
func rot(t *testing.T, st *Store, k objKey, off int64) {
	t.Helper()
	f, err := os.OpenFile(st.path(k), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Rule: a change that keeps part of a block (a partial write, a truncate
// inside it, a punch of part of it) first checks the block's old bytes;
// a rotted block answers EBADMSG and stays bad, rather than being
// re-summed from disk, which would give the rot a valid sum for good.
func TestPartialChangeOfRottedBlockStaysBad(t *testing.T) {
	st := openStore(t, t.TempDir())
	data := randBytes(2*csBlock, 1)
	changes := map[string]func(k objKey) error{
		"write": func(k objKey) error { return st.writeObj(k, []byte("x"), 1000) },
		"write past the end": func(k objKey) error {
			// Grows block 1, which keeps its bytes [csBlock, 2*csBlock-100).
			return st.writeObj(k, []byte("x"), 2*csBlock-10)
		},
		"truncate": func(k objKey) error { return st.truncateObj(k, 1000) },
		"punch":    func(k objKey) error { return st.punch(&proto.Punch{Handle: k.ino, Index: k.idx, Off: 1000, Len: 10}) },
	}
	var ino uint64 = 5
	for name, change := range changes {
		ino++
		k := objKey{ino, 0}
		mustWrite(t, st, k, data, 0)
		at := int64(7)
		if name == "write past the end" {
			if err := st.truncateObj(k, 2*csBlock-100); err != nil {
				t.Fatal(err)
			}
			at = csBlock + 7
		}
		rot(t, st, k, at)
		if err := change(k); !isBadMsg(err) {
			t.Errorf("%s in a rotted block: %v, want EBADMSG", name, err)
		}
		if _, err := st.readObj(k, make([]byte, 16), at); !isBadMsg(err) {
			t.Errorf("after a %s, the rotted block reads without EBADMSG (%v): the rot got a valid sum", name, err)
		}
	}
	// A write that covers the rotted block whole keeps nothing of it, and
	// goes through.
	k := objKey{ino + 1, 0}
	mustWrite(t, st, k, data, 0)
	rot(t, st, k, 7)
	mustWrite(t, st, k, data[:csBlock], 0)
	checkObj(t, st, k, data)
}

// healTarget is an in-process store healed from servers of srv.
func healTarget(t *testing.T) *Store {
	st := openStore(t, t.TempDir())
	st.registered.Store(true)
	st.r.peers = &proto.Pool{Security: testSec}
	t.Cleanup(st.r.peers.Close)
	return st
}

// Rule: heal is what repairs a bad block, so a heal range that covers a
// rotted block only in part (or zeroes or cuts it) rewrites that block
// whole from the source instead of failing on it.
func TestHealRewritesRottedBlockWhole(t *testing.T) {
	srv, pool := startIods(t, 1)
	st := healTarget(t)
	data := pattern(9, 3*csBlock)
	call(t, pool, srv[0].addr, &proto.Write{Handle: 60, Data: data})
	k := objKey{60, 0}
	mustWrite(t, st, k, data, 0)
	rot(t, st, k, 7)            // outside the healed range, in its first block
	rot(t, st, k, 2*csBlock+90) // outside, in its last block
	_, err := st.Handle(context.Background(), &proto.Heal{Handle: 60, Ranges: []proto.Extent{{Off: 1000, Len: 2 * csBlock}}, From: []proto.Peer{srv[0].peer()}})
	if err != nil {
		t.Fatalf("heal of a range over rotted blocks: %v", err)
	}
	checkObj(t, st, k, data)

	// Heal of a missed truncate onto a rotted block: the cut keeps part of
	// the rotted block, which comes whole from the source first.
	call(t, pool, srv[0].addr, &proto.Truncate{Handle: 60, Size: csBlock + 100})
	rot(t, st, k, csBlock+7)
	_, err = st.Handle(context.Background(), &proto.Heal{Handle: 60, Ranges: []proto.Extent{{Off: csBlock + 100}}, From: []proto.Peer{srv[0].peer()}})
	if err != nil {
		t.Fatalf("heal of a missed truncate into a rotted block: %v", err)
	}
	checkObj(t, st, k, data[:csBlock+100])
}

// Rule: a Heal range of Len 0 runs to the source's end and ends by
// cutting the local object to the source's size, as Whole does: a copy
// that missed a truncate must not keep its old tail, which would read as
// old bytes in the hole once the file grows again.
func TestHealToEndCutsMissedTruncate(t *testing.T) {
	srv, pool := startIods(t, 2)
	old := bytes.Repeat([]byte("A"), 8192)
	call(t, pool, srv[0].addr, &proto.Write{Handle: 50, Index: 0, Data: old})
	call(t, pool, srv[1].addr, &proto.Write{Handle: 50, Index: 0, Data: old})
	call(t, pool, srv[0].addr, &proto.Truncate{Handle: 50, Index: 0, Size: 4096}) // copy 1 missed it
	call(t, pool, srv[1].addr, &proto.Heal{Handle: 50, Index: 0, Ranges: []proto.Extent{{Off: 4096, Len: 0}}, From: []proto.Peer{srv[0].peer()}})
	if sz := call(t, pool, srv[1].addr, &proto.ObjStat{Handle: 50, Index: 0}).(*proto.SizeReply).Size; sz != 4096 {
		t.Fatalf("healed copy has size %d, the source 4096", sz)
	}
	for _, s := range srv {
		call(t, pool, s.addr, &proto.Write{Handle: 50, Index: 0, Off: 16384, Data: []byte("z")})
	}
	a, b := readAll(t, pool, srv[0].addr, 50, 0), readAll(t, pool, srv[1].addr, 50, 0)
	if !bytes.Equal(a, b) {
		t.Fatalf("after heal the copies differ: source [4096,8192) %q..., healed copy %q...", a[4096:4100], b[4096:4100])
	}
}

// Rule: on RAID-1 a change that meets a rotted block in one mirror takes
// the block from a mirror where it checks and goes through, rather than
// failing (the whole mirror would be taken out and rebuilt).
func TestRAID1PartialChangeRepairsRottedMirror(t *testing.T) {
	st := openRAID(t, tempDirs(t, 2), RAID1)
	k := objKey{5, 0}
	want := randBytes(2*csBlock, 1)
	mustWrite(t, st, k, want, 0)
	for m := range 2 {
		f, err := os.OpenFile(st.pathIn(m, k), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte{want[7+m] ^ 1}, int64(7+m)) // block 0 rots in both, at different bytes
		f.Close()
	}
	if err := st.writeObj(k, []byte("x"), 1000); !isBadMsg(err) {
		t.Fatalf("write into a block bad in both mirrors: %v, want EBADMSG", err)
	}
	mustWrite(t, st, k, want[:csBlock], 0) // whole: repairs both
	f, err := os.OpenFile(st.pathIn(1, k), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{want[csBlock+7] ^ 1}, csBlock+7) // block 1 rots in mirror 1 only
	f.Close()
	mustWrite(t, st, k, []byte("x"), csBlock+1000)
	want[csBlock+1000] = 'x'
	if d := st.degraded(); d != "" {
		t.Fatalf("a bad block in one mirror took it out: %s", d)
	}
	for range 2 { // reads alternate between the mirrors
		checkObj(t, st, k, want)
	}
	if sr, err := st.scrub(k); err != nil || len(sr.Bad) != 0 {
		t.Fatalf("scrub after the repair: %+v, %v", sr, err)
	}
}

// zeroFrom zeroes exactly its range, in pieces ending on block edges.
func TestZeroFromUnalignedRange(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{8, 0}
	want := pattern(3, 3*healPiece)
	mustWrite(t, st, k, want, 0)
	n, err := st.zeroFrom(k, 1000, 2*healPiece+5000)
	if err != nil || n != 2*healPiece+4000 {
		t.Fatalf("zeroFrom: %d bytes, %v", n, err)
	}
	clear(want[1000 : 2*healPiece+5000])
	checkObj(t, st, k, want)
}
