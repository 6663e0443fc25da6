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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/durable"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
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
	// set one (default layout.DefaultStripeSize). It only seeds the file
	// system's default when the store is made (the first start): the value
	// is kept in the replicated state, so members started with other flags
	// and later restarts place alike.
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

	// Engine builds the replicated log over the metadata state machine
	// (nil: replog.NewSingle, one process with group commit).
	Engine func(sm replog.StateMachine) (replog.Engine, error)

	// LostAfter: a server down this long is lost and its copies are made
	// again elsewhere (0: DefaultLostAfter). HealRate: heal copies at most
	// this many bytes per second over all servers (0: DefaultHealRate).
	LostAfter time.Duration
	HealRate  int64

	addr string // the address Run listens on, reported by the engine
}

// Service implements the metadata requests. Create it with Open.
type Service struct {
	m       *machine
	eng     replog.Engine
	log     *slog.Logger
	defSize uint32

	done chan struct{}
	// life ends at Close: background proposals (reclaim, reaping) stop
	// waiting for an engine without quorum.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	rot    atomic.Uint32 // rotates the first server of new layouts
	kick   chan struct{} // wakes the reclaimer
	iodsMu sync.Mutex
	iods   map[uint32]proto.ServerInfo
	pool   proto.Pool
	sec    proto.Security
	limits proto.Limits

	clusterMu sync.Mutex
	cluster   string  // this file system's cluster ID, made at the first start
	reserve   float64 // percent of capacity kept free
	// leaderSince: when this member last became the leader (ns; 0: it does
	// not lead). Placement, reclaim and reaping run on the leader only.
	leaderSince atomic.Int64
	// firstLeader: this member led when the store had no cluster ID yet
	// (a new file system), so no client can have cached it before.
	firstLeader atomic.Bool
	regMu       sync.Mutex       // one registration decision at a time
	heard       map[uint32]int64 // last registration since leading (ns); persisted Seen times prove nothing

	bk *backups // online backups being fetched (members.go)

	watchState // client cache invalidation (watch.go)

	hl *healer // heal and re-replication (heal.go, lost.go)
}

