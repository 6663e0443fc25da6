package fusefs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel cache (docs/mount.md, "Kernel cache"). With a caching client
// the kernel keeps attributes, names and pages for up to KernelCache, and
// the client's watch (meta's callbacks) drops them:
//
//   - attributes at once, in the watch loop before it acknowledges the
//     change to meta (so before the writer's call returns): an inode
//     notification without pages takes no kernel lock, and it also makes
//     the kernel discard any older reply still on its way;
//   - names and pages in a worker (see drop): an entry notification locks
//     the directory, which the kernel may hold across a request of this
//     mount that waits (through meta) for this very acknowledgement. The
//     loop waits for the worker up to entryWait, unless a change of this
//     mount is in flight.
//
// Negative entries are never cached: a name that appears changes no inode
// the kernel knows, so no callback could drop its absence. Every other
// change of a name (unlink, rename away or over) changes the inode it named,
// whose names the worker then drops. Replies carry the long timeouts only
// when the client's lease ran, unbroken, across the call.

// DefaultKernelCache is how long the kernel may keep what a caching
// client's mount tells it, when Options.KernelCache is 0.
const DefaultKernelCache = time.Minute

// entryWait bounds how long the watch loop waits for names and pages to be
// dropped before it acknowledges a change.
const entryWait = 50 * time.Millisecond

