package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func TestRaftFlags(t *testing.T) {
	peers := "1=127.0.0.1:7400,2=127.0.0.2:7400,3=127.0.0.3:7400"
	ok := raftFlags{id: 2, peers: peers}
	if err := ok.check("127.0.0.2:7400"); err != nil || len(ok.parsed) != 3 || ok.parsed[3] != "127.0.0.3:7400" {
		t.Fatalf("%v %v", err, ok.parsed)
	}
	if err := (&raftFlags{}).check("x"); err != nil {
		t.Errorf("no replication flags: %v", err)
	}
	for _, f := range []raftFlags{
		{id: 2, peers: peers, join: true},                   // both
		{peers: peers},                                      // no id
		{id: 4, peers: peers},                               // not in peers
		{id: 1, peers: peers},                               // --listen differs from its entry
		{id: 1, peers: "1=a:1,1=b:1"},                       // duplicate ID
		{id: 1, peers: "1=127.0.0.2:7400,2=127.0.0.2:7400"}, // duplicate address
		{id: 1, peers: "1:127.0.0.2:7400"},                  // no =
		{id: 1, peers: "0=127.0.0.2:7400"},                  // ID 0
		{id: 1},                                             // --id alone
		{join: true},                                        // --join without --id
		{id: 2, peers: peers, reads: "stale"},               // unknown read mode
	} {
		err := f.check("127.0.0.2:7400")
		var u usageError
		if !errors.As(err, &u) {
			t.Errorf("%+v: %v, want a usage error", f, err)
		}
	}
}

// fakeMember answers Members and Backup like a member of a group where
// member 2 leads.
type fakeMember struct {
	id, leader uint64
	addrs      map[uint64]string
	image      []byte
}

func (f *fakeMember) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	switch m := req.(type) {
	case *proto.Members:
		r := &proto.MembersReply{ID: f.id, Leader: f.leader, Term: 4, Commit: 90, Applied: 90}
		for id := uint64(1); id <= 2; id++ {
			r.Members = append(r.Members, proto.MemberInfo{ID: id, Addr: f.addrs[id], Match: 80 + id, Active: true})
		}
		return r, nil
	case *proto.Backup:
		if f.id != f.leader {
			return nil, proto.NotLeader(f.addrs[f.leader])
		}
		if m.Token == 0 {
			m.Token = 77
		}
		end := min(m.Offset+5, uint64(len(f.image)))
		return &proto.BackupReply{Token: m.Token, Offset: m.Offset, Size: uint64(len(f.image)), Data: f.image[m.Offset:end], Done: end == uint64(len(f.image))}, nil
	}
	return nil, fmt.Errorf("unexpected %T", req)
}

// The backup follows the leader, reads every chunk and writes the file
// whole; members shows the leader's view.
func TestMetaBackupAndMembers(t *testing.T) {
	cred, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec := proto.Security{Cred: cred}
	addrs := map[uint64]string{}
	fakes := map[uint64]*fakeMember{}
	for id := uint64(1); id <= 2; id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = l.Addr().String()
		fakes[id] = &fakeMember{id: id, leader: 2, addrs: addrs, image: []byte("a consistent image of the store")}
		srv := &proto.Server{Handler: fakes[id], Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Security: sec}
		go srv.Serve(l)
		t.Cleanup(srv.Close)
	}
	cl := client.New(addrs[1], client.WithSecurity(sec))
	defer cl.Close()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.bak")
	defer func(q bool) { progressQuiet = q }(progressQuiet)
	progressQuiet = true
	if err := backupTo(ctx, cl, path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "a consistent image of the store" {
		t.Fatalf("backup holds %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*part*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	r, err := groupView(ctx, cl)
	if err != nil || r.ID != 2 {
		t.Fatalf("view %+v %v: want the leader's", r, err)
	}
}
