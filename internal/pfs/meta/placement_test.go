package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

// openServers opens a service with one registered I/O server per entry of
// regs (Addr filled in when empty).
func openServers(t *testing.T, o opener, regs ...proto.Register) *Service {
	t.Helper()
	s, err := o(Config{Data: t.TempDir(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i, m := range regs {
		if m.Addr == "" {
			m.Addr = fmt.Sprintf("127.0.0.1:%d", i+1)
		}
		if _, err := register(t, s, &m); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// layoutOf checks a file's replica layout and returns it.
func layoutOf(t *testing.T, a proto.Attr) layout.Layout {
	t.Helper()
	l := layout.Layout{StripeSize: a.StripeSize, Servers: a.Servers, Replicas: int(a.Replicas), Extra: a.Extra}
	if err := l.Validate(); err != nil {
		t.Fatalf("file %d: %v (servers %v, replicas %d, extra %v)", a.Ino, err, a.Servers, a.Replicas, a.Extra)
	}
	if a.Replicas == 0 {
		t.Fatalf("file %d: Replicas not set", a.Ino)
	}
	return l
}

// Replicas and placement are directory policies inherited field by field
// like the stripe layout; a create may ask for its own count; the default
// is 2 with at least 2 usable servers; bad counts are refused with errors
// that say the numbers.
func TestReplicaPolicy(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o) // 3 servers
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		if l := layoutOf(t, a); l.Copies() != 2 || len(a.Extra) != len(a.Servers) {
			t.Fatalf("default: %d replicas, extra %v for servers %v", a.Replicas, a.Extra, a.Servers)
		}
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 3})
		e := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: d.Ino, Name: "e", Mode: 0o755}).Attr
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: e.Ino, StripeCount: 2})
		f := call[*proto.AttrReply](t, s, &proto.Create{Parent: e.Ino, Name: "f", Mode: 0o644}).Attr
		if layoutOf(t, f); f.Replicas != 3 || len(f.Servers) != 2 || len(f.Extra) != 4 {
			t.Fatalf("inherited: %d replicas, servers %v, extra %v", f.Replicas, f.Servers, f.Extra)
		}
		g := call[*proto.AttrReply](t, s, &proto.Create{Parent: e.Ino, Name: "g", Mode: 0o644, Replicas: 1}).Attr
		if layoutOf(t, g); g.Replicas != 1 || len(g.Extra) != 0 {
			t.Fatalf("request's count: %d replicas, extra %v", g.Replicas, g.Extra)
		}
		// A stripe-only change keeps the replicas (0: keep).
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, StripeSize: 1 << 20})
		if h := call[*proto.AttrReply](t, s, &proto.Create{Parent: d.Ino, Name: "h", Mode: 0o644}).Attr; h.Replicas != 3 || h.StripeSize != 1<<20 {
			t.Fatalf("after a stripe change: %d replicas, stripe %d", h.Replicas, h.StripeSize)
		}
		errno(t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 6}, syscall.EINVAL)
		errno(t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 4}, syscall.EINVAL) // 3 servers
		errno(t, s, &proto.SetLayout{Ino: d.Ino, Placement: 3}, syscall.EINVAL)
		errno(t, s, &proto.Create{Parent: d.Ino, Name: "x", Replicas: 6}, syscall.EINVAL)
		_, err := s.Handle(context.Background(), &proto.Create{Parent: d.Ino, Name: "x", Replicas: 4})
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "4 replicas") || !strings.Contains(err.Error(), "only 3 I/O servers") {
			t.Fatalf("4 replicas on 3 servers: %v", err)
		}
		// The file's replicas are fixed: a later policy leaves it.
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: e.Ino, Replicas: 1})
		if f2 := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: f.Ino}).Attr; f2.Replicas != 3 || !slices.Equal(f2.Extra, f.Extra) {
			t.Fatalf("file changed with its directory: %+v", f2)
		}
	})
}

// With one usable server the default is 1 copy, not a refused create.
func TestDefaultOneReplicaOnOneServer(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := openServers(t, o, proto.Register{})
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		if layoutOf(t, a); a.Replicas != 1 || len(a.Extra) != 0 {
			t.Fatalf("one server: %d replicas, extra %v", a.Replicas, a.Extra)
		}
	})
}

