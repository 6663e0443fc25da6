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
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
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
	Data string
	Meta string // metadata members' addresses, comma-separated
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

// Store is the object store under one data directory.
type Store struct {
	dir  string
	lock *os.File

	mu  sync.Mutex
	new map[objKey]bool // objects created since their last Sync

	log        *slog.Logger
	identMu    sync.Mutex
	ident      identity
	fresh      bool // objects/ has no store marker: empty or wiped
	markerOK   bool // the marker on disk matches ident
	registered atomic.Bool
	lostLogged sync.Map // objKey -> true: lost objects already logged
	r          replState
}

// objKey names one object: inode number and stripe index.
type objKey struct {
	ino uint64
	idx uint32
}

// OpenStore opens (creating) a data directory and locks it.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: locked by another process (is an I/O server already running on it?)", dir)
	}
	s := &Store{dir: dir, lock: lf, new: map[objKey]bool{}, log: slog.Default()}
	if err := s.loadIdentity(); err != nil {
		lf.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the lock.
func (s *Store) Close() error { return s.lock.Close() }

// path is where object k lives under the current naming.
func (s *Store) path(k objKey) string {
	name := strconv.FormatUint(k.ino, 10)
	if k.idx != 0 {
		name += "." + strconv.FormatUint(uint64(k.idx), 10)
	}
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", k.ino&0xff), name)
}

// resolve is the path of object k if it exists: its own name, or on a store
// from before stripe indexes its index-less legacy name. ok is false when
// the object does not exist.
func (s *Store) resolve(k objKey) (p string, ok bool, err error) {
	p = s.path(k)
	_, err = os.Stat(p)
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return p, false, err
	}
	if id, _ := s.identity(); id.legacy && k.idx != 0 {
		lp := s.path(objKey{ino: k.ino})
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

// openExisting opens object k under its name, or its legacy name, with
// flag; an error wrapping os.ErrNotExist when it does not exist. The common
// case costs one open, as before objects had indexes.
func (s *Store) openExisting(k objKey, flag int) (*os.File, error) {
	f, err := os.OpenFile(s.path(k), flag, 0)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if id, _ := s.identity(); id.legacy && k.idx != 0 {
		if lf, lerr := os.OpenFile(s.path(objKey{ino: k.ino}), flag, 0); lerr == nil {
			return lf, nil
		}
	}
	return nil, err
}

// open opens object k for writing, creating it (and its directory) if
// needed, unless it was lost.
func (s *Store) open(k objKey, op string) (*os.File, error) {
	f, err := s.openExisting(k, os.O_RDWR)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if err := s.missing(k, op); err != nil {
		return nil, err
	}
	return s.create(k)
}

func (s *Store) create(k objKey) (*os.File, error) {
	p := s.path(k)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		s.mu.Lock()
		s.new[k] = true
		s.mu.Unlock()
	}
	return f, err
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
		n, err := s.readObj(objKey{m.Handle, m.Index}, (*bp)[:m.Len], int64(m.Off))
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
// object's end, 0 for an object never written: a hole), or EIO for an
// object lost with a replaced disk. Every read of object data goes
// through here (requests, heal, scrub).
func (s *Store) readObj(k objKey, p []byte, off int64) (int, error) {
	f, err := s.openExisting(k, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return 0, s.missing(k, "read")
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return 0, err
	}
	return n, nil
}

// writeObj writes data at off of object k, creating it; every write of
// object data goes through here.
func (s *Store) writeObj(k objKey, data []byte, off int64) error {
	if uint64(off)+uint64(len(data)) > 1<<62 {
		return proto.Errorf(syscall.EFBIG, "write beyond the largest object size")
	}
	f, err := s.open(k, "write")
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(data, off)
	return err
}

// truncateObj sets object k's size.
func (s *Store) truncateObj(k objKey, size int64) error {
	if size == 0 {
		_, ok, err := s.resolve(k)
		if err != nil {
			return err
		}
		if !ok {
			if s.missing(k, "truncate") == nil {
				return nil // a hole stays a hole
			}
			// Cutting a lost object to nothing loses nothing more:
			// an empty object makes the file whole again.
			f, err := s.create(k)
			if err != nil {
				return err
			}
			return f.Close()
		}
	}
	f, err := s.open(k, "truncate")
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(size)
}

// objSize is object k's size; ok is false when it does not exist.
func (s *Store) objSize(k objKey) (size int64, ok bool, err error) {
	p, ok, err := s.resolve(k)
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

// remove deletes object k (and, on a legacy store, its index-less name).
func (s *Store) remove(k objKey) error {
	err := os.Remove(s.path(k))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if id, _ := s.identity(); id.legacy && k.idx != 0 && err == nil {
		if lerr := os.Remove(s.path(objKey{ino: k.ino})); lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
			err = lerr
		}
	}
	s.mu.Lock()
	delete(s.new, k)
	s.mu.Unlock()
	return err
}

func (s *Store) sync(k objKey) error {
	f, err := s.openExisting(k, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return err
	}
	s.mu.Lock()
	isNew := s.new[k]
	delete(s.new, k)
	s.mu.Unlock()
	if !isNew {
		return nil
	}
	// A new object's directory entry must be durable too.
	d, err := os.Open(filepath.Dir(s.path(k)))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// usage reports the data directory's file system capacity and free bytes.
func (s *Store) usage() (capacity, free uint64) {
	var st syscall.Statfs_t
	if syscall.Statfs(s.dir, &st) != nil {
		return 0, 0
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize)
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
	st, err := OpenStore(cfg.Data)
	if err != nil {
		return err
	}
	defer st.Close()
	st.log = log
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
