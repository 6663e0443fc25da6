// Package meta is the file system's metadata server: the name space,
// attributes and file layouts, kept in an embedded bbolt store.
//
// Why bbolt: one file, B+tree with copy-on-write pages and an fsync per
// commit, so an acknowledged transaction survives kill -9 and a torn one never
// shows (create/rename/unlink are single transactions). Its single-writer rule
// is met with group commit: every mutation queued while the previous commit
// was syncing goes into the next transaction, so many clients share one
// fsync. Reads run in parallel read transactions. Pebble would add a
// write-ahead log and compactions that a name space of this size does not
// need.
package meta

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	bolt "go.etcd.io/bbolt"
)

const (
	errnoNoEnt  = syscall.ENOENT
	errnoNotDir = syscall.ENOTDIR

	// LiveWindow: an I/O server heard from within this long gets new files.
	LiveWindow  = 30 * time.Second
	maxSymlinks = 40
	maxName     = 255
	readdirMax  = 4096
)

// Config configures a metadata server.
type Config struct {
	// Data is the directory holding the store (meta.db).
	Data string
	// DefaultStripeSize applies where neither the file nor its directories
	// set one (default layout.DefaultStripeSize).
	DefaultStripeSize uint32
	Log               *slog.Logger
	// Security: the cluster secret (nil: DATA/cluster.secret, created at
	// the first start) and optional TLS. Limits: see proto.Limits.
	Security proto.Security
	Limits   proto.Limits

	// Reserve is the percentage of an I/O server's capacity kept free: a
	// server with less free space gets no new files (0: DefaultReserve;
	// negative: none).
	Reserve float64
	// HTTP is the address of /metrics and /healthz ("": none).
	HTTP string
	// HTTPDerived: HTTP was derived, not asked for; if it cannot be bound
	// the daemon logs that and serves without it.
	HTTPDerived bool
}

// Service implements the metadata requests. Create it with Open.
type Service struct {
	db      *bolt.DB
	log     *slog.Logger
	defSize uint32

	commits chan *commit
	done    chan struct{}
	wg      sync.WaitGroup

	rot    atomic.Uint32 // rotates the first server of new layouts
	kick   chan struct{} // wakes the reclaimer
	iodsMu sync.Mutex
	iods   map[uint32]proto.ServerInfo
	pool   proto.Pool
	sec    proto.Security
	limits proto.Limits

	cluster string  // this file system's cluster ID, made at the first start
	reserve float64 // percent of capacity kept free
	started time.Time
	regMu   sync.Mutex       // one registration decision at a time
	heard   map[uint32]int64 // last registration since this start (ns); persisted Seen times prove nothing

	watchState // client cache invalidation (watch.go)
}

type commit struct {
	fn  func(tx) error
	err chan error
}

