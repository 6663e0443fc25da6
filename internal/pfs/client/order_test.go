package client_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
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

// Two writers on disjoint byte sets of one File: back-pressure (over 256
// requests in flight) makes one wait while the other fills the buffer, which
// the first then overwrote (the other's acknowledged bytes never went out).
func TestConcurrentWritersKeepEveryByte(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	for round := 0; round < 5; round++ {
		p := fmt.Sprintf("/cw%d", round)
		f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{StripeSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		const size = 4 << 20
		const blk = 512
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), uint64(round)))
				// writer w owns blocks with index%2 == w; writes each in random order
				idx := r.Perm(size / blk / 2)
				for _, i := range idx {
					b := 2*i + w
					data := bytes.Repeat([]byte{byte('a' + w)}, blk)
					if _, err := f.WriteAt(data, int64(b*blk)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, size)
		for b := 0; b < size/blk; b++ {
			copy(want[b*blk:(b+1)*blk], bytes.Repeat([]byte{byte('a' + b%2)}, blk))
		}
		got := readFile(t, cl, p, rand.New(rand.NewPCG(1, 2)))
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: %s", round, firstDiff(got, want))
		}
	}
}

// An attribute snapshot taken before another handle's Sync, used to open a
// second handle, must not shrink the shared size (the first handle read EOF
// over data it wrote and synced).
func TestStaleAttrsDoNotShrinkOpenFile(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	f1, err := cl.CreatePath(ctx, "/stale", 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := cl.Stat(ctx, "/stale") // size 0
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{'x'}, 100000)
	mustWrite(t, f1, data, 0)
	if err := f1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	f2, err := cl.OpenAttr(ctx, a) // e.g. a concurrent open whose GetAttr raced the Sync
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	got := make([]byte, len(data))
	n, err := f1.ReadAt(got, 0)
	if n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("f1 reads back %d bytes (%v) of the %d it wrote and synced", n, err, len(data))
	}
	f1.Close()
}

// Sync must not return with a concurrent writer's bytes still buffered and
// the state marked clean (the next Close then skipped the fsync for them).
func TestSyncSendsConcurrentWrites(t *testing.T) {
	fsys := pfstest.Start(t, 3)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := ctxT(t)
	f, err := cl.CreatePath(ctx, "/dirty", 0o644, client.CreateOpts{StripeSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	big := bytes.Repeat([]byte{'a'}, 64<<10)
	for round := 0; round < 200; round++ {
		for i := 0; i < 32; i++ {
			f.WriteAt(big, int64(i)<<16)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 50; i++ {
				f.WriteAt([]byte("b"), 10<<20+int64(round*100+i)*2)
			}
		}()
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		pend, dirty := f.BufferState()
		<-done
		if pend > 0 && !dirty {
			t.Fatalf("round %d: Sync returned with %d bytes buffered and dirty=false", round, pend)
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
