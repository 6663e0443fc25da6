package client_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestOverlappingWritesApplyInOrder is the reproduction of issue 11: the
// kernel sends a write whose first page is partial as two FUSE writes; the
// second part joined the buffer opened by the first and was sent while an
// older overlapping write was still in flight, so either could land last.
func TestOverlappingWritesApplyInOrder(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	const aOff, aEnd, bOff, bEnd = 0x6f68, 0xde9b, 0x2ee1, 0x117e1
	a := bytes.Repeat([]byte{'A'}, aEnd-aOff)
	b := bytes.Repeat([]byte{'B'}, bEnd-bOff)
	for round := 0; round < 40; round++ {
		p := fmt.Sprintf("/split%d", round)
		f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, f, a, aOff)
		// B as the kernel splits it: up to the page boundary, then the rest.
		split := (bOff + 4095) &^ 4095
		mustWrite(t, f, b[:split-bOff], bOff)
		mustWrite(t, f, b[split-bOff:], split)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, bEnd)
		copy(want[aOff:], a)
		copy(want[bOff:], b)
		if got := readFile(t, cl, p, rand.New(rand.NewPCG(1, uint64(round)))); !bytes.Equal(got, want) {
			t.Fatalf("round %d: %s", round, firstDiff(got, want))
		}
	}
}

// TestOverlappingWritesSeveralHandles writes random overlapping ranges
// through several handles of one file, in a known order, against a model:
// the write issued later wins whichever handle carried it.
func TestOverlappingWritesSeveralHandles(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, stripe := range []uint32{4 << 10, 64 << 10, 1 << 20} {
		p := fmt.Sprintf("/handles%d", stripe)
		f0, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{StripeSize: stripe})
		if err != nil {
			t.Fatal(err)
		}
		files := []*client.File{f0}
		for i := 0; i < 2; i++ {
			f, err := cl.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		const size = 1 << 20
		model := make([]byte, 0, size)
		for op := 0; op < 600; op++ {
			off := r.IntN(size - 1)
			n := 1 + r.IntN(min(size-off, 96<<10))
			data := randBytes(r, n)
			mustWrite(t, files[r.IntN(len(files))], data, off)
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], data)
			if op%150 == 149 { // a read through another handle sees it all
				got := make([]byte, n)
				if _, err := files[r.IntN(len(files))].ReadAt(got, int64(off)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, model[off:off+n]) {
					t.Fatalf("stripe %d op %d: read through another handle: %s", stripe, op, firstDiff(got, model[off:off+n]))
				}
			}
		}
		for _, f := range files {
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := files[0].Close(); err == nil {
			t.Fatal("second Close of a File succeeded")
		}
		if got := readFile(t, cl, p, r); !bytes.Equal(got, model) {
			t.Fatalf("stripe %d: %s", stripe, firstDiff(got, model))
		}
	}
}

func mustWrite(t *testing.T, f *client.File, p []byte, off int) {
	t.Helper()
	if _, err := f.WriteAt(p, int64(off)); err != nil {
		t.Fatal(err)
	}
}

func firstDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("size %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			j := i
			for j < len(got) && got[j] != want[j] {
				j++
			}
			return fmt.Sprintf("bytes [%#x, %#x) differ: got %q..., want %q...", i, j, got[i:min(j, i+8)], want[i:min(j, i+8)])
		}
	}
	return "equal"
}
