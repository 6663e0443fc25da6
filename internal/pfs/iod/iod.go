// Package iod is the I/O server: it keeps each file's stripe units as one
// local object file (dense, see package layout) and serves byte ranges of it.
//
// Objects live at DATA/objects/XX/INO (stripe index 0) or XX/INO.K (stripe
// index K), where XX spreads them over 256 directories. Writes go to the page
// cache; Sync (sent by clients on fsync and close) makes them durable,
// including the directory entry of a new object. The data directory carries
// its identity (identity.go); until the metadata server accepts it, requests
// are refused.
package iod

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Heartbeat is how often an I/O server re-registers with the metadata server.
const Heartbeat = 5 * time.Second

// ReplicatedHeartbeat is the default with several metadata members: a new
// leader places files only on servers it has heard from since it took
// over, so creates after a leader change wait for the next heartbeat.
const ReplicatedHeartbeat = time.Second

// Config configures an I/O server.
type Config struct {
	// Data is the data directory, or several comma-separated (RAID).
	Data string
	// RAID is the level over several Data directories: RAID0 (striping)
	// or RAID1 (mirroring).
	RAID int
	// RebuildCheck: how often RAID-1 looks for a returned directory
	// (default RebuildCheck).
	RebuildCheck time.Duration
	Meta         string // metadata members' addresses, comma-separated
	// Advertise is the address clients use (default: the bound address).
	Advertise string
	Log       *slog.Logger
	// Security: the cluster secret (required: meta and clients prove it)
	// and optional TLS. Limits: see proto.Limits (budget default 256 MiB).
	Security proto.Security
	Limits   proto.Limits
	// Heartbeat between registrations (default Heartbeat, or
	// ReplicatedHeartbeat when Meta lists several members).
	Heartbeat time.Duration
	// SweepGrace: the start-up sweep removes objects no file references
	// that are older than this (default DefaultGrace; negative: no sweep).
	SweepGrace time.Duration
	// HTTP is the address of /metrics and /healthz ("": none).
	HTTP string
	// HTTPDerived: HTTP was derived, not asked for; if it cannot be bound
	// the daemon logs that and serves without it.
	HTTPDerived bool
	// Zone is the server's failure domain (rack, room; "" for none): meta
	// places the copies of a replicated file in different zones.
	Zone string
}

// Store is the object store under one data directory, or several (RAID,
// raid.go).
type Store struct {
	dir  string // the first data directory: identity, marker, LOCK
	lock *os.File

	mu sync.Mutex
	// Objects created since their last Sync, by creation number: a Sync
	// forgets only the creation it saw, never one made while it ran.
	new    map[objKey]uint64
	newGen uint64

	// members are the data directories (one without RAID); mode is
	// modeSingle, RAID0 or RAID1. raidMu guards members' states.
	members []*member
	mode    int
	raidMu  sync.Mutex
	raidID  string
	raidGen uint64
	rr      atomic.Uint32 // spreads RAID-1 reads

	// olocks order the changes of one object (a write and its checksums)
	// against each other and against reads of it.
	olocks [256]sync.RWMutex

	csErrors atomic.Uint64 // checksum mismatches found
	rebuilds atomic.Uint64 // RAID-1 members copied back

	log        *slog.Logger
	identMu    sync.Mutex
	ident      identity
	fresh      bool // objects/ has no store marker: empty or wiped
	markerOK   bool // the marker on disk matches ident
	registered atomic.Bool
	lostLogged sync.Map // objKey -> true: lost objects already logged
	// missingReads counts reads answered ErrnoMissing; missingLogged: the
	// objects already logged as missing (objKey -> true).
	missingReads  atomic.Uint64
	missingLogged sync.Map
	r             replState
}

// objKey names one object: inode number and stripe index.
type objKey struct {
	ino uint64
	idx uint32
}

// OpenStore opens (creating) a data directory and locks it.
func OpenStore(dir string) (*Store, error) { return OpenRAID([]string{dir}, modeSingle, nil) }

