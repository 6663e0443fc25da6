package client

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// The metadata cache (docs/meta.md, "Client cache"): attributes by inode,
// directory entries (positive and negative), symbolic link targets and
// directory listings, trusted only while the lease of the last answered
// Watch runs; the watch loop drops what other clients change, and the
// leader acknowledges a change only once every watcher has dropped it.

// DefaultCacheEntries bounds a client's metadata cache (LRU).
const DefaultCacheEntries = 64 << 10

// maxInval bounds the inodes remembered as recently invalidated (see put).
const maxInval = 64 << 10

// WithCache makes the client cache metadata, kept coherent by watching the
// metadata leader. Close stops the watch.
func WithCache() Option {
	return func(c *Client) bool {
		c.cache = newMcache(DefaultCacheEntries, proto.CacheLease)
		return false
	}
}

// CacheStats counts what the metadata cache did.
type CacheStats struct {
	Hits, Misses  uint64 // read calls answered from the cache / by meta
	Invalidations uint64 // entries dropped because an inode changed
	Resets        uint64 // whole-cache drops: Reset, lease end, watch error
	Entries       int
	Trusted       bool // the lease runs
}

// CacheStats reports the cache's counters (zero without WithCache).
func (c *Client) CacheStats() CacheStats {
	cc := c.cache
	if cc == nil {
		return CacheStats{}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return CacheStats{Hits: cc.hits.Load(), Misses: cc.misses.Load(), Invalidations: cc.invals,
		Resets: cc.resets, Entries: len(cc.items), Trusted: time.Now().Before(cc.leaseEnd)}
}

type ckind uint8

const (
	kAttr ckind = iota // ino -> attributes
	kEnt               // (parent, name) -> child ino, 0 when absent
	kLink              // ino -> symbolic link target
	kDir               // ino -> the whole listing
)

type ckey struct {
	kind ckind
	ino  uint64
	name string
}

type citem struct {
	key    ckey
	attr   proto.Attr
	child  uint64
	target string
	ents   []proto.Entry
	deps   []uint64 // a change to any of these inodes drops the item
	elem   *list.Element
}

type mcache struct {
	mu       sync.Mutex
	items    map[ckey]*citem
	lru      list.List // of *citem, most recent first
	deps     map[uint64]map[*citem]struct{}
	max      int
	lease    time.Duration
	leaseEnd time.Time // monotonic: send time of the last answered Watch + lease

	// Coherence of inserts with invalidations: gen counts invalidations;
	// a read that began at gen g may insert only if none of its inodes
	// was invalidated after g (inval) and no whole drop came after g
	// (floor).
	gen, floor uint64
	inval      map[uint64]uint64

	hits, misses   atomic.Uint64
	invals, resets uint64

	// The watch loop's state. It starts with the first cached read, not
	// in New: a caller may still set up the pool (Observe) before.
	start sync.Once
	hold  sync.Mutex // held by tests to freeze the watch (a hung client)
	// pool: the watch's own connection. On the client's connections a
	// poll could queue behind mutations that wait for its answer (the
	// server handles a bounded number of requests per connection).
	pool   *proto.Pool
	leader string // the leader a member named, "" for the client's meta
	// onChange: see OnCacheChange. Set before the first cached read.
	onChange     func(inos []uint64, all bool)
	id           uint64
	since, epoch uint64
	stop         context.CancelFunc
	done         chan struct{}
}

func newMcache(max int, lease time.Duration) *mcache {
	var b [8]byte
	rand.Read(b[:])
	return &mcache{items: map[ckey]*citem{}, deps: map[uint64]map[*citem]struct{}{}, inval: map[uint64]uint64{},
		max: max, lease: lease, id: binary.LittleEndian.Uint64(b[:]) | 1, done: make(chan struct{})}
}

// get returns a copy of the item under k if the lease runs.
func (cc *mcache) get(k ckey) (citem, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if !time.Now().Before(cc.leaseEnd) {
		if len(cc.items) > 0 {
			cc.dropAllLocked()
		}
		return citem{}, false
	}
	it, ok := cc.items[k]
	if !ok {
		return citem{}, false
	}
	cc.lru.MoveToFront(it.elem)
	return *it, true
}

// begin marks the start of a read whose answer may be inserted.
func (cc *mcache) begin() uint64 {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.gen
}

// put inserts it, read since tok, unless a change it depends on may have
// been dropped meanwhile (then the answer may predate that change).
func (cc *mcache) put(tok uint64, it *citem) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if tok < cc.floor || !time.Now().Before(cc.leaseEnd) {
		return
	}
	for _, d := range it.deps {
		if cc.inval[d] > tok {
			return
		}
	}
	if old, ok := cc.items[it.key]; ok {
		cc.removeLocked(old)
	}
	it.elem = cc.lru.PushFront(it)
	cc.items[it.key] = it
	for _, d := range it.deps {
		m := cc.deps[d]
		if m == nil {
			m = map[*citem]struct{}{}
			cc.deps[d] = m
		}
		m[it] = struct{}{}
	}
	for len(cc.items) > cc.max {
		cc.removeLocked(cc.lru.Back().Value.(*citem))
	}
}

