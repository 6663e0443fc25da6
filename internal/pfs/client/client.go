// Package client is the file system's client library: name-space calls to the
// metadata server and striped, parallel, pipelined data transfer straight to
// the I/O servers (PVFS: ask the metadata server once, then move data
// directly).
package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// Client talks to one file system. It is safe for concurrent use.
type Client struct {
	meta    string // the members as given
	pool    *proto.Pool
	lead    *Leader
	ids     *reqIDs
	timeout time.Duration
	noIdem  atomic.Bool // a member predates request IDs: send plain requests
	// Uid and Gid own what this client creates.
	Uid, Gid uint32

	mu        sync.Mutex
	servers   map[uint32]string
	open      map[uint64]*wstate  // inodes with open Files: their shared write state
	credErr   error               // why $CORRAL_SECRET_FILE could not be used
	lost      map[uint32]bool     // servers meta last called lost or replacing
	cache     *mcache             // metadata cache (WithCache), nil without
	down      map[uint32]downRec  // servers that failed lately: skipped until then (replica.go)
	busy      map[string]inflight // this client's requests in flight per server (replicated files)
	live      *proto.Liveness     // signs of life of the I/O servers: slow or gone (replica.go)
	probes    *proto.Pool         // liveness probes only: never queued behind bulk data
	probing   map[uint32]bool     // servers a goroutine probes while they are down (replica.go)
	res       reservations        // inodes meta reserved for CreateFile (small.go)
	closed    chan struct{}       // closed by Close: probes end
	closeOnce sync.Once
}

// New returns a client of the metadata service whose members' addresses
// meta lists, comma-separated ("127.0.0.1:7400,127.0.0.1:7401"); one
// address is a single metadata server. Calls go to the leader and follow it
// when it changes. No connection is made until the first call. Without
// WithSecurity the client proves the credential in $CORRAL_SECRET_FILE.
func New(meta string, opts ...Option) *Client {
	c := &Client{meta: strings.Join(SplitMembers(meta), ","), pool: &proto.Pool{PerServer: 2}, ids: newReqIDs(), closed: make(chan struct{}),
		servers: map[uint32]string{}, open: map[uint64]*wstate{}, lost: map[uint32]bool{}}
	set := false
	for _, o := range opts {
		set = o(c) || set
	}
	c.lead = NewLeader(c.pool, meta, c.timeout)
	c.probes = &proto.Pool{PerServer: 1}
	c.live = &proto.Liveness{Patience: Patience, Stall: Stall, Probe: c.probeCall}
	c.pool.Name = func(addr string) string {
		if c.lead.IsMember(addr) {
			return "meta at " + addr
		}
		return "I/O server at " + addr
	}
	if !set {
		// No variable: the handshake's "no cluster secret" error on the
		// first call; a bad file: its own error, on every call.
		c.pool.Security.Cred, c.credErr = proto.DefaultCredential()
	}
	c.probes.Security = c.pool.Security
	return c
}

// Option configures a Client; it reports whether it set the credential.
type Option func(*Client) bool

// WithSecurity makes the client prove sec.Cred (full or read-only) to every
// server, over TLS if sec.TLSClient is set.
func WithSecurity(sec proto.Security) Option {
	return func(c *Client) bool {
		c.pool.Security = sec
		return sec.Cred != nil
	}
}

// WithInsecure dials in plain text (the servers must accept it: --insecure
// on them too). It keeps the credential WithSecurity or the environment
// gives; give it after WithSecurity.
func WithInsecure() Option {
	return func(c *Client) bool {
		c.pool.Security.Insecure = true
		return false
	}
}

// WithTimeout bounds each metadata operation, retries and leader changes
// included (default DefaultTimeout); the caller's context may end it sooner.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) bool {
		c.timeout = d
		return false
	}
}

// Meta is the metadata members' addresses, comma-separated.
func (c *Client) Meta() string { return c.meta }

