package iod

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func isBadMsg(err error) bool {
	var re *proto.RemoteError
	return errors.As(err, &re) && re.Errno == syscall.EBADMSG
}

func mustWrite(t *testing.T, st *Store, k objKey, data []byte, off int64) {
	t.Helper()
	if err := st.writeObj(k, data, off); err != nil {
		t.Fatalf("write %d bytes at %d: %v", len(data), off, err)
	}
}

// readAll reads object k whole through readObj and compares with want.
func checkObj(t *testing.T, st *Store, k objKey, want []byte) {
	t.Helper()
	got := make([]byte, len(want)+100)
	n, err := st.readObj(k, got, 0)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("read %d bytes, want %d (or content differs)", n, len(want))
	}
	// And at odd offsets and lengths, crossing blocks.
	for _, r := range [][2]int{{1, 10}, {csBlock - 3, 7}, {csBlock + 5, 2*csBlock + 9}, {len(want) - 1, 1}} {
		if r[0] < 0 || r[0] >= len(want) {
			continue
		}
		p := make([]byte, r[1])
		n, err := st.readObj(k, p, int64(r[0]))
		if err != nil {
			t.Fatalf("read [%d,+%d): %v", r[0], r[1], err)
		}
		if !bytes.Equal(p[:n], want[r[0]:min(len(want), r[0]+r[1])]) {
			t.Fatalf("read [%d,+%d) differs", r[0], r[1])
		}
	}
	sr, err := st.scrub(k)
	if err != nil || len(sr.Bad) != 0 || sr.Size != uint64(len(want)) {
		t.Fatalf("scrub: %+v, %v", sr, err)
	}
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChecksumFlippedByteIsEBADMSG(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{5, 0}
	data := randBytes(3*csBlock+100, 1)
	mustWrite(t, st, k, data, 0)
	checkObj(t, st, k, data)
	f, err := os.OpenFile(st.path(k), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{data[csBlock+7] ^ 1}, csBlock+7)
	f.Close()
	p := make([]byte, 100)
	if _, err := st.readObj(k, p, csBlock); !isBadMsg(err) {
		t.Fatalf("read of a flipped block: %v, want EBADMSG", err)
	} else if want := "file 5 stripe 0: checksum mismatch at offset 65536"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	// Other blocks still read.
	if _, err := st.readObj(k, p, 0); err != nil {
		t.Fatalf("read of a good block: %v", err)
	}
	sr, err := st.scrub(k)
	if err != nil || len(sr.Bad) != 1 || sr.Bad[0] != (proto.Extent{Off: csBlock, Len: csBlock}) {
		t.Fatalf("scrub: %+v, %v; want block 1 bad", sr, err)
	}
	if st.csErrors.Load() < 2 {
		t.Fatalf("checksum errors counted: %d", st.csErrors.Load())
	}
	// Rewriting the block heals it.
	mustWrite(t, st, k, data[csBlock:2*csBlock], csBlock)
	checkObj(t, st, k, data)
}

func TestChecksumPartialWritesTruncatePunch(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{9, 2}
	var want []byte
	put := func(b []byte, off int) {
		mustWrite(t, st, k, b, int64(off))
		if len(want) < off+len(b) {
			want = append(want, make([]byte, off+len(b)-len(want))...)
		}
		copy(want[off:], b)
		checkObj(t, st, k, want)
	}
	put(randBytes(10, 2), 5)                // inside block 0
	put(randBytes(csBlock, 3), csBlock/2)   // across blocks 0 and 1
	put(randBytes(7, 4), 5*csBlock+3)       // far past the end: holes between
	put(randBytes(2*csBlock, 5), 2*csBlock) // whole blocks over holes
	trunc := func(n int) {
		if err := st.truncateObj(k, int64(n)); err != nil {
			t.Fatal(err)
		}
		if n < len(want) {
			want = want[:n]
		} else {
			want = append(want, make([]byte, n-len(want))...)
		}
		checkObj(t, st, k, want)
	}
	trunc(3*csBlock + 17) // cut mid-block
	trunc(7*csBlock + 1)  // grow
	put(randBytes(3, 6), 7*csBlock-1)
	trunc(csBlock)
	put(randBytes(4*csBlock, 7), 0)
	punch := func(off, n int) {
		if err := st.punch(&proto.Punch{Handle: k.ino, Index: k.idx, Off: uint64(off), Len: uint64(n)}); err != nil {
			t.Fatal(err)
		}
		clear(want[off:min(len(want), off+n)])
		checkObj(t, st, k, want)
	}
	punch(100, 10)                 // inside a block
	punch(csBlock-5, 2*csBlock+10) // whole block 1 and parts
	punch(3*csBlock+1, 10*csBlock) // to past the end
	if err := st.alloc(&proto.Alloc{Handle: k.ino, Index: k.idx, Off: 0, Len: 8 * csBlock}); err != nil {
		t.Fatal(err)
	}
	checkObj(t, st, k, want)
	// A write over a punched block.
	put(randBytes(10, 8), csBlock+3)
}

