package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"reflect"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	bolt "go.etcd.io/bbolt"
)

// TestIdemAppliesOnce: a request sent again with the same client ID and
// sequence number (a retry after a lost reply) gets the first reply and
// changes nothing more.
func TestIdemAppliesOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		const client = 0xC0FFEE
		seq := uint64(0)
		twice := func(req proto.Msg) proto.Msg {
			t.Helper()
			seq++
			var first proto.Msg
			for i := 0; i < 2; i++ {
				r, err := s.Handle(context.Background(), &proto.Idem{Client: client, Seq: seq, Req: req})
				if err != nil {
					t.Fatalf("%T try %d: %v", req, i+1, err)
				}
				if i == 0 {
					first = r
				} else if !reflect.DeepEqual(r, first) {
					t.Fatalf("%T: retry answered %+v, first %+v", req, r, first)
				}
			}
			return first
		}
		f := twice(&proto.Create{Parent: RootIno, Name: "f", Mode: 0o644, Excl: true}).(*proto.AttrReply)
		if !f.Created {
			t.Fatal("create: retry lost Created")
		}
		d := twice(&proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).(*proto.AttrReply)
		if l := twice(&proto.Link{Ino: f.Attr.Ino, Parent: d.Attr.Ino, Name: "g"}).(*proto.AttrReply); l.Attr.Nlink != 2 {
			t.Fatalf("link applied twice? nlink %d", l.Attr.Nlink)
		}
		twice(&proto.SetAttr{Ino: f.Attr.Ino, Mask: proto.SetMode, Mode: 0o600})
		twice(&proto.Rename{OldParent: RootIno, OldName: "f", NewParent: d.Attr.Ino, NewName: "h"})
		twice(&proto.Unlink{Parent: d.Attr.Ino, Name: "g"})
		if n := call[*proto.AttrReply](t, s, &proto.Lookup{Parent: d.Attr.Ino, Name: "h"}).Attr; n.Nlink != 1 || n.Mode&0o777 != 0o600 {
			t.Fatalf("after the retried requests: %+v", n)
		}
		if r := call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: RootIno}).Attr; r.Nlink != 3 {
			t.Fatalf("root nlink %d, want 3 (one mkdir)", r.Nlink)
		}
		// Without an ID the same create is a new request: EEXIST.
		errno(t, s, &proto.Create{Parent: d.Attr.Ino, Name: "h", Excl: true}, syscall.EEXIST)
		// A refusal is a reply too: the retry gets the same errno.
		for i := 0; i < 2; i++ {
			_, err := s.Handle(context.Background(), &proto.Idem{Client: client, Seq: 100, Req: &proto.Rmdir{Parent: RootIno, Name: "d"}})
			if !errorsIs(err, syscall.ENOTEMPTY) {
				t.Fatalf("rmdir try %d: %v", i+1, err)
			}
		}
		// Reads and registrations take no ID.
		errno(t, s, &proto.Idem{Client: client, Seq: 101, Req: &proto.GetAttr{Ino: RootIno}}, syscall.EINVAL)
		errno(t, s, &proto.Idem{Seq: 102, Req: &proto.Unlink{Parent: RootIno, Name: "x"}}, syscall.EINVAL)
	})
}

// storedSeqs lists the sequence numbers the store keeps replies of.
func storedSeqs(t *testing.T, s *Service, client uint64) []uint64 {
	var out []uint64
	s.m.view(func(btx *bolt.Tx) error {
		c := btx.Bucket(bClient).Cursor()
		p := u64key(client)
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			out = append(out, binary.BigEndian.Uint64(k[8:]))
		}
		return nil
	})
	return out
}