// Leader is how the client reaches the metadata leader.
func (c *Client) Leader() *Leader { return c.lead }

// Close stops the cache's watch and drops every connection.
func (c *Client) Close() {
	c.closeOnce.Do(func() { close(c.closed) })
	if c.cache != nil {
		c.stopWatch()
	}
	c.pool.Close()
	c.probes.Close()
}

func (c *Client) call(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if c.credErr != nil {
		return nil, fmt.Errorf("%s: %w", proto.SecretEnv, c.credErr)
	}
	if err := tooLong(req); err != nil {
		return nil, err
	}
	if !proto.Mutating(req.Op()) || c.noIdem.Load() {
		return c.lead.Call(ctx, req)
	}
	// One request ID for every retry of this operation: a retry after a
	// lost reply gets the first attempt's answer, not a second effect.
	idem, done := c.ids.wrap(req)
	defer done()
	r, err := c.lead.Call(ctx, idem)
	if re := (*proto.RemoteError)(nil); errors.As(err, &re) && re.Errno == syscall.EOPNOTSUPP &&
		strings.Contains(re.Msg, fmt.Sprintf("op %d", proto.OpIdem)) {
		// A metadata server from before request IDs: it did nothing with
		// the request; plain requests from now on, as that server expects.
		c.noIdem.Store(true)
		return c.lead.Call(ctx, req)
	}
	return r, err
}

// POSIX limits, checked before a request leaves: PATH_MAX counts the
// terminating NUL, so a path has at most 4095 bytes.
const (
	pathMax = 4096
	nameMax = 255
)

// tooLong refuses a request naming a path or name over the POSIX limits
// with ENAMETOOLONG, as the kernel would, instead of sending it.
func tooLong(req proto.Msg) error {
	var names []string
	switch m := req.(type) {
	case *proto.Walk:
		if len(m.Path) >= pathMax {
			return syscall.ENAMETOOLONG
		}
		names = strings.Split(m.Path, "/")
	case *proto.WalkBeneath:
		if len(m.Root)+len(m.Path) >= pathMax {
			return syscall.ENAMETOOLONG
		}
		names = strings.Split(m.Root+"/"+m.Path, "/")
	case *proto.Lookup:
		names = []string{m.Name}
	case *proto.Create:
		names = []string{m.Name}
	case *proto.Mkdir:
		names = []string{m.Name}
	case *proto.Mknod:
		names = []string{m.Name}
	case *proto.Symlink:
		if len(m.Target) >= pathMax {
			return syscall.ENAMETOOLONG
		}
		names = []string{m.Name}
	case *proto.Link:
		names = []string{m.Name}
	case *proto.Rename:
		names = []string{m.OldName, m.NewName}
	}
	for _, n := range names {
		if len(n) > nameMax {
			return syscall.ENAMETOOLONG
		}
	}
	return nil
}

// Pool is the client's connection pool (its credential and TLS included),
// for tools that talk to I/O servers directly.
func (c *Client) Pool() *proto.Pool { return c.pool }

// Call sends any request to the metadata server.
func (c *Client) Call(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	return c.mutate(ctx, req)
}

// AttrCall sends a request answered with attributes (Mkdir, Symlink, ...).
func (c *Client) AttrCall(ctx context.Context, req proto.Msg) (proto.Attr, error) {
	return c.attr(ctx, req)
}

func (c *Client) attr(ctx context.Context, req proto.Msg) (proto.Attr, error) {
	r, err := c.mutate(ctx, req)
	if err != nil {
		return proto.Attr{}, err
	}
	ar, ok := r.(*proto.AttrReply)
	if !ok {
		return proto.Attr{}, unexpected(c.meta, r)
	}
	return ar.Attr, nil
}

func unexpected(addr string, r proto.Msg) error {
	return fmt.Errorf("%s: unexpected reply op %d", addr, r.Op())
}

// Inode-level calls, as the FUSE file system needs them.

