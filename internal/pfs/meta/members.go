package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
)

// handleMembers serves the membership and backup requests (ops 61-65);
// ok is false for any other request.
func (s *Service) handleMembers(ctx context.Context, req proto.Msg) (r proto.Msg, err error, ok bool) {
	switch req.Op() {
	case proto.OpMembers, proto.OpMemberChange, proto.OpBackup, proto.OpRaftSnap, proto.OpRaft:
		return serveMembers(ctx, s.Engine(), s.Machine(), s.bk, req)
	}
	return nil, nil, false // every other request: no engine lookups on its path
}

// raftHandler is an engine that serves Raft traffic between members.
type raftHandler interface {
	Handle(ctx context.Context, req proto.Msg) (proto.Msg, error, bool)
}

// serveMembers answers ops 61-65 from eng and sm; ok is false for others.
func serveMembers(ctx context.Context, eng replog.Engine, sm replog.StateMachine, bk *backups, req proto.Msg) (proto.Msg, error, bool) {
	if h, isRaft := eng.(raftHandler); isRaft {
		if r, err, ok := h.Handle(ctx, req); ok {
			return r, err, true
		}
	}
	switch m := req.(type) {
	case *proto.Raft, *proto.RaftSnap:
		return nil, proto.Errorf(syscall.EINVAL, "raft traffic sent to a metadata server that runs alone (started without --peers)"), true
	case *proto.Members:
		return membersReply(eng.Status()), nil, true
	case *proto.MemberChange:
		c := replog.MemberChange{ID: m.ID, Addr: m.Addr}
		switch m.Change {
		case proto.MemberAdd:
			c.Op = replog.AddMember
		case proto.MemberRemove:
			c.Op = replog.RemoveMember
		default:
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("unknown member change %d", m.Change)), true
		}
		if err := eng.ChangeMember(ctx, c); err != nil {
			return nil, replicaErr(err), true
		}
		return membersReply(eng.Status()), nil, true
	case *proto.Backup:
		r, err := bk.serve(ctx, eng, sm, m)
		return r, err, true
	}
	return nil, nil, false
}

// replicaErr is engineErr for membership changes and backups: what the
// engine refuses otherwise (a single-process store has no members to
// change, an unknown member) is the caller's mistake, EINVAL.
func replicaErr(err error) error {
	err = engineErr(err)
	var re *proto.RemoteError
	if errors.As(err, &re) {
		return err
	}
	return proto.Errorf(syscall.EINVAL, err.Error())
}

func membersReply(st replog.Status) *proto.MembersReply {
	r := &proto.MembersReply{ID: st.ID, Leader: st.Leader, Term: st.Term, Commit: st.Commit, Applied: st.Applied}
	for _, m := range st.Members {
		r.Members = append(r.Members, proto.MemberInfo{ID: m.ID, Addr: m.Addr, Learner: m.Learner, Match: m.Match, Active: m.Active})
	}
	return r
}

// Backups: a Backup with Token 0 takes a consistent snapshot of the state
// machine into a temporary file (after a read barrier, so it holds every
// change acknowledged before the request); later Backups read it chunk by
// chunk. The file goes when its last chunk is read or after backupIdle
// without a request.
const (
	backupChunk = 4 << 20
	backupIdle  = 10 * time.Minute
	maxBackups  = 2
)

type backups struct {
	dir string // "" : the system's temporary directory
	mu  sync.Mutex
	m   map[uint64]*backupFile
}

type backupFile struct {
	f    *os.File
	size uint64
	used time.Time
}

func newBackups() *backups { return &backups{m: map[uint64]*backupFile{}} }

func (b *backups) drop(tok uint64) {
	if f := b.m[tok]; f != nil {
		f.f.Close()
		os.Remove(f.f.Name())
		delete(b.m, tok)
	}
}