// TestIdemDoneAndExpiry: Done forgets the replies the client has; an idle
// client's are forgotten by the leader's expiry.
func TestIdemDoneAndExpiry(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		s := open(t, o)
		ctx := context.Background()
		for seq := uint64(1); seq <= 5; seq++ {
			if _, err := s.Handle(ctx, &proto.Idem{Client: 7, Seq: seq, Done: 1, Req: &proto.RenewOrphans{}}); err != nil {
				t.Fatal(err)
			}
		}
		s.Handle(ctx, &proto.Idem{Client: 8, Seq: 1, Req: &proto.RenewOrphans{}})
		if got := storedSeqs(t, s, 7); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5}) {
			t.Fatalf("stored %v", got)
		}
		if _, err := s.Handle(ctx, &proto.Idem{Client: 7, Seq: 6, Done: 4, Req: &proto.RenewOrphans{}}); err != nil {
			t.Fatal(err)
		}
		if got := storedSeqs(t, s, 7); !reflect.DeepEqual(got, []uint64{4, 5, 6}) {
			t.Fatalf("after Done 4: stored %v, want 4 5 6", got)
		}
		cut := time.Now().UnixNano()
		s.Handle(ctx, &proto.Idem{Client: 8, Seq: 2, Req: &proto.RenewOrphans{}}) // 8 stays active
		if err := s.expireClients(ctx, cut); err != nil {
			t.Fatal(err)
		}
		if got := storedSeqs(t, s, 7); len(got) != 0 {
			t.Fatalf("idle client's replies kept: %v", got)
		}
		if got := storedSeqs(t, s, 8); len(got) != 2 {
			t.Fatalf("active client's replies: %v", got)
		}
	})
}

// TestSnapshotRestore: a snapshot taken from one store replaces another's
// state, applied index included.
func TestSnapshotRestore(t *testing.T) {
	forEachEngine(t, func(t *testing.T, o opener) {
		a := open(t, o)
		call[*proto.AttrReply](t, a, &proto.Mkdir{Parent: RootIno, Name: "kept", Mode: 0o700})
		var img bytes.Buffer
		if err := a.Machine().Snapshot(&img); err != nil {
			t.Fatal(err)
		}
		b := open(t, o)
		call[*proto.AttrReply](t, b, &proto.Mkdir{Parent: RootIno, Name: "lost", Mode: 0o700})
		restore := b.Machine().Restore
		if r, ok := b.Engine().(*replayed); ok {
			restore = r.tee.Restore // the engine restores both of its stores
		}
		if err := restore(&img); err != nil {
			t.Fatal(err)
		}
		if b.Machine().Applied() != a.Machine().Applied() {
			t.Fatalf("applied %d after restore, want %d", b.Machine().Applied(), a.Machine().Applied())
		}
		call[*proto.AttrReply](t, b, &proto.Walk{Path: "/kept"})
		errno(t, b, &proto.Walk{Path: "/lost"}, syscall.ENOENT)
		if b.Cluster() != a.Cluster() || len(b.servers()) != 3 {
			t.Fatalf("restored cluster %s servers %d, want %s and 3", b.Cluster(), len(b.servers()), a.Cluster())
		}
		call[*proto.AttrReply](t, b, &proto.Mkdir{Parent: RootIno, Name: "after", Mode: 0o700})
	})
}

// follower is an engine whose member does not lead: member 2 at
// 127.0.0.2:7000 does.
type follower struct {
	*replog.Single
	barrier error
	lead    atomic.Bool // leads after all (an election won)
}

func (f *follower) Status() replog.Status {
	st := f.Single.Status()
	if f.lead.Load() {
		return st
	}
	st.Leader = 2
	st.Members = append(st.Members, replog.Member{ID: 2, Addr: "127.0.0.2:7000"})
	return st
}

func (f *follower) ReadBarrier(ctx context.Context) error { return f.barrier }

