package iod

import (
	"bytes"
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func blocks(t *testing.T, p string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// TestPunchAndAlloc: a punched range reads as zeros and its space is freed;
// Alloc reserves space without changing the size.
func TestPunchAndAlloc(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.registered.Store(true)
	ctx := context.Background()
	data := bytes.Repeat([]byte{0xab}, 4<<20)
	if _, err := s.Handle(ctx, &proto.Write{Handle: 7, Off: 0, Data: data}); err != nil {
		t.Fatal(err)
	}
	s.Handle(ctx, &proto.Sync{Handle: 7})
	before := blocks(t, s.path(objKey{ino: 7}))
	if _, err := s.Handle(ctx, &proto.Punch{Handle: 7, Off: 1 << 20, Len: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	if after := blocks(t, s.path(objKey{ino: 7})); after > before-(2<<20)/512 {
		t.Errorf("punching 2 MiB: %d blocks before, %d after", before, after)
	}
	r, err := s.Handle(ctx, &proto.Read{Handle: 7, Off: 0, Len: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	got := r.(*proto.DataReply).Data
	want := bytes.Clone(data)
	clear(want[1<<20 : 3<<20])
	if !bytes.Equal(got, want) {
		t.Fatal("punched object reads back wrong")
	}
	// Punching an object never written is a no-op.
	if _, err := s.Handle(ctx, &proto.Punch{Handle: 8, Off: 0, Len: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.path(objKey{ino: 8})); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("punch created an object: %v", err)
	}
	if _, err := s.Handle(ctx, &proto.Alloc{Handle: 9, Off: 0, Len: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(s.path(objKey{ino: 9}))
	if fi.Size() != 0 || blocks(t, s.path(objKey{ino: 9})) < (1<<20)/512 {
		t.Errorf("alloc: size %d, %d blocks", fi.Size(), blocks(t, s.path(objKey{ino: 9})))
	}
	for _, m := range []proto.Msg{&proto.Punch{Handle: 7, Off: 0, Len: 0}, &proto.Alloc{Handle: 7, Off: 1 << 62, Len: 1 << 62}} {
		if _, err := s.Handle(ctx, m); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", m, err)
		}
	}
}