// The copies of a column go to distinct zones when the zones allow, to
// distinct servers when they do not, and never fail for zones.
func TestReplicaZones(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := openServers(t, o, proto.Register{Zone: "a"}, proto.Register{Zone: "a"}, proto.Register{Zone: "b"},
			proto.Register{Zone: "b"}, proto.Register{Zone: "c"})
		zone := map[uint32]string{}
		for _, si := range call[*proto.ServersReply](t, s, &proto.Servers{}).Servers {
			zone[si.ID] = si.Zone
		}
		if len(zone) != 5 || zone[1] != "a" || zone[5] != "c" {
			t.Fatalf("servers reply lacks the zones: %v", zone)
		}
		for i := range 12 {
			r := uint32(2 + i%2) // 2 and 3 copies, 3 zones: always distinct
			a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: fmt.Sprint("f", i), Replicas: r, StripeCount: uint32(1 + i%5)}).Attr
			l := layoutOf(t, a)
			for k := range l.Servers {
				zs := map[string]bool{}
				for _, id := range l.Column(k) {
					zs[zone[id]] = true
				}
				if len(zs) != int(r) {
					t.Fatalf("file %d column %d: copies on %v share a zone", i, k, l.Column(k))
				}
			}
		}
		// 4 copies over 3 zones: distinct servers, every zone used.
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "four", Replicas: 4, StripeCount: 5}).Attr
		l := layoutOf(t, a)
		for k := range l.Servers {
			zs := map[string]bool{}
			for _, id := range l.Column(k) {
				zs[zone[id]] = true
			}
			if len(zs) != 3 {
				t.Fatalf("4 copies of column %d on %v use %d zones, want 3", k, l.Column(k), len(zs))
			}
		}
	})
}

// Every server gets a like share of first copies and of copies, with and
// without zones.
func TestReplicaSpread(t *testing.T) {
	for _, zones := range [][]string{{"", "", "", ""}, {"a", "a", "b", "b"}, {"a", "b", "b", "b"}} {
		t.Run(strings.Join(zones, ","), func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, o opener) {
				var regs []proto.Register
				for _, z := range zones {
					regs = append(regs, proto.Register{Zone: z})
				}
				s := openServers(t, o, regs...)
				firsts, copies := map[uint32]int{}, map[uint32]int{}
				const files = 24
				for i := range files {
					a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: fmt.Sprint("f", i), StripeCount: 1, Replicas: 2}).Attr
					l := layoutOf(t, a)
					firsts[a.Servers[0]]++
					for _, id := range l.Column(0) {
						copies[id]++
					}
				}
				for id := uint32(1); id <= 4; id++ {
					if firsts[id] != files/4 {
						t.Errorf("server %d has %d first copies of %d files, want %d", id, firsts[id], files, files/4)
					}
					// a, b, b, b: zone a's one server must take a copy of
					// every file that starts in b (18 of 24).
					if want := 2 * files / 4; zones[0] != "a" || zones[1] != "b" {
						if copies[id] < want-1 || copies[id] > want+1 {
							t.Errorf("server %d has %d copies, want about %d (all: %v)", id, copies[id], want, copies)
						}
					}
				}
				// Files over all servers: each server exactly R copies
				// (unless zones force more onto zone a's only server).
				for i := range 4 {
					if zones[0] == "a" && zones[1] == "b" {
						break
					}
					a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: fmt.Sprint("all", i), Replicas: 2}).Attr
					l := layoutOf(t, a)
					n := map[uint32]int{}
					for k := range l.Servers {
						for _, id := range l.Column(k) {
							n[id]++
						}
					}
					for id := uint32(1); id <= 4; id++ {
						if n[id] != 2 {
							t.Fatalf("file over all servers: server %d has %d copies, want 2 (%v / %v)", id, n[id], a.Servers, a.Extra)
						}
					}
				}
			})
		})
	}
}