// TestFollowerSendsToLeader: a member that does not lead answers reads from
// its store and sends mutations and I/O server requests to the leader.
func TestFollowerSendsToLeader(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Data: dir, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755})
	s.Close()
	s, f := openFollower(t, dir)
	call[*proto.AttrReply](t, s, &proto.Walk{Path: "/d"})
	for _, req := range []proto.Msg{
		&proto.Create{Parent: RootIno, Name: "f"}, &proto.Mkdir{Parent: RootIno, Name: "e"},
		&proto.Idem{Client: 1, Seq: 1, Req: &proto.Unlink{Parent: RootIno, Name: "d"}},
		&proto.Register{Addr: "127.0.0.1:1"}, &proto.Servers{}, &proto.SetXattr{Ino: RootIno, Name: "user.a"},
	} {
		_, err := s.Handle(context.Background(), req)
		if addr, ok := proto.LeaderHint(err); !ok || addr != "127.0.0.2:7000" {
			t.Errorf("%T on a follower: %v, want not-leader naming 127.0.0.2:7000", req, err)
		}
	}
	f.barrier = replog.ErrNoQuorum
	errno(t, s, &proto.Walk{Path: "/d"}, proto.ErrnoNoQuorum)
	f.barrier = &replog.NotLeaderError{Leader: 3, Addr: "127.0.0.3:7000"}
	_, err = s.Handle(context.Background(), &proto.GetAttr{Ino: RootIno})
	if addr, _ := proto.LeaderHint(err); addr != "127.0.0.3:7000" {
		t.Errorf("read barrier refused as not leader: %v", err)
	}
}

// TestNewLeaderTakesOver: a member of a new store that does not lead has
// no root yet; once it leads it makes the store (cluster ID, root), waits
// for servers to report to it, and places files on those.
func TestNewLeaderTakesOver(t *testing.T) {
	f := &follower{}
	s, err := Open(Config{Data: t.TempDir(), Log: quiet, Engine: func(sm replog.StateMachine) (replog.Engine, error) {
		f.Single = replog.NewSingle(sm, "127.0.0.1:7000")
		return f, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errno(t, s, &proto.GetAttr{Ino: RootIno}, syscall.ENOENT)
	if s.Cluster() != "" {
		t.Fatal("a follower made a cluster ID")
	}
	f.lead.Store(true)
	for i := 0; s.Cluster() == "" || s.leaderSince.Load() == 0; i++ {
		if i > 200 {
			t.Fatal("the new leader did not initialise the store within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	call[*proto.AttrReply](t, s, &proto.GetAttr{Ino: RootIno})
	si := call[*proto.ServersReply](t, s, &proto.Register{Addr: "127.0.0.1:1"}).Servers[0]
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "f", Mode: 0o644}).Attr
	if len(a.Servers) != 1 || a.Servers[0] != si.ID {
		t.Fatalf("placed on %v, want [%d]", a.Servers, si.ID)
	}
}

// TestNotifyNamesChangedInodes: every applied command reports the inodes
// it changed, once each, with its log index.
func TestNotifyNamesChangedInodes(t *testing.T) {
	s := open(t, func(cfg Config) (*Service, error) { return Open(cfg) })
	d := call[*proto.AttrReply](t, s, &proto.Mkdir{Parent: RootIno, Name: "d", Mode: 0o755}).Attr
	a := call[*proto.AttrReply](t, s, &proto.Create{Parent: RootIno, Name: "a", Mode: 0o644}).Attr
	b := call[*proto.AttrReply](t, s, &proto.Create{Parent: d.Ino, Name: "b", Mode: 0o644}).Attr
	var got []uint64
	var index uint64
	s.m.hooks.notify = func(i uint64, inos []uint64) { index, got = i, inos }
	call[*proto.OK](t, s, &proto.Rename{OldParent: RootIno, OldName: "a", NewParent: d.Ino, NewName: "b"})
	want := []uint64{RootIno, d.Ino, a.Ino, b.Ino}
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) || index != s.Machine().Applied() {
		t.Fatalf("rename notified %v at %d, want %v at %d", got, index, want, s.Machine().Applied())
	}
}
