package meta

import (
	"bytes"
	"fmt"
	"strings"
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