// Open opens (or creates) the store under cfg.Data and starts the committer
// and the space reclaimer.
func Open(cfg Config) (*Service, error) {
	db, err := openDB(filepath.Join(cfg.Data, "meta.db"))
	if err != nil {
		return nil, err
	}
	if cfg.Security.Cred == nil {
		if cfg.Security.Cred, err = proto.EnsureSecretFile(filepath.Join(cfg.Data, proto.SecretFileName)); err != nil {
			db.Close()
			return nil, err
		}
	}
	s := &Service{
		sec: cfg.Security, limits: cfg.Limits,
		db: db, log: cfg.Log, defSize: cfg.DefaultStripeSize,
		commits: make(chan *commit, 1024), done: make(chan struct{}),
		kick: make(chan struct{}, 1), iods: map[uint32]proto.ServerInfo{},
		reserve: cfg.Reserve, started: time.Now(), heard: map[uint32]int64{},
	}
	switch {
	case s.reserve == 0:
		s.reserve = DefaultReserve
	case s.reserve < 0:
		s.reserve = 0
	}
	if s.cluster, err = clusterID(db); err != nil {
		db.Close()
		return nil, err
	}
	s.pool.Security = cfg.Security
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.defSize == 0 {
		s.defSize = layout.DefaultStripeSize
	}
	err = db.View(func(btx *bolt.Tx) error {
		return btx.Bucket(bIOD).ForEach(func(k, v []byte) error {
			si, err := decodeServer(v)
			if err != nil {
				return err
			}
			s.iods[si.ID] = si
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.wg.Add(2)
	go s.committer()
	go s.reclaimer()
	s.startPosix()
	return s, nil
}

// Close stops the background work and closes the store.
func (s *Service) Close() error {
	close(s.done)
	s.wg.Wait()
	s.pool.Close()
	return s.db.Close()
}

// committer runs queued mutations in shared transactions (group commit).
// A mutation that fails with an errno has made no writes (every operation
// checks before it writes), so the others in its batch still commit; any
// other failure aborts the batch and each mutation is retried on its own.
func (s *Service) committer() {
	defer s.wg.Done()
	for {
		var batch []*commit
		select {
		case c := <-s.commits:
			batch = append(batch, c)
		case <-s.done:
			return
		}
	drain:
		for len(batch) < 256 {
			select {
			case c := <-s.commits:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		errs := make([]error, len(batch))
		err := s.db.Update(func(btx *bolt.Tx) error {
			t := tx{Tx: btx, now: time.Now().UnixNano()}
			for i, c := range batch {
				errs[i] = c.fn(t)
				var re *proto.RemoteError
				if errs[i] != nil && !errors.As(errs[i], &re) {
					return errs[i]
				}
			}
			return nil
		})
		if err == nil {
			for i, c := range batch {
				c.err <- errs[i]
			}
			continue
		}
		for _, c := range batch {
			c.err <- s.db.Update(func(btx *bolt.Tx) error {
				return c.fn(tx{Tx: btx, now: time.Now().UnixNano()})
			})
		}
	}
}

// update queues fn for the next group commit and waits until it is durable.
func (s *Service) update(ctx context.Context, fn func(tx) error) error {
	c := &commit{fn: fn, err: make(chan error, 1)}
	select {
	case s.commits <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errors.New("metadata server shutting down")
	}
	// Once queued the mutation will be applied; wait for its outcome even
	// if the caller gives up, so a reply never precedes durability.
	return <-c.err
}

func (s *Service) view(fn func(tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error { return fn(tx{Tx: btx, now: time.Now().UnixNano()}) })
}

func attrReply(n *inode) *proto.AttrReply { return &proto.AttrReply{Attr: n.Attr} }

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("invalid name %q", name))
	case len(name) > maxName:
		return proto.Errorf(syscall.ENAMETOOLONG, fmt.Sprintf("%.40s...: file name too long", name))
	case strings.ContainsAny(name, "/\x00"):
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("invalid name %q: contains '/' or NUL", name))
	}
	return nil
}

func exists(name string) error {
	return proto.Errorf(syscall.EEXIST, name+": file exists")
}

// Handle serves one request.
func (s *Service) Handle(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if r, err, ok := s.handlePosix(ctx, req); ok {
		return r, err
	}
	if r, err, ok := s.handleMembers(ctx, req); ok {
		return r, err
	}
	if r, err, ok := s.handleWatch(ctx, req); ok {
		return r, err
	}
	switch m := req.(type) {
	case *proto.Lookup:
		var r proto.Msg
		err := s.view(func(t tx) error {
			if _, err := t.dir(m.Parent); err != nil {
				return err
			}
			n, err := t.lookup(m.Parent, m.Name)
			if err == nil {
				r = attrReply(n)
			}
			return err
		})
		return r, err
	case *proto.Walk:
		var r proto.Msg
		err := s.view(func(t tx) error {
			n, err := t.walk(m.Path)
			if err == nil {
				r = attrReply(n)
			}
			return err
		})
		return r, err
	case *proto.GetAttr:
		var r proto.Msg
		err := s.view(func(t tx) error {
			n, err := t.inode(m.Ino)
			if err == nil {
				r = attrReply(n)
			}
			return err
		})
		return r, err
	case *proto.Readlink:
		var r proto.Msg
		err := s.view(func(t tx) error {
			n, err := t.inode(m.Ino)
			if err != nil {
				return err
			}
			if !n.isLink() {
				return proto.Errorf(syscall.EINVAL, fmt.Sprintf("inode %d: not a symbolic link", m.Ino))
			}
			r = &proto.TargetReply{Target: n.Target}
			return nil
		})
		return r, err
	case *proto.Readdir:
		return s.readdir(m)
	case *proto.SetAttr:
		return s.setattr(ctx, m)
	case *proto.Create:
		return s.create(ctx, m)
	case *proto.Mkdir:
		return s.mknode(ctx, m.Parent, m.Name, func(t tx, ino uint64) *inode {
			return &inode{Attr: proto.Attr{Ino: ino, Mode: sIFDIR | m.Mode&0o7777, Uid: m.Uid, Gid: m.Gid, Nlink: 2,
				Atime: t.now, Mtime: t.now, Ctime: t.now}, Parent: m.Parent}
		})
	case *proto.Symlink:
		if m.Target == "" {
			return nil, proto.Errorf(syscall.ENOENT, "empty symbolic link target")
		}
		return s.mknode(ctx, m.Parent, m.Name, func(t tx, ino uint64) *inode {
			return &inode{Attr: proto.Attr{Ino: ino, Mode: sIFLNK | 0o777, Uid: m.Uid, Gid: m.Gid, Nlink: 1,
				Size: uint64(len(m.Target)), Atime: t.now, Mtime: t.now, Ctime: t.now}, Target: m.Target}
		})
	case *proto.Link:
		return s.link(ctx, m)
	case *proto.Unlink:
		return s.remove(ctx, m.Parent, m.Name, false)
	case *proto.Rmdir:
		return s.remove(ctx, m.Parent, m.Name, true)
	case *proto.Rename:
		return nil, s.rename(ctx, m)
	case *proto.SetLayout:
		return s.setLayout(ctx, m)
	case *proto.Statfs:
		return s.statfs()
	case *proto.Register:
		return s.register(ctx, m)
	case *proto.Servers:
		return &proto.ServersReply{Servers: s.servers(), Cluster: s.cluster}, nil
	case *proto.ReplaceServer:
		return s.replace(ctx, m)
	case *proto.RefCheck:
		return s.refCheck(m)
	}
	return nil, proto.Errorf(syscall.EOPNOTSUPP, fmt.Sprintf("the metadata server does not serve op %d", req.Op()))
}

// walk resolves an absolute path, following symbolic links in every
// component but the last.
func (t tx) walk(p string) (*inode, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("%q: path must be absolute", p))
	}
	cur, err := t.inode(RootIno)
	if err != nil {
		return nil, err
	}
	comps := strings.Split(p, "/")
	links := 0
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		if c == "" || c == "." {
			continue
		}
		if !cur.isDir() {
			return nil, proto.Errorf(syscall.ENOTDIR, p+": not a directory")
		}
		if c == ".." {
			if cur, err = t.inode(cur.Parent); err != nil {
				return nil, err
			}
			continue
		}
		ino, ok := t.child(cur.Ino, c)
		if !ok {
			return nil, proto.Errorf(syscall.ENOENT, p+": no such file or directory")
		}
		n, err := t.inode(ino)
		if err != nil {
			return nil, err
		}
		last := true
		for _, rest := range comps[i+1:] {
			if rest != "" {
				last = false
				break
			}
		}
		if n.isLink() && !last {
			if links++; links > maxSymlinks {
				return nil, proto.Errorf(syscall.ELOOP, p+": too many levels of symbolic links")
			}
			rest := append(strings.Split(n.Target, "/"), comps[i+1:]...)
			if strings.HasPrefix(n.Target, "/") {
				cur, _ = t.inode(RootIno)
			}
			comps, i = rest, -1
			continue
		}
		cur = n
	}
	return cur, nil
}