func (cc *mcache) removeLocked(it *citem) {
	delete(cc.items, it.key)
	cc.lru.Remove(it.elem)
	for _, d := range it.deps {
		if m := cc.deps[d]; m != nil {
			delete(m, it)
			if len(m) == 0 {
				delete(cc.deps, d)
			}
		}
	}
}

// invalidate drops everything that depends on inos.
func (cc *mcache) invalidate(inos []uint64) {
	if len(inos) == 0 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.gen++
	if len(cc.inval)+len(inos) > maxInval {
		clear(cc.inval)
		cc.floor = cc.gen
	}
	for _, ino := range inos {
		cc.inval[ino] = cc.gen
		for it := range cc.deps[ino] {
			cc.removeLocked(it)
			cc.invals++
		}
	}
}

// dropAllLocked forgets everything and refuses the answers of reads begun
// before.
func (cc *mcache) dropAllLocked() {
	cc.gen++
	cc.floor = cc.gen
	clear(cc.items)
	clear(cc.deps)
	clear(cc.inval)
	cc.lru.Init()
	cc.resets++
}

// expire ends the lease: the watch failed, nothing cached can be trusted.
func (cc *mcache) expire() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.leaseEnd = time.Time{}
	cc.dropAllLocked()
}

// answered applies a Watch answer to a request sent at sent.
func (cc *mcache) answered(r *proto.ChangesReply, sent time.Time) {
	if !r.Reset {
		cc.invalidate(r.Inos)
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if r.Reset {
		cc.dropAllLocked()
	}
	cc.since, cc.epoch = r.Index, r.Epoch
	cc.leaseEnd = sent.Add(cc.lease)
}

// trusted reports whether the watch's lease runs: every change meta made
// is then known here before meta acknowledges it.
func (cc *mcache) trusted() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return time.Now().Before(cc.leaseEnd)
}

// OnCacheChange makes the watch loop call f with the inodes meta reports
// changed (all: every inode may have, after a Reset or when the lease
// ends), before the loop acknowledges them to meta: the writer's call
// returns only after f did. f must not wait for a metadata change (nil:
// no hook). It reports false for a client without a cache.
func (c *Client) OnCacheChange(f func(inos []uint64, all bool)) bool {
	if c.cache == nil {
		return false
	}
	c.cache.mu.Lock()
	c.cache.onChange = f
	c.cache.mu.Unlock()
	return true
}

func (cc *mcache) changeHook() func([]uint64, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.onChange
}