func (c *Client) Lookup(ctx context.Context, parent uint64, name string) (proto.Attr, error) {
	if c.cache != nil {
		return c.lookupCached(ctx, parent, name)
	}
	return c.attr(ctx, &proto.Lookup{Parent: parent, Name: name})
}

func (c *Client) GetAttr(ctx context.Context, ino uint64) (proto.Attr, error) {
	if c.cache != nil {
		return c.getAttrCached(ctx, ino)
	}
	return c.attr(ctx, &proto.GetAttr{Ino: ino})
}

// SetAttr changes an inode's attributes. An explicit mtime for a file open
// through this client wins over the time of the writes it made before:
// close then publishes their size but not their time (write, set the
// times, close is what cp -a and tar do).
func (c *Client) SetAttr(ctx context.Context, m *proto.SetAttr) (proto.Attr, error) {
	if m.Mask&proto.SetMtime == 0 {
		return c.attr(ctx, m)
	}
	c.mu.Lock()
	st := c.open[m.Ino]
	c.mu.Unlock()
	if st == nil {
		return c.attr(ctx, m)
	}
	// Held across the call so that no Sync publishes the writes' time
	// between this change and forgetting that time.
	st.mu.Lock()
	defer st.mu.Unlock()
	a, err := c.attr(ctx, m)
	if err == nil {
		st.wtime = 0
		st.ctime = max(st.ctime, a.Ctime)
	}
	return a, err
}

// CreateOpts are the optional parts of a create.
type CreateOpts struct {
	Excl        bool
	StripeSize  uint32 // 0: the directory's policy
	StripeCount uint32 // 0: the directory's policy
	Replicas    uint32 // copies of each stripe unit; 0: the directory's policy
}

// Create makes (or, without Excl, opens) a regular file; created says which.
func (c *Client) Create(ctx context.Context, parent uint64, name string, mode uint32, o CreateOpts) (a proto.Attr, created bool, err error) {
	r, err := c.mutate(ctx, &proto.Create{Parent: parent, Name: name, Mode: mode, Uid: c.Uid, Gid: c.Gid,
		Excl: o.Excl, StripeSize: o.StripeSize, StripeCount: o.StripeCount, Replicas: o.Replicas})
	if err != nil {
		return a, false, err
	}
	ar, ok := r.(*proto.AttrReply)
	if !ok {
		return a, false, unexpected(c.meta, r)
	}
	return ar.Attr, ar.Created, nil
}

func (c *Client) Mkdir(ctx context.Context, parent uint64, name string, mode uint32) (proto.Attr, error) {
	return c.attr(ctx, &proto.Mkdir{Parent: parent, Name: name, Mode: mode, Uid: c.Uid, Gid: c.Gid})
}

func (c *Client) Symlink(ctx context.Context, parent uint64, name, target string) (proto.Attr, error) {
	return c.attr(ctx, &proto.Symlink{Parent: parent, Name: name, Target: target, Uid: c.Uid, Gid: c.Gid})
}

func (c *Client) Link(ctx context.Context, ino, parent uint64, name string) (proto.Attr, error) {
	return c.attr(ctx, &proto.Link{Ino: ino, Parent: parent, Name: name})
}

func (c *Client) Unlink(ctx context.Context, parent uint64, name string) error {
	_, err := c.mutate(ctx, &proto.Unlink{Parent: parent, Name: name})
	return err
}

func (c *Client) Rmdir(ctx context.Context, parent uint64, name string) error {
	_, err := c.mutate(ctx, &proto.Rmdir{Parent: parent, Name: name})
	return err
}

func (c *Client) Rename(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags uint32) error {
	_, err := c.mutate(ctx, &proto.Rename{OldParent: oldParent, OldName: oldName, NewParent: newParent, NewName: newName, Flags: flags})
	return err
}

func (c *Client) Readlink(ctx context.Context, ino uint64) (string, error) {
	if c.cache != nil {
		return c.readlinkCached(ctx, ino)
	}
	return c.readlink(ctx, ino)
}

