package meta

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// TestRestoreRefusesBadImages: a cut, corrupt or foreign snapshot is
// refused with an error and the store in service stays whole and writable.
func TestRestoreRefusesBadImages(t *testing.T) {
	a := open(t, Open)
	for i := 0; i < 300; i++ {
		call[*proto.AttrReply](t, a, &proto.Mkdir{Parent: RootIno, Name: fmt.Sprintf("dir-%04d", i), Mode: 0o700})
	}
	var img bytes.Buffer
	if err := a.Machine().Snapshot(&img); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(img.Bytes())
	flipped[len(flipped)/2] ^= 0x40
	bad := map[string][]byte{
		"empty":     nil,
		"garbage":   bytes.Repeat([]byte("x"), 100000),
		"cut":       img.Bytes()[:img.Len()/2],
		"no crc":    img.Bytes()[:img.Len()-4],
		"bit flip":  flipped,
		"raw bbolt": img.Bytes()[len(snapMagic)+8 : img.Len()-4],
	}
	b := open(t, Open)
	call[*proto.AttrReply](t, b, &proto.Mkdir{Parent: RootIno, Name: "mine", Mode: 0o700})
	applied := b.Machine().Applied()
	for name, img := range bad {
		err := b.Machine().Restore(bytes.NewReader(img))
		if err == nil || !strings.Contains(err.Error(), "kept") {
			t.Errorf("%s image: restore gave %v, want an error saying the store was kept", name, err)
		}
		if got := b.Machine().Applied(); got != applied {
			t.Errorf("%s image: applied %d after a failed restore, want %d", name, got, applied)
		}
		call[*proto.AttrReply](t, b, &proto.Walk{Path: "/mine"})
	}
	call[*proto.AttrReply](t, b, &proto.Mkdir{Parent: RootIno, Name: "m2", Mode: 0o700})
	// A whole image still restores.
	if err := b.Machine().Restore(bytes.NewReader(img.Bytes())); err != nil {
		t.Fatal(err)
	}
	call[*proto.AttrReply](t, b, &proto.Walk{Path: "/dir-0299"})
}

// gate is a writer whose first Write waits for the test.
type gate struct {
	once          sync.Once
	entered, open chan struct{}
	bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered); <-g.open })
	return g.Buffer.Write(p)
}

// TestSnapshotStreamsWithoutReadTx: while a snapshot is being sent (the
// receiver slow), no read transaction of the store is open, and the image
// still restores.
func TestSnapshotStreamsWithoutReadTx(t *testing.T) {
	s := open(t, Open)
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o700})
	g := &gate{entered: make(chan struct{}), open: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- s.Machine().Snapshot(g) }()
	<-g.entered
	openTx := s.m.db.Stats().OpenTxN
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if openTx != 0 {
		t.Errorf("%d read transactions open while the snapshot was being sent", openTx)
	}
	b := open(t, Open)
	if err := b.Machine().Restore(&g.Buffer); err != nil {
		t.Fatal(err)
	}
	call[*proto.AttrReply](t, b, &proto.Walk{Path: "/d"})
}

// TestRestoreUnderLoad: restores while requests run neither race nor
// fail the restore.
func TestRestoreUnderLoad(t *testing.T) {
	a := open(t, Open)
	call[*proto.AttrReply](t, a, &proto.Mkdir{Parent: RootIno, Name: "kept", Mode: 0o700})
	var img bytes.Buffer
	if err := a.Machine().Snapshot(&img); err != nil {
		t.Fatal(err)
	}
	b := open(t, Open)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b.Handle(context.Background(), &proto.GetAttr{Ino: RootIno})
				b.Handle(context.Background(), &proto.Mkdir{Parent: RootIno, Name: fmt.Sprintf("g%d-%d", g, i), Mode: 0o700})
				b.Cluster()
				b.servers()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 10; i++ {
		if err := b.Machine().Restore(bytes.NewReader(img.Bytes())); err != nil {
			t.Fatal(err)
		}
	}
}
