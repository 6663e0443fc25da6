package meta

import (
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// TestApplyHaltsOnWhatItCannotApply: a command of a newer version, of an
// unknown kind or carrying an op this build does not know, and a command
// meeting a corrupt record, make Apply fail with the applied index and the
// store unchanged (never a reply while other members apply the command).
func TestApplyHaltsOnWhatItCannotApply(t *testing.T) {
	m, err := openMachine(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if _, err := m.Apply(1, [][]byte{(&command{Kind: cmdInit, Now: 1, Cluster: "c"}).encode()}); err != nil {
		t.Fatal(err)
	}
	mkdir := func() []byte {
		return (&command{Kind: cmdReq, Now: 2, Req: &proto.Mkdir{Parent: RootIno, Name: "x", Mode: 0o755}}).encode()
	}
	newer := mkdir()
	newer[0] = commandVersion + 1
	kind := (&command{Kind: 9, Now: 3}).encode()
	op := (&command{Kind: cmdReq, Now: 4, Req: &proto.Mkdir{Parent: RootIno, Name: "y"}}).encode()
	at := len(op) - len(encodeMsg(&proto.Mkdir{Parent: RootIno, Name: "y"}))
	for ; at > 0 && op[at] != uint8(proto.OpMkdir); at-- {
	}
	op[at] = 250 // an op unknown to this build
	notMut := (&command{Kind: cmdReq, Now: 5, Req: &proto.GetAttr{Ino: RootIno}}).encode()
	for name, bad := range map[string][]byte{"newer version": newer, "unknown kind": kind, "unknown op": op, "not a mutation": notMut} {
		if outs, err := m.Apply(2, [][]byte{mkdir(), bad}); err == nil {
			t.Errorf("%s: applied, replies %x", name, outs)
		}
		if m.Applied() != 1 {
			t.Fatalf("%s: applied %d after a failed batch, want 1", name, m.Applied())
		}
	}
	// A corrupt root record: the mkdir below it fails on this member only.
	m.db.Update(func(btx *bolt.Tx) error { return btx.Bucket(bInode).Put(u64key(RootIno), []byte{1}) })
	if _, err := m.Apply(2, [][]byte{mkdir()}); err == nil || m.Applied() != 1 {
		t.Fatalf("mkdir under a corrupt directory record: %v, applied %d; want an error, 1", err, m.Applied())
	}
}