func (c *Client) readlink(ctx context.Context, ino uint64) (string, error) {
	r, err := c.call(ctx, &proto.Readlink{Ino: ino})
	if err != nil {
		return "", err
	}
	tr, ok := r.(*proto.TargetReply)
	if !ok {
		return "", unexpected(c.meta, r)
	}
	return tr.Target, nil
}

// Readdir lists a whole directory, sorted by name, with attributes.
func (c *Client) Readdir(ctx context.Context, ino uint64) ([]proto.Entry, error) {
	if c.cache != nil {
		return c.readdirCached(ctx, ino)
	}
	return c.readdir(ctx, ino)
}

func (c *Client) readdir(ctx context.Context, ino uint64) ([]proto.Entry, error) {
	var out []proto.Entry
	after := ""
	for {
		r, err := c.call(ctx, &proto.Readdir{Ino: ino, After: after})
		if err != nil {
			return nil, err
		}
		er, ok := r.(*proto.EntriesReply)
		if !ok {
			return nil, unexpected(c.meta, r)
		}
		out = append(out, er.Entries...)
		if !er.More || len(er.Entries) == 0 {
			return out, nil
		}
		after = er.Entries[len(er.Entries)-1].Name
	}
}

func (c *Client) SetLayout(ctx context.Context, ino uint64, stripeSize, stripeCount uint32) (proto.Attr, error) {
	return c.attr(ctx, &proto.SetLayout{Ino: ino, StripeSize: stripeSize, StripeCount: stripeCount})
}

// SetLayoutPolicy sets directory m.Ino's layout policy: stripe size and
// count as SetLayout, and (0: keep) its replicas and placement.
func (c *Client) SetLayoutPolicy(ctx context.Context, m *proto.SetLayout) (proto.Attr, error) {
	return c.attr(ctx, m)
}

// LoseServer declares I/O server id lost for good: meta makes its replicas
// again on other servers. It returns the server's entry.
func (c *Client) LoseServer(ctx context.Context, id uint32) (proto.ServerInfo, error) {
	r, err := c.mutate(ctx, &proto.LoseServer{ID: id})
	if err != nil {
		return proto.ServerInfo{}, err
	}
	sr, ok := r.(*proto.ServersReply)
	if !ok || len(sr.Servers) != 1 {
		return proto.ServerInfo{}, unexpected(c.meta, r)
	}
	c.mu.Lock()
	c.lost[id] = true
	c.mu.Unlock()
	return sr.Servers[0], nil
}

func (c *Client) Statfs(ctx context.Context) (*proto.StatfsReply, error) {
	r, err := c.call(ctx, &proto.Statfs{})
	if err != nil {
		return nil, err
	}
	sr, ok := r.(*proto.StatfsReply)
	if !ok {
		return nil, unexpected(c.meta, r)
	}
	return sr, nil
}

// Servers lists the I/O servers the metadata server knows.
func (c *Client) Servers(ctx context.Context) ([]proto.ServerInfo, error) {
	r, err := c.call(ctx, &proto.Servers{})
	if err != nil {
		return nil, err
	}
	sr, ok := r.(*proto.ServersReply)
	if !ok {
		return nil, unexpected(c.meta, r)
	}
	c.mu.Lock()
	for _, s := range sr.Servers {
		c.servers[s.ID] = s.Addr
		if s.State == proto.ServerLost || s.State == proto.ServerReplacing {
			c.lost[s.ID] = true
		} else {
			delete(c.lost, s.ID)
		}
	}
	c.mu.Unlock()
	return sr.Servers, nil
}