func (s *Service) readdir(m *proto.Readdir) (proto.Msg, error) {
	limit := int(m.Limit)
	if limit <= 0 || limit > readdirMax {
		limit = readdirMax
	}
	r := &proto.EntriesReply{}
	err := s.view(func(t tx) error {
		if _, err := t.dir(m.Ino); err != nil {
			return err
		}
		prefix := u64key(m.Ino)
		c := t.Bucket(bDirent).Cursor()
		k, v := c.Seek(direntKey(m.Ino, m.After))
		if k != nil && m.After != "" && string(k[8:]) == m.After {
			k, v = c.Next()
		}
		bytes := 0
		for ; k != nil && string(k[:8]) == string(prefix); k, v = c.Next() {
			if len(r.Entries) >= limit || bytes > 8<<20 {
				r.More = true
				break
			}
			n, err := t.inode(binary.BigEndian.Uint64(v))
			if err != nil {
				return err
			}
			name := string(k[8:])
			r.Entries = append(r.Entries, proto.Entry{Name: name, Attr: n.Attr})
			bytes += len(name) + 80 + 4*len(n.Servers)
		}
		return nil
	})
	return r, err
}

func (s *Service) setattr(ctx context.Context, m *proto.SetAttr) (proto.Msg, error) {
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if m.Mask&(proto.SetSize|proto.SetSizeExtend) != 0 && !n.isReg() {
			if n.isDir() {
				return proto.Errorf(syscall.EISDIR, fmt.Sprintf("inode %d: is a directory", m.Ino))
			}
			return proto.Errorf(syscall.EINVAL, fmt.Sprintf("inode %d: not a regular file", m.Ino))
		}
		if m.Mask&proto.SetMode != 0 {
			n.Mode = n.Mode&sIFMT | m.Mode&0o7777
		}
		if m.Mask&proto.SetUid != 0 {
			n.Uid = m.Uid
		}
		if m.Mask&proto.SetGid != 0 {
			n.Gid = m.Gid
		}
		if m.Mask&proto.SetSize != 0 {
			n.Size = m.Size
			n.Mtime = t.now
		}
		if m.Mask&proto.SetSizeExtend != 0 && m.Size > n.Size {
			n.Size = m.Size
		}
		if m.Mask&proto.SetAtime != 0 {
			n.Atime = m.Atime
		}
		if m.Mask&proto.SetMtime != 0 {
			n.Mtime = m.Mtime
		}
		n.Ctime = t.now
		r = attrReply(n)
		return t.put(n)
	})
	return r, err
}