// CacheEpoch reports whether the cache's lease runs, and a count that
// grows each time the whole cache is dropped (a Reset, a lease that
// ended): a caller that saw the lease running with the same count before
// and after a read knows meta reported every change since to this client.
func (c *Client) CacheEpoch() (epoch uint64, trusted bool) {
	cc := c.cache
	if cc == nil {
		return 0, false
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.resets, time.Now().Before(cc.leaseEnd)
}

// cached returns the cache, its watch loop started.
func (c *Client) cached() *mcache {
	cc := c.cache
	cc.start.Do(c.startWatch)
	return cc
}

// startWatch runs the watch loop until Close.
func (c *Client) startWatch() {
	cc := c.cache
	ctx, cancel := context.WithCancel(context.Background())
	cc.mu.Lock()
	cc.stop = cancel
	cc.pool = &proto.Pool{PerServer: 1, Security: c.pool.Security, Name: c.pool.Name}
	cc.mu.Unlock()
	go func() {
		defer close(cc.done)
		backoff := 20 * time.Millisecond
		for ctx.Err() == nil {
			if err := c.watchOnce(ctx); err != nil {
				cc.expire()
				if f := cc.changeHook(); f != nil {
					f(nil, true)
				}
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 20 * time.Millisecond
		}
	}()
}

// watchOnce sends one Watch and applies its answer.
func (c *Client) watchOnce(ctx context.Context) error {
	cc := c.cache
	cc.mu.Lock()
	req := &proto.Watch{Client: cc.id, Since: cc.since, Epoch: cc.epoch}
	cc.mu.Unlock()
	// A poll held past the lease renews nothing: give up then.
	ctx, cancel := context.WithTimeout(ctx, cc.lease)
	defer cancel()
	sent := time.Now()
	r, err := c.watchCall(ctx, req)
	if err != nil {
		return err
	}
	cr, ok := r.(*proto.ChangesReply)
	if !ok {
		return unexpected(c.meta, r)
	}
	cc.hold.Lock()
	cc.answered(cr, sent)
	// Before the next Watch acknowledges this answer (meta holds a
	// MarkStale's reply until then): open files re-read their stale
	// records before their next read.
	c.staleChanged(cr.Inos, cr.Reset)
	if f := cc.changeHook(); f != nil && (cr.Reset || len(cr.Inos) > 0) {
		f(cr.Inos, cr.Reset)
	}
	cc.hold.Unlock()
	return nil
}

// watchCall sends a watch request on the watch's own connection to the
// leader, following a member that names another.
func (c *Client) watchCall(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	if c.credErr != nil {
		return nil, fmt.Errorf("%s: %w", proto.SecretEnv, c.credErr)
	}
	cc := c.cache
	cc.mu.Lock()
	addr := cc.leader
	cc.mu.Unlock()
	if addr == "" {
		// The member the client's requests go to: c.meta is the whole
		// comma-separated list, not an address.
		addr = c.lead.Current()
	}
	r, err := cc.pool.Call(ctx, addr, req)
	if err != nil {
		next, _ := proto.LeaderHint(err) // "": back to the requests' member
		if next == "" && errors.Is(err, proto.ErrUnavailable) {
			c.lead.skip(addr) // a dead member: the requests move on too
		}
		cc.mu.Lock()
		cc.leader = next
		cc.mu.Unlock()
	}
	return r, err
}

// stopWatch ends the watch loop and tells meta this client caches nothing.
func (c *Client) stopWatch() {
	cc := c.cache
	started := true
	cc.start.Do(func() { started = false }) // none from now on
	if !started {
		return
	}
	cc.stop()
	<-cc.done
	cc.expire()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.watchCall(ctx, &proto.Unwatch{Client: cc.id}) // best effort: else its lease ends
	cc.pool.Close()
}

// affected lists the inodes a mutating request changes, as far as this
// client knows them (the reply's inode is added by mutate).
func (cc *mcache) affected(req proto.Msg) []uint64 {
	child := func(parent uint64, name string) uint64 {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if it, ok := cc.items[ckey{kEnt, parent, name}]; ok {
			return it.child
		}
		return 0
	}
	switch m := req.(type) {
	case *proto.SetAttr:
		return []uint64{m.Ino}
	case *proto.SetLayout:
		return []uint64{m.Ino}
	case *proto.Link:
		return []uint64{m.Ino, m.Parent}
	case *proto.Create:
		return []uint64{m.Parent}
	case *proto.Mkdir:
		return []uint64{m.Parent}
	case *proto.Symlink:
		return []uint64{m.Parent}
	case *proto.Mknod:
		return []uint64{m.Parent}
	case *proto.Unlink:
		return []uint64{m.Parent, child(m.Parent, m.Name)}
	case *proto.Rmdir:
		return []uint64{m.Parent, child(m.Parent, m.Name)}
	case *proto.UnlinkOpen:
		return []uint64{m.Parent, child(m.Parent, m.Name)}
	case *proto.Rename:
		return []uint64{m.OldParent, m.NewParent, child(m.OldParent, m.OldName), child(m.NewParent, m.NewName)}
	case *proto.ReleaseOrphan:
		return []uint64{m.Ino}
	case *proto.SetXattr: // ctime
		return []uint64{m.Ino}
	case *proto.RemoveXattr:
		return []uint64{m.Ino}
	}
	return nil
}

// mutate sends req and drops from this client's cache what it changes
// (the watch would too, but later: read your own writes at once).
func (c *Client) mutate(ctx context.Context, req proto.Msg) (proto.Msg, error) {
	cc := c.cache
	if cc == nil {
		return c.call(ctx, req)
	}
	inos := cc.affected(req)
	r, err := c.call(ctx, req)
	if inos != nil {
		if ar, ok := r.(*proto.AttrReply); ok {
			inos = append(inos, ar.Attr.Ino)
		}
		cc.invalidate(inos)
	}
	return r, err
}

func (cc *mcache) hit()  { cc.hits.Add(1) }
func (cc *mcache) miss() { cc.misses.Add(1) }

// Cached reads. Each returns ok false when the cache cannot answer.

func (cc *mcache) attr(ino uint64) (proto.Attr, bool) {
	it, ok := cc.get(ckey{kAttr, ino, ""})
	return it.attr, ok
}

func (cc *mcache) putAttr(tok uint64, a proto.Attr) {
	cc.put(tok, &citem{key: ckey{kAttr, a.Ino, ""}, attr: a, deps: []uint64{a.Ino}})
}

func (cc *mcache) putEntry(tok uint64, parent uint64, name string, child uint64) {
	cc.put(tok, &citem{key: ckey{kEnt, parent, name}, child: child, deps: []uint64{parent}})
}

func noEntry(name string) error {
	return proto.Errorf(syscall.ENOENT, name+": no such file or directory")
}

// lookup answers Lookup from the cache, asking meta on a miss.
func (c *Client) lookupCached(ctx context.Context, parent uint64, name string) (proto.Attr, error) {
	cc := c.cached()
	if it, ok := cc.get(ckey{kEnt, parent, name}); ok {
		if it.child == 0 {
			cc.hit()
			return proto.Attr{}, noEntry(name)
		}
		if a, ok := cc.attr(it.child); ok {
			cc.hit()
			return a, nil
		}
	}
	cc.miss()
	tok := cc.begin()
	a, err := c.attr(ctx, &proto.Lookup{Parent: parent, Name: name})
	switch {
	case err == nil:
		cc.putEntry(tok, parent, name, a.Ino)
		cc.putAttr(tok, a)
	case remoteErrno(err) == syscall.ENOENT:
		cc.putEntry(tok, parent, name, 0)
	}
	return a, err
}

func (c *Client) getAttrCached(ctx context.Context, ino uint64) (proto.Attr, error) {
	cc := c.cached()
	if a, ok := cc.attr(ino); ok {
		cc.hit()
		return a, nil
	}
	cc.miss()
	tok := cc.begin()
	a, err := c.attr(ctx, &proto.GetAttr{Ino: ino})
	if err == nil {
		cc.putAttr(tok, a)
	}
	return a, err
}

func (c *Client) readlinkCached(ctx context.Context, ino uint64) (string, error) {
	cc := c.cached()
	if it, ok := cc.get(ckey{kLink, ino, ""}); ok {
		cc.hit()
		return it.target, nil
	}
	cc.miss()
	tok := cc.begin()
	t, err := c.readlink(ctx, ino)
	if err == nil {
		cc.put(tok, &citem{key: ckey{kLink, ino, ""}, target: t, deps: []uint64{ino}})
	}
	return t, err
}

// readdirCached caches a whole listing, dropped when the directory or any
// entry's inode changes (the entries carry attributes), and the entries and
// attributes it names.
func (c *Client) readdirCached(ctx context.Context, ino uint64) ([]proto.Entry, error) {
	cc := c.cached()
	if it, ok := cc.get(ckey{kDir, ino, ""}); ok {
		cc.hit()
		return append([]proto.Entry(nil), it.ents...), nil
	}
	cc.miss()
	tok := cc.begin()
	ents, err := c.readdir(ctx, ino)
	if err != nil {
		return nil, err
	}
	if len(ents) < cc.max/4 {
		deps := make([]uint64, 0, 1+len(ents))
		deps = append(deps, ino)
		for _, e := range ents {
			deps = append(deps, e.Attr.Ino)
			cc.putEntry(tok, ino, e.Name, e.Attr.Ino)
			cc.putAttr(tok, e.Attr)
		}
		cc.put(tok, &citem{key: ckey{kDir, ino, ""}, ents: append([]proto.Entry(nil), ents...), deps: deps})
	}
	return ents, nil
}

// remoteErrno is the errno a server answered with, 0 for any other error.
func remoteErrno(err error) syscall.Errno {
	var re *proto.RemoteError
	if errors.As(err, &re) {
		return re.Errno
	}
	return 0
}

// errUncached: the path takes a turn the cache does not follow (".." after
// a link: the server resolves it by the directory's parent, which
// attributes do not carry); ask meta.
var errUncached = errors.New("path not resolvable from the cache")

const rootIno = 1

// walkCached resolves the absolute, clean path p as the server's Walk does
// (links followed in every component but the last), one cached Lookup per
// component: a path whose every step is cached costs no round trip.
func (c *Client) walkCached(ctx context.Context, p string) (proto.Attr, error) {
	// The root's attributes change with every entry made in it: fetched
	// only when they are the answer.
	root := proto.Attr{Ino: rootIno, Mode: syscall.S_IFDIR}
	cur := root
	comps := strings.Split(p, "/")
	links := 0
	for i := 0; i < len(comps); i++ {
		name := comps[i]
		if name == "" || name == "." {
			continue
		}
		if cur.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return proto.Attr{}, proto.Errorf(syscall.ENOTDIR, p+": not a directory")
		}
		if name == ".." {
			return proto.Attr{}, errUncached
		}
		n, err := c.lookupCached(ctx, cur.Ino, name)
		if err != nil {
			return n, err
		}
		last := true
		for _, rest := range comps[i+1:] {
			if rest != "" {
				last = false
				break
			}
		}
		if n.Mode&syscall.S_IFMT == syscall.S_IFLNK && !last {
			if links++; links > 40 {
				return proto.Attr{}, proto.Errorf(syscall.ELOOP, p+": too many levels of symbolic links")
			}
			t, err := c.readlinkCached(ctx, n.Ino)
			if err != nil {
				return proto.Attr{}, err
			}
			if strings.HasPrefix(t, "/") {
				cur = root
			}
			comps, i = append(strings.Split(t, "/"), comps[i+1:]...), -1
			continue
		}
		cur = n
	}
	if cur.Ino == rootIno {
		return c.getAttrCached(ctx, rootIno)
	}
	return cur, nil
}

// beneathCached resolves p inside root as the server's WalkBeneath does,
// for a root that is not itself a link (an alias domain asks meta).
func (c *Client) beneathCached(ctx context.Context, root, p string) (proto.Attr, error) {
	top, err := c.walkCached(ctx, root)
	if err != nil {
		return top, err
	}
	switch top.Mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		return proto.Attr{}, errUncached
	case syscall.S_IFDIR:
	default:
		return proto.Attr{}, proto.Errorf(syscall.ENOTDIR, root+": not a directory")
	}
	escape := func() error {
		return proto.Errorf(syscall.EXDEV, path.Join(root, p)+": resolves outside "+root)
	}
	// stack: the directories from root down to the current one.
	stack := []proto.Attr{top}
	comps := strings.Split(p, "/")
	links := 0
	for i := 0; i < len(comps); i++ {
		name := comps[i]
		if name == "" || name == "." {
			continue
		}
		if len(name) > nameMax {
			return proto.Attr{}, syscall.ENAMETOOLONG
		}
		cur := stack[len(stack)-1]
		if cur.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return proto.Attr{}, proto.Errorf(syscall.ENOTDIR, root+p+": not a directory")
		}
		if name == ".." {
			if len(stack) == 1 {
				return proto.Attr{}, escape()
			}
			stack = stack[:len(stack)-1]
			continue
		}
		n, err := c.lookupCached(ctx, cur.Ino, name)
		if err != nil {
			if remoteErrno(err) == syscall.ENOENT {
				err = proto.Errorf(syscall.ENOENT, root+p+": no such file or directory")
			}
			return n, err
		}
		if n.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if links++; links > 40 {
				return proto.Attr{}, proto.Errorf(syscall.ELOOP, root+p+": too many levels of symbolic links")
			}
			t, err := c.readlinkCached(ctx, n.Ino)
			if err != nil {
				return proto.Attr{}, err
			}
			if strings.HasPrefix(t, "/") {
				return proto.Attr{}, escape()
			}
			comps, i = append(strings.Split(t, "/"), comps[i+1:]...), -1
			continue
		}
		stack = append(stack, n)
	}
	return stack[len(stack)-1], nil
}
