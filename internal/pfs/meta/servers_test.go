package meta

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func register(t *testing.T, s *Service, m *proto.Register) (proto.ServerInfo, error) {
	t.Helper()
	r, err := s.Handle(context.Background(), m)
	if err != nil {
		return proto.ServerInfo{}, err
	}
	return r.(*proto.ServersReply).Servers[0], nil
}

func stateOf(t *testing.T, s *Service, id uint32) uint8 {
	t.Helper()
	for _, si := range call[*proto.ServersReply](t, s, &proto.Servers{}).Servers {
		if si.ID == id {
			return si.State
		}
	}
	t.Fatalf("no server %d", id)
	return 0
}

// A restarted metadata server places new files only on servers it has heard
// from since it started, and a stripe count above the usable servers is an
// error saying how many are usable (it used to become smaller silently).
func TestRestartedMetaPlacesOnHeardServersOnly(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		dir := t.TempDir()
		s, err := o(Config{Data: dir, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
			if _, err := register(t, s, &proto.Register{Addr: addr}); err != nil {
				t.Fatal(err)
			}
		}
		cluster := s.Cluster()
		s.Close()

		s, err = o(Config{Data: dir, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Cluster() != cluster {
			t.Fatalf("cluster ID changed across restart: %s -> %s", cluster, s.Cluster())
		}
		if st := stateOf(t, s, 1); st != proto.ServerDown {
			t.Fatalf("server 1 before any heartbeat: %s, want down", proto.StateName(st))
		}
		if _, err := register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: cluster}); err != nil {
			t.Fatal(err)
		}
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		if !slices.Equal(a.Servers, []uint32{2}) {
			t.Fatalf("new file on %v, want only server 2", a.Servers)
		}
		_, err = s.Handle(context.Background(), &proto.Create{Parent: RootIno, Name: "g", Mode: 0o644, StripeCount: 3})
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "only 1 I/O servers are usable") {
			t.Fatalf("stripe count 3 with 1 usable: %v", err)
		}
	})
}

// A server whose free space is under the reserve gets no new files;
// AllServers spans every usable one.
func TestFullServerGetsNoFiles(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s, err := o(Config{Data: t.TempDir(), Log: quiet, Reserve: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i, free := range []uint64{500, 50, 900} {
			if _, err := register(t, s, &proto.Register{Addr: "127.0.0.1:" + string(rune('1'+i)), Capacity: 1000, Free: free}); err != nil {
				t.Fatal(err)
			}
		}
		if st := stateOf(t, s, 2); st != proto.ServerFull {
			t.Fatalf("server 2 at 5%% free: %s, want full", proto.StateName(st))
		}
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: proto.AllServers}).Attr
		if !slices.Equal(slices.Sorted(slices.Values(a.Servers)), []uint32{1, 3}) {
			t.Fatalf("all servers: %v, want 1 and 3", a.Servers)
		}
	})
}

// Identity checks at registration: another cluster, another server's
// address, a known server back without its objects; then the deliberate
// replacement of its disk.
func TestRegisterIdentity(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o) // servers 1..3 at 127.0.0.1:1..3, nothing listening there
		c := s.Cluster()
		_, err := register(t, s, &proto.Register{ID: 1, Addr: "127.0.0.1:1", Cluster: "other"})
		if !errors.Is(err, syscall.EXDEV) || !strings.Contains(err.Error(), "other") || !strings.Contains(err.Error(), c) {
			t.Fatalf("other cluster: %v", err)
		}
		_, err = register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:1", Cluster: c})
		if !errors.Is(err, syscall.EEXIST) || !strings.Contains(err.Error(), "server 2") || !strings.Contains(err.Error(), "server 1") {
			t.Fatalf("address of another server: %v", err)
		}

		// Server 2 comes back with a wiped objects directory: lost.
		_, err = register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: c, Fresh: true})
		if !errors.Is(err, syscall.EAGAIN) || !strings.Contains(err.Error(), "corral fs servers replace 2") {
			t.Fatalf("wiped server: %v", err)
		}
		if st := stateOf(t, s, 2); st != proto.ServerLost {
			t.Fatalf("server 2: %s, want lost", proto.StateName(st))
		}
		for i := range 6 {
			a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f" + string(rune('a'+i)), Mode: 0o644}).Attr
			if slices.Contains(a.Servers, 2) {
				t.Fatalf("new file placed on lost server 2: %v", a.Servers)
			}
		}
		// An empty directory at server 3's address (server 3 does not answer
		// there): server 3 is lost too, the newcomer told what to do.
		_, err = register(t, s, &proto.Register{Addr: "127.0.0.1:3"})
		if !errors.Is(err, syscall.EAGAIN) || !strings.Contains(err.Error(), "server 3") {
			t.Fatalf("empty directory at server 3's address: %v", err)
		}
		if st := stateOf(t, s, 3); st != proto.ServerLost {
			t.Fatalf("server 3: %s, want lost", proto.StateName(st))
		}

		call[*proto.ServersReply](t, s, &proto.ReplaceServer{ID: 2})
		call[*proto.ServersReply](t, s, &proto.ReplaceServer{ID: 3})
		si, err := register(t, s, &proto.Register{ID: 2, Addr: "127.0.0.1:2", Cluster: c, Fresh: true})
		if err != nil || si.ID != 2 || si.Base < 8 {
			t.Fatalf("replaced server 2: %+v %v", si, err)
		}
		si, err = register(t, s, &proto.Register{Addr: "127.0.0.1:3"})
		if err != nil || si.ID != 3 || si.Base < 8 {
			t.Fatalf("replaced server 3 (empty directory): %+v %v", si, err)
		}
		if st := stateOf(t, s, 2); st != proto.ServerUp {
			t.Fatalf("server 2 after replace: %s", proto.StateName(st))
		}
		_, err = s.Handle(context.Background(), &proto.ReplaceServer{ID: 9})
		if !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("replace unknown: %v", err)
		}
	})
}