// OpenRAID opens a store over several data directories (RAID0 or RAID1;
// one directory is a plain store). The first is created if needed and
// holds the identity and LOCK; the others must exist. log may be nil.
func OpenRAID(dirs []string, mode int, log *slog.Logger) (*Store, error) {
	if len(dirs) == 0 {
		return nil, errors.New("no data directory")
	}
	dir := dirs[0]
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: locked by another process (is an I/O server already running on it?)", dir)
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Store{dir: dir, lock: lf, new: map[objKey]uint64{}, log: log, mode: modeSingle,
		members: []*member{{dir: dir, state: memberOK}}}
	if len(dirs) > 1 {
		if err := s.setupRAID(dirs, mode); err != nil {
			lf.Close()
			return nil, err
		}
	}
	if err := s.loadIdentity(); err != nil {
		lf.Close()
		return nil, err
	}
	return s, nil
}

// prepareDir readies data directory dir: objects/ and its 256 buckets
// made at once (mode 0700, the new entries synced, so no object's creation
// has to sync a bucket's), and the modes of an older install tightened:
// the directories and the files at the top to owner only. Object files
// of an older install keep their mode; the 0700 directories above them
// keep others out.
func prepareDir(dir string) error {
	objs := filepath.Join(dir, "objects")
	// objects/ must outlive a power cut with everything under it.
	if err := durable.MkdirAll(objs, 0o700); err != nil {
		return err
	}
	if err := tighten(dir, true); err != nil {
		return err
	}
	if err := tighten(objs, false); err != nil {
		return err
	}
	made := false
	for b := range 256 {
		p := filepath.Join(objs, fmt.Sprintf("%02x", b))
		switch err := os.Mkdir(p, 0o700); {
		case err == nil:
			made = true
		case errors.Is(err, os.ErrExist):
			if err := tighten(p, false); err != nil {
				return err
			}
		default:
			return err
		}
	}
	if made {
		return durable.SyncDir(objs)
	}
	return nil
}

// tighten takes group and others' bits off directory d and, with files,
// off the regular files in it.
func tighten(d string, files bool) error {
	chmod := func(p string, fi os.FileInfo) error {
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			if err := os.Chmod(p, m&^0o077); err != nil {
				return fmt.Errorf("tighten the mode of %s: %w", p, err)
			}
		}
		return nil
	}
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if err := chmod(d, fi); err != nil || !files {
		return err
	}
	ents, err := os.ReadDir(d)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if err := chmod(filepath.Join(d, e.Name()), fi); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the lock.
func (s *Store) Close() error { return s.lock.Close() }

// path is where object k lives in the first data directory.
func (s *Store) path(k objKey) string { return s.pathIn(0, k) }

// pathIn is where object k lives in member m under the current naming.
func (s *Store) pathIn(m int, k objKey) string {
	name := strconv.FormatUint(k.ino, 10)
	if k.idx != 0 {
		name += "." + strconv.FormatUint(uint64(k.idx), 10)
	}
	return filepath.Join(s.members[m].dir, "objects", fmt.Sprintf("%02x", k.ino&0xff), name)
}

// resolveIn is the path of object k in member m if it exists: its own
// name, or on a store from before stripe indexes its index-less legacy
// name. ok is false when the object does not exist.
func (s *Store) resolveIn(m int, k objKey) (p string, ok bool, err error) {
	p = s.pathIn(m, k)
	_, err = os.Stat(p)
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return p, false, err
	}
	if id, _ := s.identity(); id.legacy && k.idx != 0 {
		lp := s.pathIn(m, objKey{ino: k.ino})
		if _, err := os.Stat(lp); err == nil {
			return lp, true, nil
		}
	}
	return p, false, nil
}

// missing is the answer for object k that does not exist: nil when that is
// a hole, EIO when the object was lost with a replaced disk (the file is
// older than this store, see identity.base).
func (s *Store) missing(k objKey, op string) error {
	id, _ := s.identity()
	if k.ino >= id.base {
		return nil
	}
	if _, logged := s.lostLogged.LoadOrStore(k, true); !logged {
		s.log.Error("object lost with a replaced disk: answering EIO", "server", id.id, "file", k.ino, "stripe", k.idx, "op", op)
	}
	return proto.Errorf(syscall.EIO, fmt.Sprintf("I/O server %d: %s of file %d stripe %d: its data were lost with the server's replaced disk",
		id.id, op, k.ino, k.idx))
}

