package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
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

// TestBackupRestoreRoundTrip: 10^4 files with layouts, modes, owners,
// sizes, times and an extended attribute, backed up online (the machine's
// framed snapshot, as `corral fs meta backup` fetches it), restored into a
// new member's directory, and read back the same; a bad file is refused
// and leaves nothing behind.
func TestBackupRestoreRoundTrip(t *testing.T) {
	files := 10000
	if testing.Short() {
		files = 1000
	}
	s := open(t, func(cfg Config) (*Service, error) { return Open(cfg) })
	ctx := context.Background()
	d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "site", Mode: 0o755})
	call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Attr.Ino, StripeSize: 128 << 10, StripeCount: 2})
	var wg sync.WaitGroup
	errs := make(chan error, files)
	sem := make(chan struct{}, 64) // concurrent creates share group commits
	for i := 0; i < files; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := s.Handle(ctx, &proto.Create{Parent: d.Attr.Ino, Name: fmt.Sprintf("f%05d", i), Mode: 0o600 | uint32(i%8)<<6, Uid: uint32(i), Gid: 7})
			if err != nil {
				errs <- err
				return
			}
			a := r.(*proto.AttrReply).Attr
			if _, err := s.Handle(ctx, &proto.SetAttr{Ino: a.Ino, Mask: proto.SetSize | proto.SetMtime, Size: uint64(i) * 4096, Mtime: int64(i) * 1e9}); err != nil {
				errs <- err
			}
			if i%100 == 0 {
				if _, err := s.Handle(ctx, &proto.SetXattr{Ino: a.Ino, Name: "user.n", Value: []byte(fmt.Sprint(i))}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := readAll(t, s, d.Attr.Ino)
	if len(want) != files {
		t.Fatalf("%d files listed, want %d", len(want), files)
	}
	dir := t.TempDir()
	bak := filepath.Join(dir, "meta.bak")
	f, err := os.Create(bak)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Machine().Snapshot(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	data := filepath.Join(dir, "member")
	if err := RestoreBackup(bak, data); err != nil {
		t.Fatal(err)
	}
	if err := RestoreBackup(bak, data); err == nil {
		t.Error("restore over an existing store succeeded")
	}
	r, err := Open(Config{Data: data, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Cluster() != s.Cluster() {
		t.Errorf("cluster ID %q after restore, want %q", r.Cluster(), s.Cluster())
	}
	got := readAll(t, r, d.Attr.Ino)
	if len(got) != len(want) {
		t.Fatalf("%d files after restore, want %d", len(got), len(want))
	}
	for name, a := range want {
		if b := got[name]; !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: %+v after restore, want %+v", name, b, a)
		}
	}
	for i := 0; i < files; i += 100 {
		a := got[fmt.Sprintf("f%05d", i)]
		x := call[*proto.XattrReply](t, r, &proto.GetXattr{Ino: a.Ino, Name: "user.n"})
		if string(x.Value) != fmt.Sprint(i) {
			t.Fatalf("xattr of f%05d: %q", i, x.Value)
		}
	}
	// New files still get inode numbers of their own.
	n := call[*proto.AttrReply](t, r, &proto.Mkdir{Parent: RootIno, Name: "after", Mode: 0o755})
	for _, a := range got {
		if a.Ino == n.Attr.Ino {
			t.Fatalf("inode %d given twice after restore", n.Attr.Ino)
		}
	}

	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a backup"), 0o644)
	if err := RestoreBackup(junk, filepath.Join(dir, "m2")); err == nil {
		t.Error("junk restored")
	}
	cut, _ := os.ReadFile(bak)
	os.WriteFile(junk, cut[:len(cut)/2], 0o644)
	if err := RestoreBackup(junk, filepath.Join(dir, "m3")); err == nil {
		t.Error("a backup cut in half restored")
	}
	for _, m := range []string{"m2", "m3"} {
		if _, err := os.Stat(filepath.Join(dir, m, "meta.db")); err == nil {
			t.Errorf("a refused restore left a store in %s", m)
		}
	}
}

// readAll lists directory ino whole: name -> attributes.
func readAll(t *testing.T, s *Service, ino uint64) map[string]proto.Attr {
	t.Helper()
	out := map[string]proto.Attr{}
	after := ""
	for {
		r := call[*proto.EntriesReply](t, s, &proto.Readdir{Ino: ino, After: after})
		for _, e := range r.Entries {
			out[e.Name] = e.Attr
			after = e.Name
		}
		if !r.More {
			return out
		}
	}
}

// countSM is a toy state machine for the Raft wiring test.
type countSM struct {
	mu      sync.Mutex
	applied uint64
}

func (c *countSM) Apply(first uint64, cmds [][]byte) ([][]byte, error) {
	c.mu.Lock()
	c.applied = first + uint64(len(cmds)) - 1
	c.mu.Unlock()
	return make([][]byte, len(cmds)), nil
}
func (c *countSM) Applied() uint64 { c.mu.Lock(); defer c.mu.Unlock(); return c.applied }
func (c *countSM) Snapshot(w io.Writer) error {
	_, err := w.Write(binary.LittleEndian.AppendUint64(nil, c.Applied()))
	return err
}
func (c *countSM) Restore(r io.Reader) error {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	c.mu.Lock()
	c.applied = binary.LittleEndian.Uint64(b[:])
	c.mu.Unlock()
	return nil
}

// wiring serves serveMembers of one engine on a proto server, the way
// Service.Handle passes ops 61-65 to handleMembers.
type wiring struct {
	eng atomic.Pointer[replog.Raft]
	sm  *countSM
	bk  *backups
}

func (w *wiring) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	e := w.eng.Load()
	if e == nil {
		return nil, errors.New("not started")
	}
	r, err, ok := serveMembers(ctx, e, w.sm, w.bk, req)
	if !ok {
		return nil, fmt.Errorf("unexpected %T", req)
	}
	return r, err
}

// TestMembersOverRaft: three Raft members whose traffic goes through
// serveMembers; membership, errors and backup over the wire.
func TestMembersOverRaft(t *testing.T) {
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec := proto.Security{Cred: cred}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := &proto.Pool{Security: sec}
	t.Cleanup(pool.Close)
	peers := map[uint64]string{}
	ws := map[uint64]*wiring{}
	for id := uint64(1); id <= 3; id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		w := &wiring{sm: &countSM{}, bk: &backups{dir: t.TempDir(), m: map[uint64]*backupFile{}}}
		srv := &proto.Server{Handler: w, Log: quiet, Security: sec}
		go srv.Serve(l)
		t.Cleanup(srv.Close)
		peers[id], ws[id] = l.Addr().String(), w
	}
	for id, w := range ws {
		e, err := replog.NewRaft(replog.RaftConfig{ID: id, Addr: peers[id], Peers: peers, Dir: t.TempDir(), SM: w.sm, Transport: pool, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		w.eng.Store(e)
		t.Cleanup(func() { e.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var leader uint64
	for leader == 0 && ctx.Err() == nil {
		r, err := pool.Call(ctx, peers[1], &proto.Members{})
		if err != nil {
			t.Fatal(err)
		}
		leader = r.(*proto.MembersReply).Leader
		time.Sleep(20 * time.Millisecond)
	}
	follower := leader%3 + 1
	for i := 0; i < 5; i++ {
		if _, err := ws[leader].eng.Load().Propose(ctx, []byte("c")); err != nil {
			t.Fatal(err)
		}
	}
	// A follower refuses a change and a backup, naming the leader.
	_, err = pool.Call(ctx, peers[follower], &proto.MemberChange{Change: proto.MemberRemove, ID: 3})
	if addr, ok := proto.LeaderHint(err); !ok || addr != peers[leader] {
		t.Fatalf("member change at a follower: %v", err)
	}
	if _, err := pool.Call(ctx, peers[follower], &proto.Backup{}); err == nil {
		t.Fatal("a follower took a backup")
	}
	// The leader takes a consistent backup over the wire.
	r, err := pool.Call(ctx, peers[leader], &proto.Backup{})
	if err != nil {
		t.Fatal(err)
	}
	br := r.(*proto.BackupReply)
	if !br.Done || binary.LittleEndian.Uint64(br.Data) != 5 {
		t.Fatalf("backup %+v", br)
	}
	// Remove the follower through the leader; the view shows two members.
	r, err = pool.Call(ctx, peers[leader], &proto.MemberChange{Change: proto.MemberRemove, ID: follower})
	if err != nil {
		t.Fatal(err)
	}
	if mr := r.(*proto.MembersReply); len(mr.Members) != 2 || mr.Leader != leader {
		t.Fatalf("after remove: %+v", mr)
	}
	_, err = pool.Call(ctx, peers[leader], &proto.MemberChange{Change: proto.MemberAdd, ID: 2, Addr: ""})
	if err == nil {
		t.Fatal("an add without an address succeeded")
	}
}