// Whole-file placement: one column on the server with the most free space
// (then the least I/O), its copies on the next ones in other zones first.
func TestWholePlacement(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		const g = 1 << 30
		s := openServers(t, o,
			proto.Register{Capacity: 100 * g, Free: 50 * g, Zone: "a"},
			proto.Register{Capacity: 100 * g, Free: 90 * g, Load: 500, Zone: "a"},         // most free
			proto.Register{Capacity: 100 * g, Free: 80 * g, Zone: "a"},                    // next, same zone
			proto.Register{Capacity: 100 * g, Free: 70 * g, Zone: "b"},                    // less free, another zone
			proto.Register{Capacity: 100 * g, Free: 90*g + 100<<20, Load: 900, Zone: "b"}, // as free as 2 (GiB), more I/O
		)
		d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "w", Mode: 0o755}).Attr
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, Placement: proto.PlaceWhole, Replicas: 2})
		sub := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: d.Ino, Name: "sub", Mode: 0o755}).Attr
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: sub.Ino, Name: "f", Mode: 0o644}).Attr
		layoutOf(t, a)
		if !slices.Equal(a.Servers, []uint32{2}) || !slices.Equal(a.Extra, []uint32{5}) {
			t.Fatalf("whole file on %v + %v, want [2] + [5]", a.Servers, a.Extra)
		}
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 3})
		a = call[*proto.AttrReply](t, s, &proto.Create{Parent: sub.Ino, Name: "g", Mode: 0o644}).Attr
		if layoutOf(t, a); !slices.Equal(a.Servers, []uint32{2}) || !slices.Equal(a.Extra, []uint32{5, 3}) {
			t.Fatalf("whole file, 3 copies, on %v + %v, want [2] + [5 3]", a.Servers, a.Extra)
		}
		// Like servers take turns.
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 1})
		beat := &proto.Register{Capacity: 100 * g, Free: 90 * g, Load: 7, Cluster: s.Cluster()}
		for _, id := range []uint32{2, 5} {
			beat.ID, beat.Addr = id, fmt.Sprintf("127.0.0.1:%d", id)
			call[*proto.ServersReply](t, s, beat)
		}
		turns := map[uint32]int{}
		for i := range 4 {
			a := call[*proto.AttrReply](t, s, &proto.Create{Parent: sub.Ino, Name: fmt.Sprint("turn", i), Mode: 0o644}).Attr
			turns[a.Servers[0]]++
		}
		if turns[2] != 2 || turns[5] != 2 {
			t.Fatalf("4 whole files on 2 like servers went to %v", turns)
		}
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: d.Ino, Replicas: 3})
		// Striped below a directory that sets it again.
		call[*proto.AttrReply](t, s, &proto.SetLayout{Ino: sub.Ino, Placement: proto.PlaceStriped})
		a = call[*proto.AttrReply](t, s, &proto.Create{Parent: sub.Ino, Name: "h", Mode: 0o644}).Attr
		if layoutOf(t, a); len(a.Servers) != 5 || a.Replicas != 3 {
			t.Fatalf("striped below whole: servers %v, %d replicas", a.Servers, a.Replicas)
		}
	})
}