// mustHold is nil when object k exists, and ErrnoMissing when it does not
// although the client says the file's size gives it held bytes: a removed
// object is never served as a hole. Logged once per object, counted.
func (s *Store) mustHold(k objKey, held uint64) error {
	ok, err := s.exists(k)
	if err != nil || ok {
		return err
	}
	if err := s.missing(k, "read"); err != nil {
		return err // lost with a replaced disk: that error says more
	}
	s.missingReads.Add(1)
	id, _ := s.identity()
	if _, logged := s.missingLogged.LoadOrStore(k, true); !logged {
		s.log.Error("object absent where the file holds data: answering missing, not a hole", "server", id.id, "file", k.ino, "stripe", k.idx, "held", held)
	}
	return proto.Errorf(proto.ErrnoMissing, fmt.Sprintf("I/O server %d: file %d stripe %d: object absent, but the file's size gives it %d bytes",
		id.id, k.ino, k.idx, held))
}

// openIn opens object k in member m (see openFile), under its legacy name
// where that is the one that exists.
func (s *Store) openIn(m int, k objKey, write bool) (*ofile, error) {
	p, _, err := s.resolveIn(m, k)
	if err != nil {
		return nil, err
	}
	o, created, err := openFile(p, write)
	if created {
		s.markNew(k)
	}
	return o, err
}

func (s *Store) markNew(k objKey) {
	s.mu.Lock()
	s.newGen++
	s.new[k] = s.newGen
	s.mu.Unlock()
}

func (s *Store) olock(k objKey) *sync.RWMutex {
	return &s.olocks[(k.ino*0x9e3779b97f4a7c15+uint64(k.idx))>>56]
}

// exists reports whether object k exists (in a current member).
func (s *Store) exists(k objKey) (bool, error) {
	rs := s.readers()
	if len(rs) == 0 {
		return false, proto.Errorf(syscall.EIO, "no data directory is current")
	}
	_, ok, err := s.resolveIn(rs[0], k)
	return ok, err
}

// Handle serves one I/O request.
func (s *Store) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if id, ok := req.(*proto.Identify); ok {
		return s.identify(id), nil
	}
	if !s.registered.Load() {
		// Until meta accepts this directory, its objects (or their absence)
		// mean nothing: never answer a read with a hole.
		return nil, proto.Errorf(syscall.EIO, "I/O server not registered with the metadata server yet (waiting for it, or for `corral fs servers replace`)")
	}
	switch req.(type) {
	case *proto.Write, *proto.ReplWrite, *proto.Truncate, *proto.Punch, *proto.Alloc:
		// The client's connection is gone: it resends this on a new one,
		// and may send a newer overlapping write once that is answered. Do
		// not apply this copy late, over the newer one.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if r, err, ok := s.handleRedundancy(ctx, req); ok {
		return r, err
	}
	switch m := req.(type) {
	case *proto.Read:
		if m.Len > proto.MaxIO {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("read of %d bytes over the limit of %d", m.Len, proto.MaxIO))
		}
		bp := getBuf(int(m.Len))
		k := objKey{m.Handle, m.Index}
		n, err := s.readObj(k, (*bp)[:m.Len], int64(m.Off))
		if err == nil && n == 0 && m.Held > 0 {
			err = s.mustHold(k, m.Held)
		}
		if err != nil {
			putBuf(bp)
			return nil, err
		}
		return &proto.DataReply{Data: (*bp)[:n], Done: func() { putBuf(bp) }}, nil
	case *proto.Write:
		return nil, s.writeObj(objKey{m.Handle, m.Index}, m.Data, int64(m.Off))
	case *proto.Truncate:
		return nil, s.truncateObj(objKey{m.Handle, m.Index}, int64(m.Size))
	case *proto.Sync:
		return nil, s.sync(objKey{m.Handle, m.Index})
	case *proto.Remove:
		return nil, s.remove(objKey{m.Handle, m.Index})
	case *proto.ObjStat:
		k := objKey{m.Handle, m.Index}
		size, ok, err := s.objSize(k)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &proto.SizeReply{}, s.missing(k, "stat")
		}
		return &proto.SizeReply{Size: uint64(size)}, nil
	case *proto.Punch:
		return nil, s.punch(m)
	case *proto.Alloc:
		return nil, s.alloc(m)
	case *proto.ListObjects:
		return s.list(m)
	}
	return nil, proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("an I/O server does not serve op %d", req.Op()))
}

