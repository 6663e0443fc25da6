package iod

import (
	"bytes"
	"context"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/powercut"
)

// A Sync that runs while another request creates the object (two writers
// of one object: a client and a heal, or two clients) must not forget the
// creation it did not see: the creator's own Sync then skips the bucket
// directory, and the acknowledged object's name is lost at a power cut.
func TestSyncKeepsACreationItDidNotSee(t *testing.T) {
	powercut.Need(t)
	d, err := powercut.Mount(t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := OpenStore(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	s.registered.Store(true)
	ctx := context.Background()
	k := objKey{ino: 42}
	data := bytes.Repeat([]byte("acknowledged"), 1000)
	// Another object first, so that the bucket exists and is durable: only
	// the object's own entry is at stake.
	if _, err := s.Handle(ctx, &proto.Write{Handle: 42 + 256, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Handle(ctx, &proto.Sync{Handle: 42 + 256}); err != nil {
		t.Fatal(err)
	}
	syncReadHook = func(h objKey) {
		if h != k {
			return
		}
		syncReadHook = nil
		// The creating write lands while the first Sync runs.
		if _, err := s.Handle(ctx, &proto.Write{Handle: k.ino, Data: data}); err != nil {
			t.Error(err)
		}
	}
	defer func() { syncReadHook = nil }()
	if _, err := s.Handle(ctx, &proto.Sync{Handle: k.ino}); err != nil {
		t.Fatal(err)
	}
	// The writer's own Sync: after it, the write is acknowledged.
	if _, err := s.Handle(ctx, &proto.Sync{Handle: k.ino}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := d.Cut(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.registered.Store(true)
	r, err := s.Handle(ctx, &proto.Read{Handle: k.ino, Len: uint32(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*proto.DataReply).Data; !bytes.Equal(got, data) {
		t.Fatalf("after a power cut the acknowledged object reads %d bytes, want the %d written", len(got), len(data))
	}
}
