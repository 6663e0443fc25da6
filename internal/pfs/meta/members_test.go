package meta

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	bolt "go.etcd.io/bbolt"
)

// blobSM is a state machine whose snapshot is a fixed image.
type blobSM struct {
	mu  sync.Mutex
	img []byte
}

func (b *blobSM) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	return make([][]byte, len(cmds)), nil
}
func (b *blobSM) Applied() uint64            { return 0 }
func (b *blobSM) Snapshot(w io.Writer) error { _, err := w.Write(b.img); return err }
func (b *blobSM) Restore(r io.Reader) error  { return nil }

func TestServeMembersAndBackup(t *testing.T) {
	img := bytes.Repeat([]byte("0123456789abcdef"), (backupChunk*2+100)/16)
	sm := &blobSM{img: img}
	eng := replog.NewSingle(sm, "127.0.0.1:7400")
	defer eng.Close()
	bk := &backups{dir: t.TempDir(), m: map[uint64]*backupFile{}}
	ctx := context.Background()

	r, err, ok := serveMembers(ctx, eng, sm, bk, &proto.Members{})
	mr, _ := r.(*proto.MembersReply)
	if !ok || err != nil || mr == nil || mr.Leader != 1 || len(mr.Members) != 1 || mr.Members[0].Addr != "127.0.0.1:7400" {
		t.Fatalf("members: %+v %v %v", r, err, ok)
	}
	if _, err, _ := serveMembers(ctx, eng, sm, bk, &proto.MemberChange{Change: proto.MemberAdd, ID: 2, Addr: "x:1"}); err == nil {
		t.Error("a single server accepted a member")
	}
	if _, err, ok := serveMembers(ctx, eng, sm, bk, &proto.Raft{}); !ok || err == nil {
		t.Error("raft traffic to a single server not refused")
	}
	if _, _, ok := serveMembers(ctx, eng, sm, bk, &proto.Statfs{}); ok {
		t.Error("claimed a request that is not its own")
	}

	// A backup streams the whole snapshot in chunks, then forgets it.
	var got []byte
	req := &proto.Backup{}
	for i := 0; i < 10; i++ {
		r, err, _ := serveMembers(ctx, eng, sm, bk, req)
		if err != nil {
			t.Fatal(err)
		}
		br := r.(*proto.BackupReply)
		if br.Offset != uint64(len(got)) || br.Size != uint64(len(img)) {
			t.Fatalf("chunk at %d of %d, have %d", br.Offset, br.Size, len(got))
		}
		got = append(got, br.Data...)
		if br.Done {
			break
		}
		req = &proto.Backup{Token: br.Token, Offset: uint64(len(got))}
	}
	if !bytes.Equal(got, img) {
		t.Fatalf("backup of %d bytes differs from the %d-byte snapshot", len(got), len(img))
	}
	if _, err, _ := serveMembers(ctx, eng, sm, bk, req); err == nil {
		t.Error("a finished backup is still served")
	}
	if left, _ := os.ReadDir(bk.dir); len(left) != 0 {
		t.Errorf("backup files left: %v", left)
	}
}

func TestRestoreBackup(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	db, err := bolt.Open(src, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err })
	db.Close()
	data := filepath.Join(dir, "member")
	if err := RestoreBackup(src, data); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "meta.db")); err != nil {
		t.Fatal(err)
	}
	if err := RestoreBackup(src, data); err == nil {
		t.Error("restore over an existing store succeeded")
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a backup"), 0o644)
	if err := RestoreBackup(junk, filepath.Join(dir, "m2")); err == nil {
		t.Error("junk restored")
	}
	if _, err := os.Stat(filepath.Join(dir, "m2", "meta.db")); err == nil {
		t.Error("junk left a store")
	}
}