// addrs maps a layout's server IDs to addresses, asking meta on a miss.
func (c *Client) addrs(ctx context.Context, ids []uint32) ([]string, error) {
	for try := 0; ; try++ {
		out := make([]string, len(ids))
		missing := uint32(0)
		c.mu.Lock()
		for _, id := range ids {
			if c.lost[id] {
				c.mu.Unlock()
				// Whatever answers at its address now does not hold its
				// objects: an error, never a hole's zeros.
				return nil, proto.Errorf(syscall.EIO, fmt.Sprintf("I/O server %d is lost (it came back without its data; see corral fs servers)", id))
			}
		}
		for i, id := range ids {
			a, ok := c.servers[id]
			if !ok {
				missing = id
			}
			out[i] = a
		}
		c.mu.Unlock()
		if missing == 0 {
			return out, nil
		}
		if try > 0 {
			return nil, fmt.Errorf("I/O server %d is not known to the metadata server %s", missing, c.meta)
		}
		if _, err := c.Servers(ctx); err != nil {
			return nil, err
		}
	}
}

// Path-level calls. Errors are *fs.PathError carrying the path and an errno,
// so errors.Is(err, fs.ErrNotExist) works and messages read like coreutils'.

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	var re *proto.RemoteError
	if errors.As(err, &re) {
		switch re.Errno {
		case syscall.ENOENT, syscall.EEXIST, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY,
			syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EPERM, syscall.EACCES:
			// The errno says it all once the path is in front of it.
			err = re.Errno
		}
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

func clean(p string) string { return path.Clean("/" + p) }

// Lstat resolves p without following a final symbolic link: one round trip.
func (c *Client) Lstat(ctx context.Context, p string) (proto.Attr, error) {
	a, err := c.walk(ctx, clean(p))
	return a, pathErr("lstat", p, err)
}

// Stat resolves p following symbolic links.
func (c *Client) Stat(ctx context.Context, p string) (proto.Attr, error) {
	q := clean(p)
	for i := 0; i < 40; i++ {
		a, err := c.walk(ctx, q)
		if err != nil {
			return a, pathErr("stat", p, err)
		}
		if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			return a, nil
		}
		t, err := c.Readlink(ctx, a.Ino)
		if err != nil {
			return a, pathErr("stat", p, err)
		}
		if strings.HasPrefix(t, "/") {
			q = clean(t)
		} else {
			q = clean(path.Join(path.Dir(q), t))
		}
	}
	return proto.Attr{}, pathErr("stat", p, syscall.ELOOP)
}

// StatBeneath resolves p inside the directory root following symbolic
// links, none of which may lead out of root (EXDEV): what a web server
// needs to keep a link from serving a file outside a domain's directory.
func (c *Client) StatBeneath(ctx context.Context, root, p string) (proto.Attr, error) {
	req := &proto.WalkBeneath{Root: clean(root), Path: clean(p)}
	if c.cache != nil && tooLong(req) == nil {
		a, err := c.beneathCached(ctx, req.Root, req.Path)
		if err != errUncached {
			return a, pathErr("stat", path.Join(root, p), err)
		}
	}
	a, err := c.attr(ctx, req)
	return a, pathErr("stat", path.Join(root, p), err)
}

// walk resolves the clean path p without following a last link: from the
// cache when there is one, else in one Walk.
func (c *Client) walk(ctx context.Context, p string) (proto.Attr, error) {
	req := &proto.Walk{Path: p}
	if c.cache != nil && tooLong(req) == nil {
		a, err := c.walkCached(ctx, p)
		if err != errUncached {
			return a, err
		}
	}
	return c.attr(ctx, req)
}

// parent resolves p's directory and returns it with p's last name.
func (c *Client) parent(ctx context.Context, op, p string) (uint64, string, error) {
	q := clean(p)
	if q == "/" {
		return 0, "", pathErr(op, p, syscall.EEXIST)
	}
	dir, name := path.Split(q)
	a, err := c.Stat(ctx, dir)
	if err != nil {
		return 0, "", pathErr(op, p, errors.Unwrap(err))
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0, "", pathErr(op, p, syscall.ENOTDIR)
	}
	return a.Ino, name, nil
}