// tightenData makes the data directory (metadata, Raft log, the cluster
// secret) the owner's only: mode 0700, made if missing; an older install's
// directory and its files (and the Raft log's) lose group and others' bits.
func tightenData(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range []string{dir, filepath.Join(dir, "raft")} {
		fi, err := os.Stat(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := tightenMode(d, fi); err != nil {
			return err
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !e.Type().IsRegular() && !e.IsDir() {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if err := tightenMode(filepath.Join(d, e.Name()), fi); err != nil {
				return err
			}
		}
	}
	return nil
}

func tightenMode(p string, fi os.FileInfo) error {
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		if err := os.Chmod(p, m&^0o077); err != nil {
			return fmt.Errorf("tighten the mode of %s: %w", p, err)
		}
	}
	return nil
}

// Open opens (or creates) the store under cfg.Data, starts the engine over
// it and the leader's background work (reclaim, orphan reaping).
func Open(cfg Config) (*Service, error) {
	if err := tightenData(cfg.Data); err != nil {
		return nil, err
	}
	// Under an engine with its own durable log the store skips fsync
	// per commit (checkpoint.go); a one-process engine's store syncs.
	m, err := openMachineMode(filepath.Join(cfg.Data, "meta.db"), cfg.Engine != nil)
	if err != nil {
		return nil, err
	}
	if cfg.Security.Cred == nil {
		if cfg.Security.Cred, err = proto.EnsureSecretFile(filepath.Join(cfg.Data, proto.SecretFileName)); err != nil {
			m.close()
			return nil, err
		}
	}
	// A first start created meta.db (and maybe the secret): their names
	// must be durable before anything in them is acknowledged, or a cut
	// would start a new cluster.
	if err := durable.SyncDir(cfg.Data); err != nil {
		m.close()
		return nil, err
	}
	s := &Service{
		sec: cfg.Security, limits: cfg.Limits,
		m: m, log: cfg.Log, defSize: cfg.DefaultStripeSize,
		done: make(chan struct{}),
		kick: make(chan struct{}, 1), iods: map[uint32]proto.ServerInfo{},
		reserve: cfg.Reserve, heard: map[uint32]int64{}, bk: newBackups(),
		hl: newHealer(cfg.LostAfter, cfg.HealRate),
	}
	s.life, s.stop = context.WithCancel(context.Background())
	switch {
	case s.reserve == 0:
		s.reserve = DefaultReserve
	case s.reserve < 0:
		s.reserve = 0
	}
	s.pool.Security = cfg.Security
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.defSize == 0 {
		s.defSize = layout.DefaultStripeSize
	}
	if err := s.loadServers(); err != nil {
		m.close()
		return nil, err
	}
	m.hooks = hooks{notify: s.notify, server: s.setServer, reclaim: s.wake, restored: s.restored,
		halted: func(err error) { s.log.Error("METADATA MEMBER HALTED: it applies no more commands", "err", err) }}
	if cfg.Engine == nil {
		s.eng = replog.NewSingle(m, cfg.addr)
	} else if s.eng, err = cfg.Engine(m); err != nil {
		m.close()
		return nil, fmt.Errorf("start the metadata log: %w", err)
	} else if _, ok := s.eng.(replog.DurableLog); !ok {
		// Nothing applied yet (only the Raft engine applies on its
		// own at start): this engine's Apply must be the durable one.
		m.mu.Lock()
		err = m.undefer()
		m.mu.Unlock()
		if err != nil {
			s.eng.Close()
			m.close()
			return nil, err
		}
	}
	// A single member leads at once: a new store gets its cluster ID and
	// root before Open returns.
	if err := s.checkLeader(); err != nil {
		s.eng.Close()
		m.close()
		return nil, err
	}
	s.wg.Add(4)
	go s.leadership()
	go s.reclaimer()
	go s.healerLoop()
	s.startPosix()
	return s, nil
}

// Engine is the replicated log the service runs on.
func (s *Service) Engine() replog.Engine { return s.eng }

// Machine is the metadata state machine (for snapshots and backups).
func (s *Service) Machine() replog.StateMachine { return s.m }

// Close stops the background work, the engine and closes the store.
func (s *Service) Close() error {
	close(s.done)
	s.stop()
	s.wg.Wait()
	s.pool.Close()
	err := s.eng.Close()
	if cerr := s.m.close(); err == nil {
		err = cerr
	}
	return err
}

// loadServers reads the I/O server records into memory.
func (s *Service) loadServers() error {
	iods := map[uint32]proto.ServerInfo{}
	err := s.m.view(func(btx *bolt.Tx) error {
		return btx.Bucket(bIOD).ForEach(func(k, v []byte) error {
			si, err := decodeServer(v)
			if err != nil {
				return err
			}
			iods[si.ID] = si
			return nil
		})
	})
	if err != nil {
		return err
	}
	s.iodsMu.Lock()
	s.iods = iods
	s.iodsMu.Unlock()
	return nil
}

// setServer is the hook of an applied server record (every member).
func (s *Service) setServer(si proto.ServerInfo) {
	s.iodsMu.Lock()
	s.iods[si.ID] = si
	s.iodsMu.Unlock()
}

// restored: the store was replaced by a snapshot.
func (s *Service) restored() {
	if err := s.loadServers(); err != nil {
		s.log.Error("read I/O servers of a restored snapshot", "err", err)
	}
	s.clusterMu.Lock()
	s.cluster = ""
	s.clusterMu.Unlock()
}

func (s *Service) view(fn func(tx) error) error {
	return s.m.view(func(btx *bolt.Tx) error { return fn(tx{Tx: btx, now: time.Now().UnixNano()}) })
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
	if m, ok := req.(*proto.Idem); ok {
		if m.Client == 0 || m.Req == nil || !proto.Mutating(m.Req.Op()) {
			return nil, proto.Errorf(syscall.EINVAL, "idem: a request ID needs a client ID and a metadata mutation")
		}
		ctx = context.WithValue(ctx, reqIDKey{}, reqID{m.Client, m.Seq, m.Done})
		req = m.Req
	}
	switch {
	case readOp(req.Op()):
		if err := s.barrier(ctx); err != nil {
			return nil, err
		}
	case leaderOp(req.Op()):
		// The term started after a barrier (becomeLeader); these rare
		// requests take one more each, cheap insurance for decisions on
		// the server records.
		if err := s.notLeader(ctx); err != nil {
			return nil, err
		}
		if err := s.barrier(ctx); err != nil {
			return nil, err
		}
	}
	if r, err, ok := s.handlePosix(ctx, req); ok {
		return r, err
	}
	if r, err, ok := s.handleMembers(ctx, req); ok {
		return r, err
	}
	if r, err, ok := s.handleWatch(ctx, req); ok {
		return r, err
	}
	if r, err, ok := s.handleRedundancy(ctx, req); ok {
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
		return s.proposeReq(ctx, req, nil)
	case *proto.Create:
		return s.create(ctx, m)
	case *proto.Reserve:
		return s.reserveInos(ctx, m)
	case *proto.Mkdir, *proto.Link, *proto.Unlink, *proto.Rmdir:
		return s.proposeReq(ctx, req, nil)
	case *proto.Symlink:
		if m.Target == "" {
			return nil, proto.Errorf(syscall.ENOENT, "empty symbolic link target")
		}
		return s.proposeReq(ctx, req, nil)
	case *proto.Rename:
		if m.Flags&^(proto.RenameNoReplace|proto.RenameExchange) != 0 || m.Flags == proto.RenameNoReplace|proto.RenameExchange {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("rename: invalid flags %#x", m.Flags))
		}
		return s.proposeReq(ctx, req, nil)
	case *proto.SetLayout:
		return s.setLayout(ctx, m)
	case *proto.Statfs:
		return s.statfs()
	case *proto.Register:
		return s.register(ctx, m)
	case *proto.Servers:
		return &proto.ServersReply{Servers: s.healFigures(s.servers()), Cluster: s.Cluster()}, nil
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

func (t tx) setattr(m *proto.SetAttr) (proto.Msg, error) {
	n, err := t.inode(m.Ino)
	if err != nil {
		return nil, err
	}
	{
		if m.Mask&(proto.SetSize|proto.SetSizeExtend) != 0 && !n.isReg() {
			if n.isDir() {
				return nil, proto.Errorf(syscall.EISDIR, fmt.Sprintf("inode %d: is a directory", m.Ino))
			}
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("inode %d: not a regular file", m.Ino))
		}
		if m.Mask&(proto.SetSize|proto.SetSizeExtend) != 0 {
			// Past this an I/O server could not hold the file's objects,
			// and clients (int64 sizes) would see a negative size.
			if lim := replicaLayout(n).MaxFileSize(); m.Size > uint64(lim) {
				return nil, proto.Errorf(syscall.EFBIG, fmt.Sprintf("inode %d: size %d past the largest this layout's I/O servers hold (%d)", m.Ino, m.Size, lim))
			}
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
	}
	// A cut to 0 keeps the stale records: a copy that missed the truncate
	// (its server down) is marked by the client, before or after this, and
	// still holds old bytes; only heal or removal clears records.
	return attrReply(n), t.put(n)
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

func (t tx) mknode(parent uint64, name string, mk func(uint64) *inode) (proto.Msg, error) {
	p, err := t.newChild(parent, name)
	if err != nil {
		return nil, err
	}
	ino, err := t.nextIno()
	if err != nil {
		return nil, err
	}
	n := mk(ino)
	if err := t.put(n); err != nil {
		return nil, err
	}
	return attrReply(n), t.addEntry(p, name, n)
}

// create checks the request's layout, waits for I/O servers after a start
// and proposes the create with the placement decided here.
func (s *Service) create(ctx context.Context, m *proto.Create) (proto.Msg, error) {
	if m.StripeSize != 0 {
		if err := layout.ValidStripeSize(int64(m.StripeSize)); err != nil {
			return nil, proto.Errorf(syscall.EINVAL, err.Error())
		}
	}
	if m.StripeCount > layout.MaxServers && m.StripeCount != proto.AllServers {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d over the limit of %d", m.StripeCount, layout.MaxServers))
	}
	if err := checkReplicas(m.Replicas, "create "+m.Name); err != nil {
		return nil, err
	}
	if m.Size != 0 && m.Reserved == 0 {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("create %s: a size needs a reserved inode", m.Name))
	}
	if err := s.notLeader(ctx); err != nil {
		return nil, err
	}
	s.awaitServers(ctx)
	return s.proposeReq(ctx, m, s.placement)
}

func (t tx) create(c *command, m *proto.Create) (proto.Msg, error) {
	if err := checkName(m.Name); err != nil {
		return nil, err
	}
	p, err := t.dir(m.Parent)
	if err != nil {
		return nil, err
	}
	if m.Reserved != 0 {
		return t.createReserved(c, p, m)
	}
	if m.Size != 0 {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("create %s: a size needs a reserved inode", m.Name))
	}
	if ino, ok := t.child(m.Parent, m.Name); ok {
		if m.Excl {
			return nil, exists(m.Name)
		}
		n, err := t.inode(ino)
		if err != nil {
			return nil, err
		}
		if n.isDir() {
			return nil, proto.Errorf(syscall.EISDIR, m.Name+": is a directory")
		}
		return attrReply(n), nil
	}
	size, servers, extra, replicas, err := t.newLayout(c, p, m.StripeSize, m.StripeCount, m.Replicas)
	if err != nil {
		return nil, err
	}
	ino, err := t.nextIno()
	if err != nil {
		return nil, err
	}
	n := &inode{Attr: proto.Attr{Ino: ino, Mode: sIFREG | m.Mode&0o7777, Uid: m.Uid, Gid: m.Gid, Nlink: 1,
		Atime: t.now, Mtime: t.now, Ctime: t.now, StripeSize: size, StripeCount: uint32(len(servers)), Servers: servers,
		Replicas: uint32(replicas), Extra: extra}}
	if err := t.put(n); err != nil {
		return nil, err
	}
	return &proto.AttrReply{Attr: n.Attr, Created: true}, t.addEntry(p, m.Name, n)
}

// pick takes count servers (0 or AllServers: every usable one) for a new
// file from the leader's placement in the command.
func (c *command) pick(count int) ([]uint32, error) {
	live := c.Picked
	if len(live) == 0 {
		if c.Registered == 0 {
			return nil, proto.Errorf(syscall.ENOSPC, "no I/O servers registered: start `corral iod --meta ...` first")
		}
		return nil, proto.Errorf(syscall.ENOSPC, "no usable I/O server: "+c.Summary+" (see `corral fs servers`)")
	}
	if count <= 0 || count == int(proto.AllServers) {
		count = len(live)
	}
	if count > len(live) {
		summary := c.Summary
		if summary == "" {
			summary = fmt.Sprintf("%d %s", len(live), proto.StateName(proto.ServerUp))
		}
		return nil, proto.Errorf(syscall.ENOSPC, fmt.Sprintf("stripe count %d, but only %d I/O servers are usable: %s (use a stripe count of at most %d, or all)",
			count, len(live), summary, len(live)))
	}
	return slices.Clone(live[:count]), nil
}

func (t tx) link(m *proto.Link) (proto.Msg, error) {
	n, err := t.inode(m.Ino)
	if err != nil {
		return nil, err
	}
	if n.isDir() {
		return nil, proto.Errorf(syscall.EPERM, fmt.Sprintf("%s: hard link not allowed for directory", m.Name))
	}
	p, err := t.newChild(m.Parent, m.Name)
	if err != nil {
		return nil, err
	}
	n.Nlink++
	n.Ctime = t.now
	if err := t.put(n); err != nil {
		return nil, err
	}
	return attrReply(n), t.addEntry(p, m.Name, n)
}

func (t tx) remove(parent uint64, name string, dir bool) error {
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
	return t.drop(n)
}

func (t tx) rename(m *proto.Rename) error {
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

func (s *Service) setLayout(ctx context.Context, m *proto.SetLayout) (proto.Msg, error) {
	if m.StripeSize != 0 {
		if err := layout.ValidStripeSize(int64(m.StripeSize)); err != nil {
			return nil, proto.Errorf(syscall.EINVAL, err.Error())
		}
	}
	if m.StripeCount > layout.MaxServers && m.StripeCount != proto.AllServers {
		return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d over the limit of %d", m.StripeCount, layout.MaxServers))
	}
	if err := checkReplicas(m.Replicas, "set layout"); err != nil {
		return nil, err
	}
	if err := checkPlacement(m.Placement, "set layout"); err != nil {
		return nil, err
	}
	if err := s.notLeader(ctx); err != nil {
		return nil, err // the servers counted below are the leader's
	}
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	if m.StripeCount != 0 && m.StripeCount != proto.AllServers {
		// A policy no file could get is refused now, not at the first put.
		s.awaitServers(ctx)
		if n := len(s.servers()); int(m.StripeCount) > n {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("stripe count %d, but the file system has %d I/O servers (use 1..%d, or all)", m.StripeCount, n, n))
		}
	}
	if m.Replicas > 1 {
		s.awaitServers(ctx)
		if n := len(s.servers()); int(m.Replicas) > n {
			return nil, proto.Errorf(syscall.EINVAL, fmt.Sprintf("%d replicas, but the file system has %d I/O servers: each copy needs its own server (use 1..%d)", m.Replicas, n, max(1, n)))
		}
	}
	return s.proposeReq(ctx, m, nil)
}

func (t tx) setLayout(m *proto.SetLayout) (proto.Msg, error) {
	n, err := t.inode(m.Ino)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, proto.Errorf(syscall.EINVAL, "not a directory: a file's layout is fixed when it is created; set the layout on its directory, or create it with one")
	}
	n.StripeSize, n.StripeCount = m.StripeSize, m.StripeCount
	// Replicas and placement of 0 keep the directory's (SetLayout).
	n.Replicas, n.Placement = cmp.Or(m.Replicas, n.Replicas), cmp.Or(m.Placement, n.Placement)
	n.Ctime = t.now
	return attrReply(n), t.put(n)
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
	// Older records: count, ID, address, capacity, free, seen; then,
	// from server states to replicas, state, base and the (empty) cluster.
	var si proto.ServerInfo
	d = proto.Dec{B: b}
	n := d.U32()
	si.ID, si.Addr, si.Capacity, si.Free, si.Seen = d.U32(), d.Str(), d.U64(), d.U64(), d.I64()
	if len(d.B) > 0 {
		si.State, si.Base = d.U8(), d.U64()
		_ = d.Str()
	}
	if d.Err() != nil || n != 1 {
		return proto.ServerInfo{}, fmt.Errorf("corrupt I/O server record")
	}
	return si, nil
}