// readObj reads object k at off into p: the bytes read (short at the
// object's end, 0 for an object never written: a hole), EIO for an
// object lost with a replaced disk, EBADMSG for a block whose checksum
// does not match (never its bytes). Every read of object data goes
// through here (requests, heal, scrub).
func (s *Store) readObj(k objKey, p []byte, off int64) (int, error) {
	l := s.olock(k)
	l.RLock()
	defer l.RUnlock()
	if s.mode == RAID0 {
		return s.read0(k, p, off)
	}
	rs := s.readers()
	if len(rs) == 0 {
		return 0, proto.Errorf(syscall.EIO, "no data directory is current")
	}
	start := 0
	if len(rs) > 1 {
		start = int(s.rr.Add(1))
	}
	var first error
	for i := range rs {
		m := rs[(start+i)%len(rs)]
		o, err := s.openIn(m, k, false)
		if err == nil && o == nil {
			return 0, s.missing(k, "read")
		}
		var n int
		if err == nil {
			n, err = o.read(p, off)
			o.close()
		}
		if err == nil {
			return n, nil
		}
		// A RAID-1 mirror that fails this read: the next one may not.
		var bb badBlock
		if errors.As(err, &bb) {
			err = s.mismatch(k, bb.off)
		} else {
			err = s.raidErr(m, err)
		}
		first = cmp.Or(first, err)
	}
	return 0, first
}