type kcache struct {
	ttl time.Duration

	mu    sync.Mutex
	nodes map[uint64]*node // the inodes the kernel may cache

	busy atomic.Int64 // this mount's changing calls in flight

	wmu     sync.Mutex
	pending []uint64 // inodes whose names and pages to drop
	all     bool     // drop every one
	waiters []chan struct{}
	kick    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newKcache(ttl time.Duration) *kcache {
	k := &kcache{ttl: ttl, nodes: map[uint64]*node{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go k.worker()
	return k
}

// stop ends the worker (the mount is gone); later changes are ignored.
func (k *kcache) stop() { k.once.Do(func() { close(k.done) }) }

func (k *kcache) add(n *node) {
	k.mu.Lock()
	k.nodes[n.ino()] = n
	k.mu.Unlock()
}

func (k *kcache) forget(n *node) {
	k.mu.Lock()
	if k.nodes[n.ino()] == n {
		delete(k.nodes, n.ino())
	}
	k.mu.Unlock()
}

func (k *kcache) lookup(inos []uint64, all bool) []*node {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*node
	if all {
		out = make([]*node, 0, len(k.nodes))
		for _, n := range k.nodes {
			out = append(out, n)
		}
		return out
	}
	for _, ino := range inos {
		if n := k.nodes[ino]; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// changed is the client's watch hook (see the comment at the top).
func (k *kcache) changed(inos []uint64, all bool) {
	for _, n := range k.lookup(inos, all) {
		n.mu.Lock()
		n.kept = keepKey{}
		n.mu.Unlock()
		n.NotifyContent(-1, 0) // attributes only: takes no lock
	}
	done := make(chan struct{})
	k.wmu.Lock()
	if all {
		k.all, k.pending = true, nil
	} else if !k.all {
		k.pending = append(k.pending, inos...)
	}
	k.waiters = append(k.waiters, done)
	k.wmu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
	select {
	case <-k.done:
		return
	default:
	}
	if k.busy.Load() > 0 {
		return // the worker may wait for a directory that call holds
	}
	t := time.NewTimer(entryWait)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
}

// worker drops names and pages (see the comment at the top).
func (k *kcache) worker() {
	for {
		select {
		case <-k.kick:
		case <-k.done:
			return
		}
		k.wmu.Lock()
		inos, all, waiters := k.pending, k.all, k.waiters
		k.pending, k.all, k.waiters = nil, false, nil
		k.wmu.Unlock()
		k.drop(inos, all)
		for _, w := range waiters {
			close(w)
		}
	}
}

// drop drops the kernel's names and pages of the changed inodes that may
// be out of date. Dropping too much costs more than a lookup: a file whose
// last name the kernel forgets is evicted with its pages. So:
//   - pages only of files open here: for a closed file, its next open
//     compares attributes (openFlags);
//   - a name (D, n) naming X only if D changed too (every change to a
//     directory entry changes its directory) and D no longer names X by
//     n: the lookup asks meta (the client's cache of D was just dropped).
func (k *kcache) drop(inos []uint64, all bool) {
	nodes := k.lookup(inos, all)
	changed := make(map[uint64]bool, len(inos))
	for _, ino := range inos {
		changed[ino] = true
	}
	for _, n := range nodes {
		if n.StableAttr().Mode == syscall.S_IFREG && n.openRefs() > 0 {
			n.NotifyContent(0, 0)
		}
		name, p := n.Parent()
		if p == nil {
			continue
		}
		if !all {
			if !changed[p.StableAttr().Ino] {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), proto.DefaultTimeout)
			a, err := n.fsys.c.Lookup(ctx, p.StableAttr().Ino, name)
			cancel()
			if err == nil && a.Ino == n.ino() {
				continue
			}
		}
		p.NotifyEntry(name)
	}
}

// gone maps ENOENT for an inode the kernel still names to ESTALE when the
// kernel caches names: the kernel then looks the path up again (a name it
// kept may now be another file's, its callback still on its way) and
// answers with what that finds.
func gone(err error, kernelCaches bool) error {
	if kernelCaches && errors.Is(err, syscall.ENOENT) {
		return syscall.ESTALE
	}
	return err
}

// begin starts a call whose reply the kernel may cache; end returns the
// timeout for it (0: the mount's default).
func (f *filesystem) begin() (uint64, bool) {
	if f.kc == nil {
		return 0, false
	}
	return f.c.CacheEpoch()
}

func (f *filesystem) ttl(epoch uint64, trusted bool) time.Duration {
	if !trusted {
		return 0
	}
	if e, ok := f.c.CacheEpoch(); !ok || e != epoch {
		return 0
	}
	return f.kc.ttl
}

// entryTimeouts sets out's timeouts for a reply read since (epoch,
// trusted).
func (f *filesystem) entryTimeouts(epoch uint64, trusted bool, out *fuse.EntryOut) {
	if t := f.ttl(epoch, trusted); t > 0 {
		out.SetEntryTimeout(t)
		out.SetAttrTimeout(t)
	}
}

func (f *filesystem) attrTimeout(epoch uint64, trusted bool, out *fuse.AttrOut) {
	if t := f.ttl(epoch, trusted); t > 0 {
		out.SetTimeout(t)
	}
}

// changing counts a changing call of this mount in flight; call the
// result when it is done.
func (f *filesystem) changing() func() {
	if f.kc == nil {
		return func() {}
	}
	f.kc.busy.Add(1)
	return func() { f.kc.busy.Add(-1) }
}

// keepKey is what an open compares to decide whether the kernel's pages
// of a file are still its content.
type keepKey struct {
	size         uint64
	mtime, ctime int64
}

func keyOf(a *proto.Attr) keepKey { return keepKey{a.Size, a.Mtime, a.Ctime} }

// openFlags decides FOPEN_KEEP_CACHE for an open that read attributes a:
// the kernel's pages stay if the file is unchanged since its last open
// here, and no callback said otherwise since.
func (n *node) openFlags(a *proto.Attr) uint32 {
	if n.fsys.kc == nil {
		return 0
	}
	k := keyOf(a)
	n.mu.Lock()
	defer n.mu.Unlock()
	keep := n.kept == k && k != (keepKey{})
	n.kept = k
	if keep {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// OnForget: the kernel knows the inode no more.
func (n *node) OnForget() {
	if kc := n.fsys.kc; kc != nil {
		kc.forget(n)
	}
}
