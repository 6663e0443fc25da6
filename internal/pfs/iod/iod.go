// Package iod is the I/O server: it keeps each file's stripe units as one
// local object file (dense, see package layout) and serves byte ranges of it.
//
// Objects live at DATA/objects/XX/INO where XX spreads them over 256
// directories. Writes go to the page cache; Sync (sent by clients on fsync and
// close) makes them durable, including the directory entry of a new object.
package iod

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Heartbeat is how often an I/O server re-registers with the metadata server.
const Heartbeat = 5 * time.Second

// Config configures an I/O server.
type Config struct {
	Data string
	Meta string // metadata server address
	// Advertise is the address clients use (default: the bound address).
	Advertise string
	Log       *slog.Logger
	// Security: the cluster secret (required: meta and clients prove it)
	// and optional TLS. Limits: see proto.Limits (budget default 256 MiB).
	Security proto.Security
	Limits   proto.Limits
}

// Store is the object store under one data directory.
type Store struct {
	dir  string
	lock *os.File

	mu  sync.Mutex
	new map[uint64]bool // objects created since their last Sync
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
	return &Store{dir: dir, lock: lf, new: map[uint64]bool{}}, nil
}

// Close releases the lock.
func (s *Store) Close() error { return s.lock.Close() }

func (s *Store) path(h uint64) string {
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", h&0xff), strconv.FormatUint(h, 10))
}

// open opens object h for writing, creating it (and its directory) if needed.
func (s *Store) open(h uint64) (*os.File, error) {
	p := s.path(h)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		s.mu.Lock()
		s.new[h] = true
		s.mu.Unlock()
	}
	return f, err
}

// Handle serves one I/O request.
func (s *Store) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	switch m := req.(type) {
	case *proto.Read:
		if m.Len > proto.MaxIO {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("read of %d bytes over the limit of %d", m.Len, proto.MaxIO))
		}
		f, err := os.Open(s.path(m.Handle))
		if errors.Is(err, os.ErrNotExist) {
			return &proto.DataReply{}, nil // never written: a hole
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		bp := getBuf(int(m.Len))
		n, err := f.ReadAt(*bp, int64(m.Off))
		if err != nil && err != io.EOF {
			putBuf(bp)
			return nil, err
		}
		return &proto.DataReply{Data: (*bp)[:n], Done: func() { putBuf(bp) }}, nil
	case *proto.Write:
		if m.Off+uint64(len(m.Data)) > 1<<62 {
			return nil, proto.Errorf(syscall.EFBIG, "write beyond the largest object size")
		}
		f, err := s.open(m.Handle)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if _, err := f.WriteAt(m.Data, int64(m.Off)); err != nil {
			return nil, err
		}
		return nil, nil
	case *proto.Truncate:
		if m.Size == 0 {
			if _, err := os.Stat(s.path(m.Handle)); errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
		}
		f, err := s.open(m.Handle)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return nil, f.Truncate(int64(m.Size))
	case *proto.Sync:
		return nil, s.sync(m.Handle)
	case *proto.Remove:
		err := os.Remove(s.path(m.Handle))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		s.mu.Lock()
		delete(s.new, m.Handle)
		s.mu.Unlock()
		return nil, err
	case *proto.ObjStat:
		fi, err := os.Stat(s.path(m.Handle))
		if errors.Is(err, os.ErrNotExist) {
			return &proto.SizeReply{}, nil
		}
		if err != nil {
			return nil, err
		}
		return &proto.SizeReply{Size: uint64(fi.Size())}, nil
	case *proto.Punch:
		return nil, s.punch(m)
	case *proto.Alloc:
		return nil, s.alloc(m)
	}
	return nil, proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("an I/O server does not serve op %d", req.Op()))
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

func (s *Store) sync(h uint64) error {
	f, err := os.Open(s.path(h))
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
	isNew := s.new[h]
	delete(s.new, h)
	s.mu.Unlock()
	if !isNew {
		return nil
	}
	// A new object's directory entry must be durable too.
	d, err := os.Open(filepath.Dir(s.path(h)))
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

func (s *Store) loadID() uint32 {
	b, err := os.ReadFile(filepath.Join(s.dir, "id"))
	if err != nil || len(b) != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (s *Store) saveID(id uint32) error {
	p := filepath.Join(s.dir, "id")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, binary.BigEndian.AppendUint32(nil, id), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// register announces the server to meta, keeping the ID meta hands out.
func (s *Store) register(ctx context.Context, pool *proto.Pool, meta, addr string) (uint32, error) {
	c, f := s.usage()
	id := s.loadID()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := pool.Call(cctx, meta, &proto.Register{ID: id, Addr: addr, Capacity: c, Free: f})
	if err != nil {
		return 0, err
	}
	sr, ok := r.(*proto.ServersReply)
	if !ok || len(sr.Servers) != 1 {
		return 0, fmt.Errorf("metadata server %s: unexpected reply to register", meta)
	}
	if got := sr.Servers[0].ID; got != id {
		if err := s.saveID(got); err != nil {
			return 0, err
		}
		id = got
	}
	return id, nil
}

// Run serves on listen until ctx ends, registering with the metadata server
// and re-registering every Heartbeat.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string, id uint32)) error {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	st, err := OpenStore(cfg.Data)
	if err != nil {
		return err
	}
	defer st.Close()
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
	id, err := st.register(ctx, &pool, cfg.Meta, addr)
	if err != nil {
		l.Close()
		return fmt.Errorf("register with metadata server: %w", err)
	}
	srv := &proto.Server{Handler: st, Log: log, MaxInflight: 64, Security: cfg.Security, Limits: cfg.Limits}
	go func() {
		t := time.NewTicker(Heartbeat)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				srv.Close()
				return
			case <-t.C:
			}
			_, err := st.register(ctx, &pool, cfg.Meta, addr)
			if err != nil && !failing {
				log.Warn("heartbeat to metadata server failed", "meta", cfg.Meta, "err", err)
			} else if err == nil && failing {
				log.Info("metadata server reachable again", "meta", cfg.Meta)
			}
			failing = err != nil
		}
	}()
	if ready != nil {
		ready(addr, id)
	}
	err = srv.Serve(l)
	srv.Close()
	return err
}