// Server records stored before states and bases still decode.
func TestOldServerRecordDecodes(t *testing.T) {
	e := proto.Enc{}
	e.U32(1)
	e.U32(7)
	e.Str("127.0.0.1:7410")
	e.U64(100)
	e.U64(50)
	e.I64(12345)
	si, err := decodeServer(e.B)
	if err != nil || si.ID != 7 || si.Addr != "127.0.0.1:7410" || si.Free != 50 || si.State != 0 {
		t.Fatalf("old record: %+v %v", si, err)
	}
	if _, err := decodeServer(e.B[:10]); err == nil {
		t.Fatal("truncated record decoded")
	}
}

func TestRefCheck(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 3}).Attr
		k := slices.Index(a.Servers, 2)
		r := call[*proto.RefsReply](t, s, &proto.RefCheck{Server: 2, Objs: []proto.ObjRef{
			{Ino: a.Ino, Index: uint32(k)}, {Ino: a.Ino, Index: uint32(k+1) % 3}, {Ino: a.Ino, Index: proto.AnyIndex}, {Ino: 999},
		}})
		if !slices.Equal(r.Used, []bool{true, false, true, false}) {
			t.Fatalf("used %v", r.Used)
		}
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "f"})
		r = call[*proto.RefsReply](t, s, &proto.RefCheck{Server: 2, Objs: []proto.ObjRef{{Ino: a.Ino, Index: uint32(k)}}})
		if r.Used[0] {
			t.Fatal("object of an unlinked file still referenced")
		}
	})
}

// A store from before identity checks may list two IDs at one address (an
// iod restarted on an empty directory got a second one). The server whose
// directory serves there now registers; the older ID is marked lost.
func TestDuplicateAddressFromOldStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range []proto.ServerInfo{{ID: 2, Addr: "127.0.0.1:5"}, {ID: 4, Addr: "127.0.0.1:5"}} {
		if err := s.persistServer(context.Background(), &si, false, false); err != nil {
			t.Fatal(err)
		}
	}
	c := s.Cluster()
	s.Close()
	s, err = Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := register(t, s, &proto.Register{ID: 4, Addr: "127.0.0.1:5", Cluster: c}); err != nil {
		t.Fatalf("server 4 at its recorded address: %v", err)
	}
	if st := stateOf(t, s, 2); st != proto.ServerLost {
		t.Fatalf("server 2 sharing its address: %s, want lost", proto.StateName(st))
	}
}

// Stored server records are decoded in two formats; no input may crash it.
func FuzzDecodeServer(f *testing.F) {
	f.Add(encodeServer(proto.ServerInfo{ID: 3, Addr: "127.0.0.1:1", State: proto.ServerLost, Base: 9}))
	e := proto.Enc{}
	e.U32(1)
	e.U32(7)
	e.Str("a:1")
	e.U64(1)
	e.U64(2)
	e.I64(3)
	f.Add(e.B)
	f.Fuzz(func(t *testing.T, b []byte) {
		si, err := decodeServer(b)
		if err != nil {
			return
		}
		// What decodes, in either format, survives a store and reload.
		back, err := decodeServer(encodeServer(si))
		if err != nil || back != si {
			t.Fatalf("%+v: reloaded as %+v, %v", si, back, err)
		}
	})
}