// Mkdir makes directory p.
func (c *Client) MkdirPath(ctx context.Context, p string, mode uint32) error {
	parent, name, err := c.parent(ctx, "mkdir", p)
	if err != nil {
		return err
	}
	_, err = c.Mkdir(ctx, parent, name, mode)
	return pathErr("mkdir", p, err)
}

// MkdirAll makes p and any missing parents, like mkdir -p.
func (c *Client) MkdirAll(ctx context.Context, p string, mode uint32) error {
	q := clean(p)
	if a, err := c.Stat(ctx, q); err == nil {
		if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return pathErr("mkdir", p, syscall.ENOTDIR)
		}
		return nil
	}
	if q != "/" {
		if err := c.MkdirAll(ctx, path.Dir(q), mode); err != nil {
			return err
		}
	}
	err := c.MkdirPath(ctx, q, mode)
	if errors.Is(err, fs.ErrExist) {
		return nil // made meanwhile by someone else
	}
	return err
}

// ReadDir lists directory p.
func (c *Client) ReadDir(ctx context.Context, p string) ([]proto.Entry, error) {
	a, err := c.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	ents, err := c.Readdir(ctx, a.Ino)
	return ents, pathErr("readdir", p, err)
}

// Remove removes a file, symbolic link or empty directory.
func (c *Client) Remove(ctx context.Context, p string) error {
	parent, name, err := c.parent(ctx, "remove", p)
	if err != nil {
		return err
	}
	err = c.Unlink(ctx, parent, name)
	if errors.Is(err, syscall.EISDIR) {
		err = c.Rmdir(ctx, parent, name)
	}
	return pathErr("remove", p, err)
}

// RemoveAll removes p and everything below it, like rm -r.
func (c *Client) RemoveAll(ctx context.Context, p string) error {
	a, err := c.Lstat(ctx, p)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		ents, err := c.Readdir(ctx, a.Ino)
		if err != nil {
			return pathErr("readdir", p, err)
		}
		for _, e := range ents {
			if err := c.RemoveAll(ctx, path.Join(clean(p), e.Name)); err != nil {
				return err
			}
		}
	}
	return c.Remove(ctx, p)
}

// RenamePath moves oldp to newp, replacing newp if it exists (rename(2)).
// When newp is an existing directory and into is set, oldp moves inside it,
// as mv does.
func (c *Client) RenamePath(ctx context.Context, oldp, newp string, into bool) error {
	op, on, err := c.parent(ctx, "rename", oldp)
	if err != nil {
		return err
	}
	if into {
		if a, err := c.Stat(ctx, newp); err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			newp = path.Join(clean(newp), on)
		}
	}
	np, nn, err := c.parent(ctx, "rename", newp)
	if err != nil {
		return err
	}
	return pathErr("rename", oldp, c.Rename(ctx, op, on, np, nn, 0))
}

// SymlinkPath makes p a symbolic link to target.
func (c *Client) SymlinkPath(ctx context.Context, target, p string) error {
	parent, name, err := c.parent(ctx, "symlink", p)
	if err != nil {
		return err
	}
	_, err = c.Symlink(ctx, parent, name, target)
	return pathErr("symlink", p, err)
}

// Open opens an existing regular file for reading and writing.
func (c *Client) Open(ctx context.Context, p string) (*File, error) {
	a, err := c.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	f, err := c.OpenAttr(ctx, a)
	return f, pathErr("open", p, err)
}

// CreatePath creates (or truncates, unless o.Excl) regular file p.
func (c *Client) CreatePath(ctx context.Context, p string, mode uint32, o CreateOpts) (*File, error) {
	parent, name, err := c.parent(ctx, "create", p)
	if err != nil {
		return nil, err
	}
	a, created, err := c.Create(ctx, parent, name, mode, o)
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	f, err := c.OpenAttr(ctx, a)
	if err != nil {
		return nil, pathErr("create", p, err)
	}
	if !created && a.Size > 0 {
		if err := f.Truncate(ctx, 0); err != nil {
			return nil, pathErr("truncate", p, err)
		}
	}
	return f, nil
}