// eachWriter applies fn to object k in every written member (opened for
// writing: created if missing). A RAID-1 member that fails while another
// succeeds is taken out (degraded) rather than failing the request.
func (s *Store) eachWriter(k objKey, fn func(*ofile) error) error {
	ws := s.writers()
	var errs []error
	var failed []int
	for _, m := range ws {
		o, err := s.openIn(m, k, true)
		if err == nil {
			err = fn(o)
			// A block this change keeps in part is bad here: taken from a
			// mirror where it checks, and the change made again (at most
			// its two edge blocks), rather than failing the whole member.
			var bb badBlock
			for try := 0; try < 2 && errors.As(err, &bb) && len(ws) > 1 && s.repairBlock(k, m, s.readers(), bb.off); try++ {
				err = fn(o)
			}
			o.close()
		}
		if err != nil {
			errs = append(errs, s.raidErr(m, err))
			failed = append(failed, m)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if len(failed) == len(ws) {
		return errs[0]
	}
	for i, m := range failed {
		s.fail(m, errs[i])
	}
	return nil
}

// writeObj writes data at off of object k, creating it; every write of
// object data goes through here.
func (s *Store) writeObj(k objKey, data []byte, off int64) error {
	if off < 0 || uint64(off)+uint64(len(data)) > layout.MaxObjectSize {
		return proto.Errorf(syscall.EFBIG, fmt.Sprintf("write of %d bytes at %d: past the largest object size (%d)", len(data), uint64(off), uint64(layout.MaxObjectSize)))
	}
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	if err := s.mayCreate(k, "write"); err != nil {
		return err
	}
	if s.mode == RAID0 {
		return s.write0(k, data, off)
	}
	return s.badChange(k, s.eachWriter(k, func(o *ofile) error { return o.write(data, off) }))
}

// mayCreate is nil when object k exists or may be created (it was not
// lost with a replaced disk).
func (s *Store) mayCreate(k objKey, op string) error {
	ok, err := s.exists(k)
	if err != nil || ok {
		return err
	}
	return s.missing(k, op)
}

// truncateObj sets object k's size.
func (s *Store) truncateObj(k objKey, size int64) error {
	if size < 0 || size > layout.MaxObjectSize {
		// A size past 2^63 arrives negative.
		return proto.Errorf(syscall.EFBIG, fmt.Sprintf("truncate to %d: past the largest object size (%d)", uint64(size), uint64(layout.MaxObjectSize)))
	}
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	ok, err := s.exists(k)
	if err != nil {
		return err
	}
	if !ok {
		lost := s.missing(k, "truncate")
		if size == 0 && lost == nil {
			return nil // a hole stays a hole
		}
		// Cutting a lost object to nothing loses nothing more: an empty
		// object makes the file whole again.
		if size > 0 && lost != nil {
			return lost
		}
	}
	if s.mode == RAID0 {
		return s.truncate0(k, size)
	}
	return s.badChange(k, s.eachWriter(k, func(o *ofile) error { return o.truncate(size) }))
}

// objSize is object k's size; ok is false when it does not exist.
func (s *Store) objSize(k objKey) (size int64, ok bool, err error) {
	l := s.olock(k)
	l.RLock()
	defer l.RUnlock()
	if s.mode == RAID0 {
		fs, err := s.open0(k, false)
		if err != nil || fs[0] == nil {
			closeAll(fs)
			return 0, false, err
		}
		defer closeAll(fs)
		size, err := s.size0(fs)
		return size, err == nil, err
	}
	rs := s.readers()
	if len(rs) == 0 {
		return 0, false, proto.Errorf(syscall.EIO, "no data directory is current")
	}
	p, ok, err := s.resolveIn(rs[0], k)
	if err != nil || !ok {
		return 0, false, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0, false, err
	}
	return fi.Size(), true, nil
}

// Read buffers are pooled by size class (powers of two up to MaxIO): a
// server streaming large files then allocates almost nothing.
var bufPools [27]sync.Pool

func sizeClass(n int) int {
	c := 12 // 4 KiB at least
	for 1<<c < n {
		c++
	}
	return c
}

func getBuf(n int) *[]byte {
	c := sizeClass(n)
	if bp, ok := bufPools[c].Get().(*[]byte); ok {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func putBuf(bp *[]byte) { bufPools[sizeClass(cap(*bp))].Put(bp) }

// remove deletes object k (and, on a legacy store, its index-less name)
// with its checksums, in every member.
func (s *Store) remove(k objKey) error {
	l := s.olock(k)
	l.Lock()
	defer l.Unlock()
	var first error
	for m := range s.members {
		if len(s.members) > 1 && s.mode == RAID1 && s.memberState(m) == memberOut {
			continue // its leftovers go when it is rebuilt
		}
		p := s.pathIn(m, k)
		paths := []string{p, sumPath(p)}
		if id, _ := s.identity(); id.legacy && k.idx != 0 {
			lp := s.pathIn(m, objKey{ino: k.ino})
			paths = append(paths, lp, sumPath(lp))
		}
		for _, p := range paths {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
				first = s.raidErr(m, err)
			}
		}
	}
	s.mu.Lock()
	delete(s.new, k)
	s.mu.Unlock()
	return first
}

// syncReadHook, set by tests only, runs in sync after it read whether the
// object is new.
var syncReadHook func(objKey)

// sync makes object k's data and checksums durable in every written
// member, with the directory entry of a new object.
// No object lock: a write running meanwhile is not acknowledged yet, and
// its own Sync follows; a long fsync must not hold up writes.
func (s *Store) sync(k objKey) error {
	s.mu.Lock()
	gen := s.new[k]
	isNew := gen != 0
	s.mu.Unlock()
	if syncReadHook != nil {
		syncReadHook(k)
	}
	ms := s.writers()
	if s.mode == RAID0 {
		ms = ms[:0]
		for m := range s.members {
			ms = append(ms, m)
		}
	}
	// Every disk flushes at once: a RAID syncs in the time of one disk.
	errOf := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errOf[i] = func() error {
				o, err := s.openIn(m, k, false)
				if err != nil || o == nil {
					return err
				}
				defer o.close()
				if err := o.sync(); err != nil || !isNew {
					return err
				}
				// A new object's directory entry must be durable too.
				d, err := os.Open(filepath.Dir(s.pathIn(m, k)))
				if err != nil {
					return err
				}
				defer d.Close()
				return d.Sync()
			}()
		}()
	}
	wg.Wait()
	var errs []error
	var failed []int
	for i, m := range ms {
		if errOf[i] != nil {
			errs = append(errs, s.raidErr(m, errOf[i]))
			failed = append(failed, m)
		}
	}
	if len(errs) > 0 && (s.mode != RAID1 || len(failed) == len(ms)) {
		return errs[0]
	}
	for i, m := range failed {
		s.fail(m, errs[i])
	}
	s.mu.Lock()
	if s.new[k] == gen {
		delete(s.new, k)
	}
	s.mu.Unlock()
	return nil
}

// usage reports the data directory's file system capacity and free bytes.
// RAID-0 adds its directories' space; RAID-1 has its smallest.
func (s *Store) usage() (capacity, free uint64) {
	for i, m := range s.readers() {
		var st syscall.Statfs_t
		if syscall.Statfs(s.members[m].dir, &st) != nil {
			return 0, 0
		}
		c, f := st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
		switch {
		case i == 0:
			capacity, free = c, f
		case s.mode == RAID0:
			capacity, free = capacity+c, free+f
		default:
			capacity, free = min(capacity, c), min(free, f)
		}
	}
	return capacity, free
}

// Run serves on listen until ctx ends, registering with the metadata server
// and re-registering every heartbeat. Started before meta, it waits for it
// (logging "waiting for meta at ADDR"); requests are refused with EIO until
// meta has accepted the data directory.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string, id uint32)) error {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	hb := cfg.Heartbeat
	if hb <= 0 && len(client.SplitMembers(cfg.Meta)) > 1 {
		hb = ReplicatedHeartbeat
	}
	if hb <= 0 {
		hb = Heartbeat
	}
	st, err := OpenRAID(strings.Split(cfg.Data, ","), cfg.RAID, log)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, stopHTTP := context.WithCancel(ctx) // the HTTP listener ends with Run
	defer stopHTTP()
	h, err := st.serveHTTP(ctx, cfg.HTTP, cfg.HTTPDerived, log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = l.Addr().String()
	}
	if cfg.Security.Cred == nil {
		l.Close()
		return fmt.Errorf("no cluster secret: give --secret-file META_DATA/%s (or %s); meta writes it at its first start", proto.SecretFileName, proto.SecretEnv)
	}
	if cfg.Security.Cred.Kind() != proto.KindFull {
		l.Close()
		return fmt.Errorf("an I/O server needs the cluster secret (META_DATA/%s), not the read-only credential", proto.SecretFileName)
	}
	if cfg.Limits.Budget == 0 {
		cfg.Limits.Budget = 256 << 20
	}
	pool := proto.Pool{Security: cfg.Security}
	defer pool.Close()
	// Peers get their own pool: a head's forwards and a heal's reads do
	// not queue behind heartbeats, nor these behind them.
	st.r.peers = &proto.Pool{Security: cfg.Security}
	defer st.r.peers.Close()
	// Liveness probes of peers on connections of their own: a probe must
	// not queue behind the bulk data it is to tell apart from silence.
	st.r.probes = &proto.Pool{PerServer: 1, Security: cfg.Security}
	defer st.r.probes.Close()
	go st.r.clock.run(ctx)
	st.r.zone = cfg.Zone
	srv := &proto.Server{Handler: h, Log: log, MaxInflight: 64, Security: cfg.Security, Limits: cfg.Limits}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	// Registration and heartbeats go to whichever metadata member leads,
	// following it when it changes; a follower answers NotLeader.
	meta := client.NewLeader(&pool, cfg.Meta, 0)
	id, err := st.registerLoop(ctx, meta, addr)
	if err != nil {
		srv.Close()
		<-served
		l.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("register with metadata server %s: %w", cfg.Meta, err)
	}
	go func() {
		t := time.NewTicker(hb)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				srv.Close()
				return
			case <-t.C:
			}
			_, err := st.register(ctx, meta, addr)
			if err != nil && !failing {
				log.Warn("heartbeat to metadata server failed", "meta", cfg.Meta, "err", err)
			} else if err == nil && failing {
				log.Info("metadata server reachable again", "meta", cfg.Meta)
			}
			failing = err != nil
		}
	}()
	go st.rebuildLoop(ctx, cmp.Or(cfg.RebuildCheck, RebuildCheck))
	if cfg.SweepGrace >= 0 {
		go st.sweep(ctx, meta, id, cmp.Or(cfg.SweepGrace, DefaultGrace))
	}
	if ready != nil {
		ready(addr, id)
	}
	err = <-served
	srv.Close()
	return err
}