// kickReclaimer starts a reclaim pass now rather than at the next tick.
func (s *Service) kickReclaimer() {
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
		if s.leaderSince.Load() != 0 {
			s.reclaimOnce()
		}
	}
}

// reclaimBatch bounds the files one reclaim pass handles, and the inodes
// one done-command carries.
const (
	reclaimBatch    = 4096
	reclaimParallel = 16 // Remove calls in flight
)

// reclaimOnce asks the servers to remove the objects of queued files, many
// at once, then records the files done in one command: a pass costs one
// commit, not one per file, so deletes do not share the log with as many
// reclaim commits. A record goes only after its objects are gone; a crash
// in between leaves it queued, and Remove of a missing object succeeds.
func (s *Service) reclaimOnce() {
	type job struct {
		ino     uint64
		servers []uint32
		cols    uint32
		left    []uint32
		done    int
		pending int
	}
	var jobs []*job
	s.view(func(t tx) error {
		c := t.Bucket(bReclaim).Cursor()
		for k, v := c.First(); k != nil && len(jobs) < reclaimBatch; k, v = c.Next() {
			servers, cols := decodeReclaim(v)
			jobs = append(jobs, &job{ino: binary.BigEndian.Uint64(k), servers: servers, cols: cols})
		}
		return nil
	})
	if len(jobs) == 0 {
		return
	}
	addrs := map[uint32]string{}
	for _, si := range s.servers() {
		addrs[si.ID] = si.Addr
	}
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	work := make(chan *job)
	var wg sync.WaitGroup
	for range min(reclaimParallel, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				// The list keeps layout positions (the stripe index
				// names the object); a server done with its object
				// becomes 0.
				j.left = make([]uint32, len(j.servers))
				for k, id := range j.servers {
					if id == 0 {
						continue
					}
					addr, ok := addrs[id]
					if !ok {
						j.done++
						continue // server forgotten: nothing to ask
					}
					if _, err := s.pool.Call(ctx, addr, &proto.Remove{Handle: j.ino, Index: reclaimIndex(k, len(j.servers), j.cols)}); err != nil {
						j.left[k] = id
						j.pending++
						continue
					}
					j.done++
				}
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	var finished []uint64
	for _, j := range jobs {
		switch {
		case j.pending == 0:
			finished = append(finished, j.ino)
		case j.done > 0:
			if _, err := s.propose(ctx, &command{Kind: cmdReclaim, Ino: j.ino, Left: j.left, Pending: true}); err != nil {
				s.log.Warn("record reclaim progress", "ino", j.ino, "err", err)
				return
			}
		}
	}
	for len(finished) > 0 {
		n := min(len(finished), reclaimBatch)
		batch := finished[:n]
		finished = finished[n:]
		if _, err := s.propose(ctx, &command{Kind: cmdReclaim, Ino: batch[0], Inos: batch[1:]}); err != nil {
			s.log.Warn("record reclaim progress", "files", len(batch), "err", err)
			return
		}
	}
}

// Run serves the metadata protocol on listen until ctx ends. ready, if not
// nil, is called with the bound address once accepting.
func Run(ctx context.Context, listen string, cfg Config, ready func(addr string)) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	cfg.addr = l.Addr().String()
	s, err := Open(cfg)
	if err != nil {
		l.Close()
		return err
	}
	defer s.Close()
	ctx, stopHTTP := context.WithCancel(ctx) // the HTTP listener ends with Run
	defer stopHTTP()
	h, err := s.serveHTTP(ctx, cfg.HTTP, cfg.HTTPDerived)
	if err != nil {
		l.Close()
		return err
	}
	srv := &proto.Server{Handler: h, Log: s.log, MaxInflight: 256, Security: s.sec, Limits: s.limits}
	s.log.Info("metadata server", "cluster", s.Cluster(), "reserve_percent", s.reserve)
	go func() { <-ctx.Done(); srv.Close() }()
	if ready != nil {
		ready(l.Addr().String())
	}
	err = srv.Serve(l)
	srv.Close()
	return err
}