// RefCheck: object (ino, k) on server s is referenced when s holds any
// copy of column k; the removed file's reclaim record names every copy.
func TestRefCheckReplicas(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := openServers(t, o, proto.Register{}, proto.Register{}, proto.Register{}, proto.Register{})
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, StripeCount: 2, Replicas: 3}).Attr
		l := layoutOf(t, a)
		for id := uint32(1); id <= 4; id++ {
			objs := []proto.ObjRef{{Ino: a.Ino, Index: 0}, {Ino: a.Ino, Index: 1}, {Ino: a.Ino, Index: 2}, {Ino: a.Ino, Index: proto.AnyIndex}}
			r := call[*proto.RefsReply](t, s, &proto.RefCheck{Server: id, Objs: objs})
			want := []bool{slices.Contains(l.Column(0), id), slices.Contains(l.Column(1), id), false, false}
			want[3] = want[0] || want[1]
			if !slices.Equal(r.Used, want) {
				t.Fatalf("server %d (columns %v %v): used %v, want %v", id, l.Column(0), l.Column(1), r.Used, want)
			}
		}
		call[*proto.OK](t, s, &proto.Unlink{Parent: RootIno, Name: "f"})
		type obj struct{ id, index uint32 }
		var got, want []obj
		for k := range l.Servers {
			for _, id := range l.Column(k) {
				want = append(want, obj{id, uint32(k)})
			}
		}
		s.view(func(t tx) error {
			servers, cols := decodeReclaim(t.Bucket(bReclaim).Get(u64key(a.Ino)))
			for p, id := range servers {
				got = append(got, obj{id, reclaimIndex(p, len(servers), cols)})
			}
			return nil
		})
		cmpObj := func(x, y obj) int { return int(x.id)*10 + int(x.index) - int(y.id)*10 - int(y.index) }
		slices.SortFunc(got, cmpObj)
		slices.SortFunc(want, cmpObj)
		if !slices.Equal(got, want) {
			t.Fatalf("reclaim queue %v, want every copy %v", got, want)
		}
		// Progress keeps the positions' meaning (the column count).
		var left []uint32
		s.view(func(t tx) error {
			left, _ = decodeReclaim(t.Bucket(bReclaim).Get(u64key(a.Ino)))
			return nil
		})
		left[len(left)-1] = 0
		if _, err := s.propose(context.Background(), &command{Kind: cmdReclaim, Ino: a.Ino, Left: left, Pending: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.view(func(t tx) error {
			servers, cols := decodeReclaim(t.Bucket(bReclaim).Get(u64key(a.Ino)))
			if !slices.Equal(servers, left) || cols != 2 {
				return fmt.Errorf("after progress: %v cols %d, want %v cols 2", servers, cols, left)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// Records written before the replica fields still read: inodes (zero
// replica fields), server records with states, version 1 commands with a
// Create and a SetLayout, stored attribute replies, reclaim records.
func TestOldRecordsDecode(t *testing.T) {
	old := proto.Attr{Ino: 9, Mode: sIFREG | 0o644, Nlink: 1, Size: 5, StripeSize: 65536, StripeCount: 2, Servers: []uint32{3, 4}}
	e := proto.Enc{}
	old.EncodeV1(&e)
	e.Str("")
	e.U64(0)
	n, err := decodeInode(e.B)
	if err != nil || n.Ino != 9 || !slices.Equal(n.Servers, old.Servers) || n.Replicas != 0 || n.Extra != nil || n.Stale != 0 {
		t.Fatalf("old inode record: %+v %v", n, err)
	}
	// and the old-version encoding is what a newer record starts with
	now := &inode{Attr: old, Target: "t", Parent: 7}
	now.Replicas, now.Extra, now.Placement, now.Stale = 2, []uint32{4, 3}, proto.PlaceWhole, 3
	if n, err := decodeInode(now.encode()); err != nil || n.Replicas != 2 || !slices.Equal(n.Extra, []uint32{4, 3}) || n.Placement != 2 || n.Stale != 3 || n.Target != "t" || n.Parent != 7 {
		t.Fatalf("inode record round trip: %+v %v", n, err)
	}
	if _, err := decodeInode(now.encode()[:len(now.encode())-2]); err == nil {
		t.Fatal("a cut inode record decoded")
	}

	// Server record with state and base, before zones.
	e = proto.Enc{}
	e.U32(1)
	e.U32(7)
	e.Str("127.0.0.1:7410")
	e.U64(100)
	e.U64(50)
	e.I64(12345)
	e.U8(proto.ServerLost)
	e.U64(77)
	e.Str("")
	si, err := decodeServer(e.B)
	if err != nil || si.ID != 7 || si.State != proto.ServerLost || si.Base != 77 || si.Free != 50 {
		t.Fatalf("server record with states: %+v %v", si, err)
	}
	si = proto.ServerInfo{ID: 3, Addr: "h:1", Zone: "z", Load: 5, Base: 2}
	if got, err := decodeServer(encodeServer(si)); err != nil || got != si {
		t.Fatalf("server record round trip: %+v %v", got, err)
	}

	// A version 1 command: requests without replica fields.
	for _, req := range []proto.Msg{
		&proto.Create{Parent: 1, Name: "f", Mode: 0o644, StripeCount: 2},
		&proto.SetLayout{Ino: 4, StripeSize: 8192},
	} {
		b := encodeMsg(req)
		switch req.(type) {
		case *proto.Create:
			b = b[:len(b)-4]
		case *proto.SetLayout:
			b = b[:len(b)-5]
		}
		c := command{Kind: cmdReq, Now: 5, Picked: []uint32{1, 2}}
		raw := c.encode()
		e := proto.Enc{}
		e.U8(1)
		e.U8(uint8(cmdReq))
		e.I64(5)
		e.U64(0)
		e.U64(0)
		e.U64(0)
		e.U32(0)
		e.U32s([]uint32{1, 2})
		e.U32(0)
		e.Str("")
		e.Bytes(b)
		e.Bytes(nil)
		e.Bool(false)
		e.Bool(false)
		e.U64(0)
		e.U32s(nil)
		e.Bool(false)
		e.I64(0)
		e.U64s(nil)
		e.Str("")
		got, err := decodeCommand(e.B)
		if err != nil {
			t.Fatalf("version 1 command with %T: %v", req, err)
		}
		if fmt.Sprint(got.Req) != fmt.Sprint(req) || !slices.Equal(got.Picked, c.Picked) {
			t.Fatalf("version 1 command: %+v, want %+v", got.Req, req)
		}
		if _, err := decodeCommand(raw); err != nil {
			t.Fatalf("current command: %v", err)
		}
	}

	// A stored attribute reply (a retry's answer) from before.
	e = proto.Enc{B: make([]byte, 8)}
	e.U8(uint8(proto.OpAttr))
	old.EncodeV1(&e)
	e.Bool(true)
	_, m, err := decodeResult(e.B)
	if r, ok := m.(*proto.AttrReply); err != nil || !ok || r.Attr.Ino != 9 || !r.Created || !slices.Equal(r.Attr.Servers, old.Servers) {
		t.Fatalf("old stored reply: %+v %v", m, err)
	}

	// Reclaim record from before: servers only, object index = position.
	e = proto.Enc{}
	e.U32s([]uint32{5, 0, 6})
	servers, cols := decodeReclaim(e.B)
	if !slices.Equal(servers, []uint32{5, 0, 6}) || cols != 3 || reclaimIndex(2, 3, cols) != 2 {
		t.Fatalf("old reclaim record: %v cols %d", servers, cols)
	}
	// and one with copies: 2 columns, 3 replicas.
	servers, cols = decodeReclaim(encodeReclaim([]uint32{1, 2, 3, 4, 5, 6}, 2))
	var idx []uint32
	for p := range servers {
		idx = append(idx, reclaimIndex(p, len(servers), cols))
	}
	if !slices.Equal(idx, []uint32{0, 1, 0, 0, 1, 1}) {
		t.Fatalf("reclaim indices %v", idx)
	}
}

// A store written before replicas opens; its files read with zero replica
// fields and its directories' policies inherit the defaults.
func TestOldInodeInStore(t *testing.T) {
	// One engine: the record is rewritten under the store, which a replay
	// or Raft follower would rightly see as a divergence.
	func(o opener) {
		s := open(t, o)
		a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
		// Rewrite the record the old way, behind the service's back.
		if err := s.m.db.Update(func(btx *bolt.Tx) error {
			old := a
			e := proto.Enc{}
			old.EncodeV1(&e)
			e.Str("")
			e.U64(0)
			return btx.Bucket(bInode).Put(u64key(a.Ino), e.B)
		}); err != nil {
			t.Fatal(err)
		}
		g := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: a.Ino}).Attr
		if g.Replicas != 0 || len(g.Extra) != 0 || !slices.Equal(g.Servers, a.Servers) {
			t.Fatalf("old record read as %+v", g)
		}
		// RefCheck of an old record: first copies only.
		r := call[*proto.RefsReply](t, s, &proto.RefCheck{Server: a.Servers[0], Objs: []proto.ObjRef{{Ino: a.Ino, Index: 0}}})
		if !r.Used[0] {
			t.Fatal("old record's object not referenced")
		}
	}(func(cfg Config) (*Service, error) { return Open(cfg) })
}

// The servers reply carries each server's zone and load; a heartbeat
// updates the load, a new zone is stored.
func TestServersZoneAndLoad(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := openServers(t, o, proto.Register{Zone: "rack1", Load: 10})
		si := call[*proto.ServersReply](t, s, &proto.Servers{}).Servers[0]
		if si.Zone != "rack1" || si.Load != 10 {
			t.Fatalf("after registration: zone %q load %d", si.Zone, si.Load)
		}
		beat := &proto.Register{ID: si.ID, Addr: si.Addr, Cluster: s.Cluster(), Zone: "rack1", Load: 70}
		call[*proto.ServersReply](t, s, beat)
		if si = call[*proto.ServersReply](t, s, &proto.Servers{}).Servers[0]; si.Load != 70 {
			t.Fatalf("after a heartbeat: load %d, want 70", si.Load)
		}
		beat.Zone = "rack2"
		call[*proto.ServersReply](t, s, beat)
		var stored proto.ServerInfo
		s.view(func(t tx) error {
			stored, _ = decodeServer(t.Bucket(bIOD).Get([]byte{0, 0, 0, byte(si.ID)}))
			return nil
		})
		if stored.Zone != "rack2" {
			t.Fatalf("new zone not stored: record %+v", stored)
		}
	})
}