func (b *backups) serve(ctx context.Context, eng replog.Engine, sm replog.StateMachine, req *proto.Backup) (proto.Msg, error) {
	if sm == nil {
		return nil, proto.Errorf(syscall.ENOTSUP, "this metadata server cannot take backups")
	}
	b.mu.Lock()
	for tok, f := range b.m {
		if time.Since(f.used) > backupIdle {
			b.drop(tok)
		}
	}
	if req.Token == 0 {
		if req.Offset != 0 {
			b.mu.Unlock()
			return nil, proto.Errorf(syscall.EINVAL, "backup: a new backup starts at offset 0")
		}
		if len(b.m) >= maxBackups {
			b.mu.Unlock()
			return nil, proto.Errorf(syscall.EBUSY, fmt.Sprintf("backup: %d backups already in progress", maxBackups))
		}
		b.mu.Unlock()
		tok, f, err := b.take(ctx, eng, sm)
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		b.m[tok] = f
		req = &proto.Backup{Token: tok}
	}
	defer b.mu.Unlock()
	f := b.m[req.Token]
	if f == nil {
		return nil, proto.Errorf(syscall.ENOENT, fmt.Sprintf("backup %x: no such backup in progress (finished, or idle over %v)", req.Token, backupIdle))
	}
	if req.Offset > f.size {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("backup %x: offset %d past its end %d", req.Token, req.Offset, f.size))
	}
	n := min(f.size-req.Offset, backupChunk)
	data := make([]byte, n)
	if _, err := f.f.ReadAt(data, int64(req.Offset)); err != nil && !errors.Is(err, io.EOF) {
		b.drop(req.Token)
		return nil, fmt.Errorf("backup %x: reading its snapshot: %w", req.Token, err)
	}
	f.used = time.Now()
	done := req.Offset+n == f.size
	if done {
		b.drop(req.Token)
	}
	return &proto.BackupReply{Token: req.Token, Offset: req.Offset, Size: f.size, Data: data, Done: done}, nil
}

func (b *backups) take(ctx context.Context, eng replog.Engine, sm replog.StateMachine) (uint64, *backupFile, error) {
	if err := eng.ReadBarrier(ctx); err != nil {
		return 0, nil, replicaErr(err)
	}
	f, err := os.CreateTemp(b.dir, "corral-backup-*")
	if err != nil {
		return 0, nil, fmt.Errorf("backup: %w", err)
	}
	fail := func(err error) (uint64, *backupFile, error) {
		f.Close()
		os.Remove(f.Name())
		return 0, nil, err
	}
	if err := sm.Snapshot(f); err != nil {
		return fail(fmt.Errorf("backup: taking the snapshot: %w", err))
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	var t [8]byte
	rand.Read(t[:])
	tok := binary.LittleEndian.Uint64(t[:]) | 1 // never 0
	return tok, &backupFile{f: f, size: uint64(size), used: time.Now()}, nil
}

// RestoreBackup seeds dataDir, which must hold no store and no Raft log,
// with a backup file 'corral fs meta backup' wrote: the snapshot is a bbolt
// image of the store (applied index included), checked by opening it
// before it is moved in place atomically.
func RestoreBackup(backup, dataDir string) error {
	for _, name := range []string{"meta.db", "raft"} {
		if _, err := os.Stat(filepath.Join(dataDir, name)); err == nil {
			return fmt.Errorf("restore into %s: it already holds %s; restore seeds a new member's empty directory", dataDir, name)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	in, err := os.Open(backup)
	if err != nil {
		return err
	}
	defer in.Close()
	dst := filepath.Join(dataDir, "meta.db")
	tmp, err := os.CreateTemp(dataDir, "meta.db.restore-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	// The backup is a framed snapshot: its length, checksum and the store's
	// own consistency check are verified before anything is put in place.
	if err := receiveSnapshot(tmp.Name(), in); err != nil {
		return fmt.Errorf("restore %s: not a usable metadata backup: %w", backup, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	return durable.SyncDir(dataDir)
}