// A write whose data reached the disk but whose checksum did not (a crash
// between the two) is found on the next read.
func TestChecksumTornWriteDetected(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{11, 0}
	mustWrite(t, st, k, randBytes(2*csBlock, 9), 0)
	f, err := os.OpenFile(st.path(k), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The new data only (as writeObj would, before its sums).
	f.WriteAt(randBytes(100, 10), 10)
	// And a torn write into a hole: the block had no sum yet.
	f.WriteAt([]byte{1}, 5*csBlock)
	f.Close()
	if _, err := st.readObj(k, make([]byte, 10), 0); !isBadMsg(err) {
		t.Fatalf("torn write over data: %v, want EBADMSG", err)
	}
	if _, err := st.readObj(k, make([]byte, 10), 5*csBlock-5); !isBadMsg(err) {
		t.Fatalf("torn write into a hole: %v, want EBADMSG", err)
	}
	sr, err := st.scrub(k)
	if err != nil || len(sr.Bad) != 2 || sr.Bad[0].Off != 0 || sr.Bad[1].Off != 5*csBlock || sr.Bad[1].Len != 1 {
		t.Fatalf("scrub: %+v, %v", sr, err)
	}
}

// Objects written before checksums are served unchecked, and get
// checksums on their next write.
func TestChecksumLegacyObjectGetsSums(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{12, 0}
	data := randBytes(2*csBlock+5, 11)
	os.MkdirAll(dirOf(st.path(k)), 0o755)
	if err := os.WriteFile(st.path(k), data, 0o644); err != nil {
		t.Fatal(err)
	}
	checkObj(t, st, k, data)
	if _, err := os.Stat(sumPath(st.path(k))); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a read made a sidecar")
	}
	copy(data[3:], "abc")
	mustWrite(t, st, k, []byte("abc"), 3)
	checkObj(t, st, k, data)
	f, _ := os.OpenFile(st.path(k), os.O_RDWR, 0)
	f.WriteAt([]byte{data[2*csBlock] ^ 0xff}, 2*csBlock) // a block the write did not touch
	f.Close()
	if _, err := st.readObj(k, make([]byte, 5), 2*csBlock); !isBadMsg(err) {
		t.Fatalf("after the first write every block is checked: %v", err)
	}
	// Removal takes the sidecar too.
	if err := st.remove(k); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sumPath(st.path(k))); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("sidecar left after remove")
	}
}

// Writes to different bytes of one block, and reads of it, at once: the
// sums always match what a read sees (no read between a write's data and
// its sums, no lost sum update).
func TestChecksumConcurrentPartialWrites(t *testing.T) {
	st := openStore(t, t.TempDir())
	k := objKey{13, 0}
	mustWrite(t, st, k, make([]byte, 2*csBlock), 0)
	done := make(chan error, 6)
	for w := 0; w < 4; w++ {
		go func() {
			b := randBytes(100, uint64(w))
			for i := 0; i < 200; i++ {
				if err := st.writeObj(k, b, int64(w*1000+i*3)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for r := 0; r < 2; r++ {
		go func() {
			p := make([]byte, 8192)
			for i := 0; i < 200; i++ {
				if _, err := st.readObj(k, p, 0); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := 0; i < 6; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if sr, err := st.scrub(k); err != nil || len(sr.Bad) != 0 {
		t.Fatalf("scrub: %+v, %v", sr, err)
	}
}
