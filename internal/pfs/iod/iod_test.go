package iod

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
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/meta"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testSec is the cluster secret of the metadata servers these tests start
// (two of them share it, so that the cluster check is what refuses).
var testSec = func() proto.Security {
	cred, err := proto.NewSecret()
	if err != nil {
		panic(err)
	}
	return proto.Security{Cred: cred}
}()

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.log = quiet
	t.Cleanup(func() { st.Close() })
	return st
}

func do(t *testing.T, st *Store, req proto.Msg) (proto.Msg, error) {
	t.Helper()
	return st.Handle(context.Background(), req)
}

func read(t *testing.T, st *Store, h uint64, idx uint32) []byte {
	t.Helper()
	r, err := do(t, st, &proto.Read{Handle: h, Index: idx, Len: 100})
	if err != nil {
		t.Fatalf("read %d.%d: %v", h, idx, err)
	}
	return bytes.Clone(r.(*proto.DataReply).Data)
}

// Two stripe units of one file on one server (what two server IDs on one
// data directory used to produce) are two objects, not one.
func TestObjectsNamedByIndex(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.registered.Store(true)
	for i, data := range []string{"unit-zero", "unit-one"} {
		if _, err := do(t, st, &proto.Write{Handle: 5, Index: uint32(i), Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, st, 5, 0); string(got) != "unit-zero" {
		t.Fatalf("index 0 reads %q", got)
	}
	if got := read(t, st, 5, 1); string(got) != "unit-one" {
		t.Fatalf("index 1 reads %q", got)
	}
	if _, err := do(t, st, &proto.Remove{Handle: 5, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, st, 5, 0); string(got) != "unit-zero" {
		t.Fatalf("removing index 1 touched index 0: %q", got)
	}
}

// Until meta accepts the directory, nothing is answered from it: a read of
// an object the directory lacks must not come back as a hole.
func TestUnregisteredStoreRefuses(t *testing.T) {
	st := openStore(t, t.TempDir())
	if _, err := do(t, st, &proto.Read{Handle: 5, Len: 10}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read before registration: %v, want EIO", err)
	}
	if _, err := do(t, st, &proto.Identify{}); err != nil {
		t.Fatalf("identify before registration: %v", err)
	}
}

// On a store that replaced a lost disk, a missing object of an older file is
// lost data (EIO for reads, writes and truncates), one of a newer file a hole.
func TestMissingObjectBelowBaseIsEIO(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.ident = identity{cluster: "c", id: 1, base: 10}
	st.registered.Store(true)
	for _, req := range []proto.Msg{
		&proto.Read{Handle: 5, Index: 1, Len: 10},
		&proto.Write{Handle: 5, Index: 1, Data: []byte("x")},
		&proto.Truncate{Handle: 5, Index: 1, Size: 10},
		&proto.ObjStat{Handle: 5, Index: 1},
	} {
		if _, err := do(t, st, req); !errors.Is(err, syscall.EIO) {
			t.Errorf("%T of a lost object: %v, want EIO", req, err)
		}
	}
	if got := read(t, st, 12, 0); len(got) != 0 {
		t.Fatalf("hole of a newer file reads %q", got)
	}
	// Truncating a lost object to nothing makes the file whole again.
	if _, err := do(t, st, &proto.Truncate{Handle: 5, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, st, 5, 1); len(got) != 0 {
		t.Fatalf("after truncate to 0: %q", got)
	}
	if _, err := do(t, st, &proto.Write{Handle: 5, Index: 1, Data: []byte("new")}); err != nil {
		t.Fatal(err)
	}
}

func startMeta(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- meta.Run(ctx, "127.0.0.1:0", meta.Config{Data: dir, Log: quiet, Security: testSec}, func(a string) { addrc <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrc:
		return a
	case err := <-done:
		t.Fatal(err)
	}
	return ""
}

// A data directory from before identities (DATA/id, objects without a stripe
// index) is adopted at its first registration, and its objects still read.
func TestLegacyDataDirAdopted(t *testing.T) {
	metaAddr := startMeta(t, t.TempDir())
	pool := proto.Pool{Security: testSec}
	defer pool.Close()
	ctx := context.Background()
	const addr = "127.0.0.1:9" // nothing answers there: only a name
	r, err := pool.Call(ctx, metaAddr, &proto.Register{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	id := r.(*proto.ServersReply).Servers[0].ID

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "id"), binary.BigEndian.AppendUint32(nil, id), 0o644)
	os.MkdirAll(filepath.Join(dir, "objects", "05"), 0o755)
	os.WriteFile(filepath.Join(dir, "objects", "05", "5"), []byte("legacy"), 0o644)

	st := openStore(t, dir)
	if _, fresh := st.identity(); fresh {
		t.Fatal("legacy directory taken as empty")
	}
	if got, err := st.register(ctx, client.NewLeader(&pool, metaAddr, 0), addr); err != nil || got != id {
		t.Fatalf("register: id %d err %v, want %d", got, err, id)
	}
	if got := read(t, st, 5, 1); string(got) != "legacy" {
		t.Fatalf("legacy object as stripe 1 reads %q", got)
	}
	st.Close()

	st = openStore(t, dir)
	ident, fresh := st.identity()
	if fresh || ident.id != id || ident.cluster == "" || !ident.legacy {
		t.Fatalf("after adoption: %+v fresh %v", ident, fresh)
	}
	st.Close()

	// Its objects directory wiped, the server is refused (and marked lost).
	os.RemoveAll(filepath.Join(dir, "objects"))
	st = openStore(t, dir)
	if _, fresh := st.identity(); !fresh {
		t.Fatal("wiped objects directory not noticed")
	}
	if _, err := st.register(ctx, client.NewLeader(&pool, metaAddr, 0), addr); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("register with wiped objects: %v, want EAGAIN", err)
	}
	r, err = pool.Call(ctx, metaAddr, &proto.Servers{})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.(*proto.ServersReply).Servers[0]; s.State != proto.ServerLost {
		t.Fatalf("server state %s, want lost", proto.StateName(s.State))
	}
	// Replaced deliberately, the empty directory is accepted with a base.
	if _, err := pool.Call(ctx, metaAddr, &proto.ReplaceServer{ID: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.register(ctx, client.NewLeader(&pool, metaAddr, 0), addr); err != nil {
		t.Fatalf("register after replace: %v", err)
	}
	if ident, _ := st.identity(); ident.base < 2 || ident.legacy {
		t.Fatalf("replaced store: %+v", ident)
	}
	if _, err := do(t, st, &proto.Read{Handle: 1, Index: 0, Len: 10}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of an older file on the replaced store: %v, want EIO", err)
	}
}

// A data directory of another cluster is refused, naming both clusters.
func TestOtherClusterRefused(t *testing.T) {
	a, b := startMeta(t, t.TempDir()), startMeta(t, t.TempDir())
	pool := proto.Pool{Security: testSec}
	defer pool.Close()
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	if _, err := st.register(ctx, client.NewLeader(&pool, a, 0), "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	ident, _ := st.identity()
	_, err := st.register(ctx, client.NewLeader(&pool, b, 0), "127.0.0.1:9")
	if !errors.Is(err, syscall.EXDEV) || !fatalRegister(err) || !bytes.Contains([]byte(err.Error()), []byte(ident.cluster)) {
		t.Fatalf("register with another cluster's meta: %v", err)
	}
}

func TestParseObject(t *testing.T) {
	for name, want := range map[string]proto.ObjRef{"5": {Ino: 5}, "5.2": {Ino: 5, Index: 2}} {
		if got, ok := parseObject(name, false); !ok || got != want {
			t.Errorf("%q: %+v %v", name, got, ok)
		}
	}
	if got, _ := parseObject("5", true); got.Index != proto.AnyIndex {
		t.Errorf("legacy name: %+v", got)
	}
	for _, bad := range []string{"", "0", "05", "5.0", "5.", "x", "5.2.1", "STORE", "5.tmp"} {
		if _, ok := parseObject(bad, false); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseIdentity(f *testing.F) {
	f.Add([]byte("cluster abc\nserver 3\nbase 10\nlegacy 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := parseIdentity(b)
		if err != nil {
			return
		}
		back, err := parseIdentity(id.text(true))
		if err != nil || back != id {
			if !bytes.ContainsAny([]byte(id.cluster), " \n\r") {
				t.Fatalf("%+v does not survive a round trip: %+v %v", id, back, err)
			}
		}
	})
}

// notLeader is a metadata member that does not lead: it names the leader.
type notLeader struct{ leader string }

func (n notLeader) Handle(context.Context, proto.Msg) (proto.Msg, error) {
	return nil, proto.NotLeader(n.leader)
}

// Registration goes to the leader: a member that does not lead names it,
// and heartbeats keep going to it.
func TestRegisterFollowsLeader(t *testing.T) {
	metaAddr := startMeta(t, t.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	follower := &proto.Server{Handler: notLeader{metaAddr}, Security: testSec}
	go follower.Serve(l)
	t.Cleanup(follower.Close)
	pool := proto.Pool{Security: testSec}
	defer pool.Close()
	lead := client.NewLeader(&pool, l.Addr().String()+","+metaAddr, 0)
	st := openStore(t, t.TempDir())
	defer st.Close()
	ctx := context.Background()
	id, err := st.register(ctx, lead, "127.0.0.1:9")
	if err != nil || id == 0 {
		t.Fatalf("register through a follower: id %d, %v", id, err)
	}
	if lead.Current() != metaAddr {
		t.Fatalf("following %s, want the leader %s", lead.Current(), metaAddr)
	}
	if again, err := st.register(ctx, lead, "127.0.0.1:9"); err != nil || again != id {
		t.Fatalf("heartbeat: id %d, %v; want %d", again, err, id)
	}
}

// An object past MaxObjectSize is EFBIG, for writes and for truncates
// (a size past 2^63 must not arrive as a negative length).
func TestObjectPastLimitIsEFBIG(t *testing.T) {
	st := openStore(t, t.TempDir())
	st.registered.Store(true)
	for _, req := range []proto.Msg{
		&proto.Write{Handle: 5, Off: layout.MaxObjectSize, Data: []byte("x")},
		&proto.Write{Handle: 5, Off: 1 << 63, Data: []byte("x")},
		&proto.Truncate{Handle: 5, Size: layout.MaxObjectSize + 1},
		&proto.Truncate{Handle: 5, Size: 1 << 63},
		&proto.Truncate{Handle: 5, Size: 1<<64 - 1},
	} {
		if _, err := do(t, st, req); !errors.Is(err, syscall.EFBIG) {
			t.Errorf("%T %+v: %v, want EFBIG", req, req, err)
		}
	}
}

// modeOf is p's permission bits.
func modeOf(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// Data at rest is the owner's only: objects, sidecars, identity and LOCK
// 0600 in 0700 directories, buckets made at start; an older install's
// 0755 directories and 0644 top files are tightened when it opens.
func TestDataModesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	st := openStore(t, dir)
	st.registered.Store(true)
	if _, err := do(t, st, &proto.Write{Handle: 0x105, Data: []byte("secret")}); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", p, fi.Mode().Perm(), want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for b := range 256 {
		if !exists(filepath.Join(dir, "objects", fmt.Sprintf("%02x", b))) {
			t.Fatalf("bucket %02x not made at start", b)
		}
	}
	st.Close()

	// An older install: open modes everywhere.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if fi.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	st2, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	for _, p := range []string{dir, filepath.Join(dir, "objects"), filepath.Join(dir, "objects", "05")} {
		if m := modeOf(t, p); m != 0o700 {
			t.Errorf("%s after reopening: %#o, want 0700", p, m)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if p := filepath.Join(dir, e.Name()); e.Type().IsRegular() && modeOf(t, p) != 0o600 {
			t.Errorf("%s after reopening: %#o, want 0600", p, modeOf(t, p))
		}
	}
}