// newChild checks that parent is a directory without an entry name and
// returns it.
func (t tx) newChild(parent uint64, name string) (*inode, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	p, err := t.dir(parent)
	if err != nil {
		return nil, err
	}
	if _, ok := t.child(parent, name); ok {
		return nil, exists(name)
	}
	return p, nil
}

// link adds entry name -> n in p and stamps p.
func (t tx) addEntry(p *inode, name string, n *inode) error {
	if err := t.setChild(p.Ino, name, n.Ino); err != nil {
		return err
	}
	if n.isDir() {
		p.Nlink++
	}
	p.Mtime, p.Ctime = t.now, t.now
	return t.put(p)
}

func (s *Service) mknode(ctx context.Context, parent uint64, name string, mk func(tx, uint64) *inode) (proto.Msg, error) {
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		p, err := t.newChild(parent, name)
		if err != nil {
			return err
		}
		ino, err := t.nextIno()
		if err != nil {
			return err
		}
		n := mk(t, ino)
		if err := t.put(n); err != nil {
			return err
		}
		r = attrReply(n)
		return t.addEntry(p, name, n)
	})
	return r, err
}

func (s *Service) create(ctx context.Context, m *proto.Create) (proto.Msg, error) {
	if m.StripeSize != 0 {
		if err := layout.ValidStripeSize(int64(m.StripeSize)); err != nil {
			return nil, proto.Errorf(syscall.EINVAL, err.Error())
		}
	}
	if m.StripeCount > layout.MaxServers && m.StripeCount != proto.AllServers {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d over the limit of %d", m.StripeCount, layout.MaxServers))
	}
	s.awaitServers(ctx)
	var r *proto.AttrReply
	err := s.update(ctx, func(t tx) error {
		if err := checkName(m.Name); err != nil {
			return err
		}
		p, err := t.dir(m.Parent)
		if err != nil {
			return err
		}
		if ino, ok := t.child(m.Parent, m.Name); ok {
			if m.Excl {
				return exists(m.Name)
			}
			n, err := t.inode(ino)
			if err != nil {
				return err
			}
			if n.isDir() {
				return proto.Errorf(syscall.EISDIR, m.Name+": is a directory")
			}
			r = attrReply(n)
			return nil
		}
		size, count := m.StripeSize, m.StripeCount
		if size == 0 || count == 0 {
			ps, pc, err := t.policy(p)
			if err != nil {
				return err
			}
			size, count = cmp.Or(size, ps), cmp.Or(count, pc)
		}
		if size == 0 {
			size = s.defSize
		}
		servers, err := s.pick(int(count))
		if err != nil {
			return err
		}
		ino, err := t.nextIno()
		if err != nil {
			return err
		}
		n := &inode{Attr: proto.Attr{Ino: ino, Mode: sIFREG | m.Mode&0o7777, Uid: m.Uid, Gid: m.Gid, Nlink: 1,
			Atime: t.now, Mtime: t.now, Ctime: t.now, StripeSize: size, StripeCount: uint32(len(servers)), Servers: servers}}
		if err := t.put(n); err != nil {
			return err
		}
		r = &proto.AttrReply{Attr: n.Attr, Created: true}
		return t.addEntry(p, m.Name, n)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// pick chooses count servers (0 or AllServers: every usable one) for a new
// file among the usable servers (see usable); the starting point rotates so
// that files spread over all servers even when each has one stripe.
func (s *Service) pick(count int) ([]uint32, error) {
	all := s.servers()
	live := usable(all)
	if len(live) == 0 {
		if len(all) == 0 {
			return nil, proto.Errorf(syscall.ENOSPC, "no I/O servers registered: start `corral iod --meta ...` first")
		}
		return nil, proto.Errorf(syscall.ENOSPC, "no usable I/O server: "+stateSummary(all)+" (see `corral fs servers`)")
	}
	if count <= 0 || count == int(proto.AllServers) {
		count = len(live)
	}
	if count > len(live) {
		return nil, proto.Errorf(syscall.ENOSPC, fmt.Sprintf("stripe count %d, but only %d I/O servers are usable: %s (use a stripe count of at most %d, or all)",
			count, len(live), stateSummary(all), len(live)))
	}
	start := int(s.rot.Add(1))
	out := make([]uint32, count)
	for i := range out {
		out[i] = live[(start+i)%len(live)]
	}
	return out, nil
}

func (s *Service) link(ctx context.Context, m *proto.Link) (proto.Msg, error) {
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if n.isDir() {
			return proto.Errorf(syscall.EPERM, fmt.Sprintf("%s: hard link not allowed for directory", m.Name))
		}
		p, err := t.newChild(m.Parent, m.Name)
		if err != nil {
			return err
		}
		n.Nlink++
		n.Ctime = t.now
		if err := t.put(n); err != nil {
			return err
		}
		r = attrReply(n)
		return t.addEntry(p, m.Name, n)
	})
	return r, err
}

func (s *Service) remove(ctx context.Context, parent uint64, name string, dir bool) (proto.Msg, error) {
	reclaim := false
	err := s.update(ctx, func(t tx) error {
		if err := checkName(name); err != nil {
			return err
		}
		p, err := t.dir(parent)
		if err != nil {
			return err
		}
		n, err := t.lookup(parent, name)
		if err != nil {
			return err
		}
		switch {
		case dir && !n.isDir():
			return proto.Errorf(syscall.ENOTDIR, name+": not a directory")
		case !dir && n.isDir():
			return proto.Errorf(syscall.EISDIR, name+": is a directory")
		case dir && !t.empty(n.Ino):
			return proto.Errorf(syscall.ENOTEMPTY, name+": directory not empty")
		}
		if err := t.delChild(parent, name); err != nil {
			return err
		}
		if dir {
			p.Nlink--
		}
		p.Mtime, p.Ctime = t.now, t.now
		if err := t.put(p); err != nil {
			return err
		}
		reclaim = n.isReg() && n.Nlink == 1
		return t.drop(n)
	})
	if err == nil && reclaim {
		s.wake()
	}
	return nil, err
}

func (s *Service) rename(ctx context.Context, m *proto.Rename) error {
	if m.Flags&^(proto.RenameNoReplace|proto.RenameExchange) != 0 || m.Flags == proto.RenameNoReplace|proto.RenameExchange {
		return proto.Errorf(syscall.EINVAL, fmt.Sprintf("rename: invalid flags %#x", m.Flags))
	}
	reclaim := false
	err := s.update(ctx, func(t tx) error {
		op, np, src, err := t.renameEnds(m)
		if err != nil {
			return err
		}
		var dst *inode
		if ino, ok := t.child(m.NewParent, m.NewName); ok {
			if dst, err = t.inode(ino); err != nil {
				return err
			}
		}
		if dst != nil && dst.Ino == src.Ino {
			return nil // same file: rename(2) does nothing
		}
		if m.Flags&proto.RenameNoReplace != 0 && dst != nil {
			return exists(m.NewName)
		}
		if m.Flags&proto.RenameExchange != 0 {
			if dst == nil {
				return proto.Errorf(syscall.ENOENT, m.NewName+": no such file or directory")
			}
			return t.exchange(m, op, np, src, dst)
		}
		if src.isDir() {
			if err := t.notUnder(np.Ino, src.Ino, m.NewName); err != nil {
				return err
			}
		}
		if dst != nil {
			switch {
			case src.isDir() && !dst.isDir():
				return proto.Errorf(syscall.ENOTDIR, m.NewName+": not a directory")
			case !src.isDir() && dst.isDir():
				return proto.Errorf(syscall.EISDIR, m.NewName+": is a directory")
			case dst.isDir() && !t.empty(dst.Ino):
				return proto.Errorf(syscall.ENOTEMPTY, m.NewName+": directory not empty")
			}
			if dst.isDir() {
				np.Nlink--
			}
			reclaim = dst.isReg() && dst.Nlink == 1
			if err := t.drop(dst); err != nil {
				return err
			}
		}
		if err := t.delChild(op.Ino, m.OldName); err != nil {
			return err
		}
		if err := t.setChild(np.Ino, m.NewName, src.Ino); err != nil {
			return err
		}
		if src.isDir() && op.Ino != np.Ino {
			op.Nlink--
			np.Nlink++
			src.Parent = np.Ino
		}
		src.Ctime = t.now
		op.Mtime, op.Ctime, np.Mtime, np.Ctime = t.now, t.now, t.now, t.now
		for _, n := range []*inode{src, op, np} {
			if err := t.put(n); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && reclaim {
		s.wake()
	}
	return err
}

// renameEnds checks a rename's names and returns its old and new parent
// directories (one record when they are the same) and its source.
func (t tx) renameEnds(m *proto.Rename) (op, np, src *inode, err error) {
	for _, n := range []string{m.OldName, m.NewName} {
		if err := checkName(n); err != nil {
			return nil, nil, nil, err
		}
	}
	if op, err = t.dir(m.OldParent); err != nil {
		return nil, nil, nil, err
	}
	if np, err = t.dir(m.NewParent); err != nil {
		return nil, nil, nil, err
	}
	if op.Ino == np.Ino {
		np = op // one record, updated once
	}
	if src, err = t.lookup(m.OldParent, m.OldName); err != nil {
		return nil, nil, nil, err
	}
	return op, np, src, nil
}

// notUnder fails when dir is anc or lies below it: a directory cannot move
// into itself.
func (t tx) notUnder(dir, anc uint64, name string) error {
	for seen := 0; ; seen++ {
		if dir == anc {
			return proto.Errorf(syscall.EINVAL, name+": cannot move a directory into itself")
		}
		if dir == RootIno || seen > 1<<16 {
			return nil
		}
		n, err := t.inode(dir)
		if err != nil {
			return err
		}
		dir = n.Parent
	}
}

func (t tx) exchange(m *proto.Rename, op, np, src, dst *inode) error {
	if src.isDir() {
		if err := t.notUnder(np.Ino, src.Ino, m.NewName); err != nil {
			return err
		}
	}
	if dst.isDir() {
		if err := t.notUnder(op.Ino, dst.Ino, m.OldName); err != nil {
			return err
		}
	}
	if err := t.setChild(op.Ino, m.OldName, dst.Ino); err != nil {
		return err
	}
	if err := t.setChild(np.Ino, m.NewName, src.Ino); err != nil {
		return err
	}
	if op.Ino != np.Ino {
		if src.isDir() {
			src.Parent = np.Ino
			op.Nlink--
			np.Nlink++
		}
		if dst.isDir() {
			dst.Parent = op.Ino
			np.Nlink--
			op.Nlink++
		}
	}
	src.Ctime, dst.Ctime = t.now, t.now
	op.Mtime, op.Ctime, np.Mtime, np.Ctime = t.now, t.now, t.now, t.now
	for _, n := range []*inode{src, dst, op, np} {
		if err := t.put(n); err != nil {
			return err
		}
	}
	return nil
}

// policy is the layout new files in directory d take, field by field from
// the nearest directory up to the root that sets it (0: none does). It is
// resolved at each create, so a policy set on /www later applies to every
// directory below it that sets none of its own.
func (t tx) policy(d *inode) (size, count uint32, err error) {
	for depth := 0; ; depth++ {
		size, count = cmp.Or(size, d.StripeSize), cmp.Or(count, d.StripeCount)
		if size != 0 && count != 0 || d.Ino == RootIno || depth > maxDepth {
			return size, count, nil
		}
		if d, err = t.inode(d.Parent); err != nil {
			return 0, 0, err
		}
	}
}

// maxDepth bounds policy's walk up should parent pointers ever loop.
const maxDepth = 4096

func (s *Service) setLayout(ctx context.Context, m *proto.SetLayout) (proto.Msg, error) {
	if m.StripeSize != 0 {
		if err := layout.ValidStripeSize(int64(m.StripeSize)); err != nil {
			return nil, proto.Errorf(syscall.EINVAL, err.Error())
		}
	}
	if m.StripeCount > layout.MaxServers && m.StripeCount != proto.AllServers {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d over the limit of %d", m.StripeCount, layout.MaxServers))
	}
	if m.StripeCount != 0 && m.StripeCount != proto.AllServers {
		// A policy no file could get is refused now, not at the first put.
		s.awaitServers(ctx)
		if n := len(s.servers()); int(m.StripeCount) > n {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d, but the file system has %d I/O servers (use 1..%d, or all)", m.StripeCount, n, n))
		}
	}
	var r proto.Msg
	err := s.update(ctx, func(t tx) error {
		n, err := t.inode(m.Ino)
		if err != nil {
			return err
		}
		if !n.isDir() {
			return proto.Errorf(syscall.EINVAL, "not a directory: a file's layout is fixed when it is created; set the layout on its directory, or create it with one")
		}
		n.StripeSize, n.StripeCount = m.StripeSize, m.StripeCount
		n.Ctime = t.now
		r = attrReply(n)
		return t.put(n)
	})
	return r, err
}

func (s *Service) statfs() (proto.Msg, error) {
	r := &proto.StatfsReply{}
	for _, si := range s.servers() {
		r.Capacity += si.Capacity
		r.Free += si.Free
		r.Servers++
	}
	err := s.view(func(t tx) error {
		r.Files = uint64(t.Bucket(bInode).Stats().KeyN)
		return nil
	})
	return r, err
}

// servers lists the known I/O servers with their state as of now.
func (s *Service) servers() []proto.ServerInfo {
	cut := time.Now().Add(-LiveWindow).UnixNano()
	s.iodsMu.Lock()
	out := make([]proto.ServerInfo, 0, len(s.iods))
	for _, si := range s.iods {
		if si.State != proto.ServerLost && si.State != proto.ServerReplacing {
			switch h, ok := s.heard[si.ID]; {
			case !ok || h < cut:
				si.State = proto.ServerDown
			case si.Capacity > 0 && float64(si.Free) < float64(si.Capacity)*s.reserve/100:
				si.State = proto.ServerFull
			default:
				si.State = proto.ServerUp
			}
		}
		out = append(out, si)
	}
	s.iodsMu.Unlock()
	slices.SortFunc(out, func(a, b proto.ServerInfo) int { return int(a.ID) - int(b.ID) })
	return out
}

func encodeServer(si proto.ServerInfo) []byte {
	r := proto.ServersReply{Servers: []proto.ServerInfo{si}}
	e := proto.Enc{}
	r.Encode(&e)
	return e.B
}

func decodeServer(b []byte) (proto.ServerInfo, error) {
	var r proto.ServersReply
	d := proto.Dec{B: b}
	r.Decode(&d)
	if d.Err() == nil && len(r.Servers) == 1 {
		return r.Servers[0], nil
	}
	// A record from before server states: count, ID, address, capacity,
	// free, seen.
	var si proto.ServerInfo
	d = proto.Dec{B: b}
	n := d.U32()
	si.ID, si.Addr, si.Capacity, si.Free, si.Seen = d.U32(), d.Str(), d.U64(), d.U64(), d.I64()
	if d.Err() != nil || n != 1 {
		return proto.ServerInfo{}, fmt.Errorf("corrupt I/O server record")
	}
	return si, nil
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reclaimer asks I/O servers to delete the objects of removed files. The
// queue is in the store, so space is reclaimed after a crash or while a
// server was down.
func (s *Service) reclaimer() {
	defer s.wg.Done()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		case <-s.kick:
		}
		s.reclaimOnce()
	}
}

func (s *Service) reclaimOnce() {
	type job struct {
		ino     uint64
		servers []uint32
	}
	var jobs []job
	s.view(func(t tx) error {
		return t.Bucket(bReclaim).ForEach(func(k, v []byte) error {
			d := proto.Dec{B: v}
			jobs = append(jobs, job{binary.BigEndian.Uint64(k), d.U32s()})
			return nil
		})
	})
	if len(jobs) == 0 {
		return
	}
	addrs := map[uint32]string{}
	for _, si := range s.servers() {
		addrs[si.ID] = si.Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, j := range jobs {
		// The list keeps layout positions (the stripe index names the
		// object); a server done with its object becomes 0.
		left := make([]uint32, len(j.servers))
		done, pending := 0, 0
		for k, id := range j.servers {
			if id == 0 {
				continue
			}
			addr, ok := addrs[id]
			if !ok {
				done++
				continue // server forgotten: nothing to ask
			}
			if _, err := s.pool.Call(ctx, addr, &proto.Remove{Handle: j.ino, Index: uint32(k)}); err != nil {
				left[k] = id
				pending++
				continue
			}
			done++
		}
		if done == 0 && pending > 0 {
			continue
		}
		s.update(ctx, func(t tx) error {
			if pending == 0 {
				return t.Bucket(bReclaim).Delete(u64key(j.ino))
			}
			e := proto.Enc{}
			e.U32s(left)
			return t.Bucket(bReclaim).Put(u64key(j.ino), e.B)
		})
	}
}

// Run serves the metadata protocol on listen until ctx ends. ready, if not
// nil, is called with the bound address once accepting.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string)) error {
	s, err := Open(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stopHTTP := context.WithCancel(ctx) // the HTTP listener ends with Run
	defer stopHTTP()
	h, err := s.serveHTTP(ctx, cfg.HTTP, cfg.HTTPDerived)
	if err != nil {
		l.Close()
		return err
	}
	srv := &proto.Server{Handler: h, Log: s.log, MaxInflight: 256, Security: s.sec, Limits: s.limits}
	s.log.Info("metadata server", "cluster", s.cluster, "reserve_percent", s.reserve)
	go func() { <-ctx.Done(); srv.Close() }()
	if ready != nil {
		ready(l.Addr().String())
	}
	err = srv.Serve(l)
	srv.Close()
	return err
}
