package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Data cache defaults (corral node --data-cache, --cache-file-max).
const (
	// DefaultDataCache is the CLI's default cache size in bytes.
	DefaultDataCache = 64 << 20
	// DefaultDataCacheMaxAge is how long a copy is used before it is read
	// again even though the file's attributes did not change: content
	// that reached the I/O servers without the setattr that publishes it
	// (a writer that has not closed the file, or died first) shows within
	// this long (corral node --data-cache-max-age).
	DefaultDataCacheMaxAge = 5 * time.Second
	// DefaultCacheFileMax is the largest file cached, in bytes: web
	// requests are mostly for small files (paper 001), and a large one
	// would push out many small ones for one request's worth of gain.
	DefaultCacheFileMax = 64 << 10
	// MaxCacheFileMax is the largest --cache-file-max: a miss reads the
	// whole file into memory at once, which should cost no more than the
	// read-ahead window an uncached request may hold.
	MaxCacheFileMax = ReadAhead
	// entryOverhead is what an entry is charged beyond its bytes (map
	// slot, list links, its version): so many empty files cannot hold
	// memory the byte bound does not see.
	entryOverhead = 128
	// MaxDataCache is the largest --data-cache: far above a node's
	// memory, and small enough that byte arithmetic on it (shares,
	// sums of costs) cannot overflow an int64.
	MaxDataCache = 64 << 30
)

// CheckDataCache reports what is wrong with a data cache of size bytes for
// files up to fileMax bytes, naming the flags (corral node --data-cache,
// --cache-file-max). A size of 0 (no cache) is always fine.
func CheckDataCache(size, fileMax int64) error {
	switch {
	case size < 0:
		return fmt.Errorf("--data-cache %d: negative", size)
	case size > MaxDataCache:
		return fmt.Errorf("--data-cache %d: more than the limit of %d (64G)", size, int64(MaxDataCache))
	case fileMax <= 0:
		return fmt.Errorf("--cache-file-max %d: want a positive size", fileMax)
	case fileMax > MaxCacheFileMax:
		return fmt.Errorf("--cache-file-max %d: more than the limit of %d (512K, the read-ahead window)", fileMax, int64(MaxCacheFileMax))
	case size > 0 && charge(fileMax) > size:
		return fmt.Errorf("--cache-file-max %d: a file that large (its memory, %d bytes, plus %d of bookkeeping) does not fit in --data-cache %d",
			fileMax, allocSize(fileMax), entryOverhead, size)
	}
	return nil
}

// version is what a cached copy of a file was read under. A request uses
// the copy only if the attributes it got for the file (StatBeneath) are
// exactly these: a file written since has another size, mtime or ctime (a
// setattr that restores the mtime still moves the ctime), so a changed
// file is never served from the cache, and checking costs no meta call
// beyond the one the request makes anyway.
type version struct {
	ino          uint64
	size         uint64
	mtime, ctime int64
}

// supersedes reports whether v is the same age as or newer than old, by
// ctime, then mtime: a request that got older attributes (from a lagging
// attribute cache, or a fill that took longer than a later one) must not
// drop or replace the copy of a newer version. Its own answer is still
// read from the file system: a copy is only ever used for its version.
func (v version) supersedes(old version) bool {
	if v.ctime != old.ctime {
		return v.ctime > old.ctime
	}
	return v.mtime >= old.mtime
}

type cacheEntry struct {
	v          version
	data       []byte
	read       time.Time   // when the read of data began: the content is at least this recent
	prev, next *cacheEntry // on its segment's list; the sentinel's next is the most recent
	protected  bool        // in the protected segment (asked for again since admitted)
}

func (e *cacheEntry) cost() int64 { return charge(int64(cap(e.data))) }

// charge is what a file of n bytes costs in the cache: the memory its
// bytes take (allocSize) and entryOverhead.
func charge(n int64) int64 { return allocSize(n) + entryOverhead }

// allocSize is the memory the Go heap gives n bytes: small allocations
// round up to the next size class (up to 32 KiB; a 4097-byte file takes
// 4864), larger ones to whole 8 KiB pages. Charging less lets the heap
// run a quarter over --data-cache with files just past a class (measured:
// 24% with files of 32 KiB + 1).
func allocSize(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n > maxSmallAlloc:
		return (n + pageSize - 1) &^ (pageSize - 1)
	}
	classesOnce.Do(measureClasses)
	i, _ := slices.BinarySearch(sizeClasses, n)
	return sizeClasses[i]
}

const (
	maxSmallAlloc = 32 << 10 // the runtime's largest size class
	pageSize      = 8 << 10  // the runtime's page
)

var (
	classesOnce sync.Once
	sizeClasses []int64 // ascending; the last is maxSmallAlloc
)

// measureClasses learns the runtime's size classes up to maxSmallAlloc,
// from the capacity append gives (it rounds up to the class): about 70
// allocations, once, rather than a copy of a table that may change.
func measureClasses() {
	for n := 1; n <= maxSmallAlloc; {
		c := cap(slices.Grow([]byte(nil), n))
		sizeClasses = append(sizeClasses, int64(c))
		n = c + 1
	}
}

// dataCache holds whole small files in memory, at most max bytes (data as
// the heap allocates it, plus entryOverhead each), keyed by inode.
// Admission is TinyLFU: a file enters a full cache only if it was asked for more often, recently, than
// each file it would push out, so a scan of files fetched once does not
// flush the hot set of a Zipf workload. Eviction is a segmented LRU (as in
// W-TinyLFU's main space): a file enters the probation segment and moves
// to the protected one (protectedShare of the bytes) when asked for again;
// victims come from probation's cold end first. So the files a scan let
// into free room are the first to go, not the hot files least recently
// asked for.
type dataCache struct {
	max, fileMax int64
	maxAge       time.Duration // a copy read longer ago is read again; 0: no limit
	// refreshAfter: a hit on a copy read longer ago than this starts a
	// read of the file in the background (one at a time per version),
	// which replaces the copy before it is too old to use: a hot file is
	// never a miss for its age, and the bound maxAge puts on staleness
	// holds. 0: none (a copy is read again only when a request finds it
	// too old, and waits for the read).
	refreshAfter time.Duration
	now          func() time.Time // the clock (the node's Config.Now)

	mu        sync.Mutex // guards all below except the counters
	byIno     map[uint64]*cacheEntry
	probation cacheEntry // sentinels of the two segments' lists
	protected cacheEntry
	protUsed  int64 // bytes in the protected segment
	freq      *tinyLFU
	fills     map[version]*fill // misses being read, one read per version

	used                                atomic.Int64 // bytes charged; changed under mu
	hits, misses, admissions, evictions atomic.Uint64
}

// fill is one read of a file that concurrent misses share (singleflight).
type fill struct {
	done chan struct{}
	data []byte
	err  error
}

// newDataCache returns a cache of max bytes for files up to fileMax bytes;
// nil (no cache) when max is 0 or less.
func newDataCache(max, fileMax int64) *dataCache {
	if max <= 0 {
		return nil
	}
	max = min(max, MaxDataCache) // CheckDataCache refuses more; a library caller gets the limit
	if fileMax <= 0 {
		fileMax = DefaultCacheFileMax
	}
	fileMax = min(fileMax, MaxCacheFileMax)
	// The sketch counts about as many keys as a cache of 4 KiB files
	// holds (the paper's width: the cache's entries).
	c := &dataCache{max: max, fileMax: fileMax, now: time.Now, byIno: map[uint64]*cacheEntry{},
		freq: newTinyLFU(int(min(max/4096, 1<<22))), fills: map[version]*fill{}}
	for _, l := range []*cacheEntry{&c.probation, &c.protected} {
		l.next, l.prev = l, l
	}
	return c
}

// cacheable reports whether a file of size bytes goes through the cache:
// at most fileMax, and able to fit at all (one that cannot would be read
// whole for nothing).
func (c *dataCache) cacheable(size uint64) bool {
	return c != nil && size <= uint64(c.fileMax) && charge(int64(size)) <= c.max
}

// lookup returns the cached bytes of v, counting a request for v's inode
// (hit or miss) for admission. A copy of another version of the inode is
// stale: it is dropped.
func (c *dataCache) lookup(v version) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookupLocked(v)
}

func (c *dataCache) lookupLocked(v version) ([]byte, bool) {
	c.freq.touch(v.ino)
	e := c.byIno[v.ino]
	old := e != nil && c.tooOld(e)
	if e != nil && e.v == v && !old {
		c.promote(e)
		c.hits.Add(1)
		return e.data, true
	}
	if e != nil && e.v != v && (old || v.supersedes(e.v)) {
		c.remove(e) // stale
	}
	// A copy of v too old to use stays until the read of v replaces it:
	// it keeps its place and its popularity is not asked again.
	c.misses.Add(1)
	return nil, false
}

// tooOld reports whether e was read longer than maxAge ago: its content
// may have changed without its attributes (see DefaultDataCacheMaxAge).
func (c *dataCache) tooOld(e *cacheEntry) bool {
	return c.maxAge > 0 && c.now().Sub(e.read) > c.maxAge
}

// get returns v's bytes from the cache, or from read, run once for all
// concurrent misses of v; what read returns is offered to the cache. A
// waiter whose ctx ends stops waiting; the read goes on for the others.
//
// With partial (the request wants part of the file) a miss that would not
// be admitted is not read: errNotAdmitted, and the caller reads just the
// part it needs.
func (c *dataCache) get(ctx context.Context, v version, partial bool, read func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	if data, ok := c.lookupLocked(v); ok {
		if c.refreshAfter > 0 && c.fills[v] == nil && c.now().Sub(c.byIno[v.ino].read) > c.refreshAfter {
			f := &fill{done: make(chan struct{})}
			c.fills[v] = f
			go c.runFill(v, f, read)
		}
		c.mu.Unlock()
		return data, nil
	}
	if f := c.fills[v]; f != nil {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.data, f.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if partial && !c.wouldTake(v) {
		c.mu.Unlock()
		return nil, errNotAdmitted
	}
	f := &fill{done: make(chan struct{})}
	c.fills[v] = f
	c.mu.Unlock()
	c.runFill(v, f, read)
	return f.data, f.err
}

// runFill does fill f of v: read, then offer the bytes to the cache and
// wake those waiting. f is in c.fills.
func (c *dataCache) runFill(v version, f *fill, read func() ([]byte, error)) {
	start := c.now()
	f.err = errFillAborted // what waiters see if read panics
	defer func() {
		// Deferred: even a read that panics must not leave later
		// requests for v waiting on a fill that never ends.
		c.mu.Lock()
		delete(c.fills, v)
		if f.err == nil {
			c.admit(v, f.data, start)
		}
		c.mu.Unlock()
		close(f.done)
	}()
	f.data, f.err = read()
}

var (
	errFillAborted = errors.New("data cache: the read of this file was aborted")
	errNotAdmitted = errors.New("data cache: this file would not be admitted")
)

// admit offers v's bytes to the cache. They go in if they fit in the free
// space, or if v's inode is estimated more popular than every entry they
// would evict from the cold end; otherwise the cache stays as it is.
// c.mu is held.
func (c *dataCache) admit(v version, data []byte, read time.Time) {
	if uint64(len(data)) != v.size || int64(len(data)) > c.fileMax {
		return // a short read, or a file that grew past the limit meanwhile
	}
	e := &cacheEntry{v: v, data: data, read: read}
	need := e.cost()
	if need > c.max {
		return
	}
	if old := c.byIno[v.ino]; old != nil {
		switch {
		case old.v == v && !old.read.Before(read):
			return // another fill of it got here first
		case old.v == v && old.cost() == need:
			// A copy read again for its age: the new bytes in its place.
			old.data, old.read = data, read
			return
		case old.v != v && !v.supersedes(old.v) && !c.tooOld(old):
			return // a newer version is cached
		}
		c.remove(old)
	}
	if !c.fits(v.ino, need) {
		return
	}
	for c.used.Load()+need > c.max {
		c.remove(c.victim(nil))
		c.evictions.Add(1)
	}
	c.byIno[v.ino] = e
	pushFront(&c.probation, e)
	c.used.Add(need)
	c.admissions.Add(1)
}

// wouldTake reports whether a read of v would be admitted: in place of a
// copy of v too old to use, or fitting (fits) where no newer version is.
// c.mu is held, after lookupLocked dropped what v supersedes.
func (c *dataCache) wouldTake(v version) bool {
	if e := c.byIno[v.ino]; e != nil {
		if e.v == v {
			return true
		}
		if !v.supersedes(e.v) && !c.tooOld(e) {
			return false
		}
	}
	return c.fits(v.ino, charge(int64(v.size)))
}

// fits reports whether need bytes of inode ino would be admitted: they fit
// in the free space, or the victims, in eviction order until enough is
// freed, are all less popular. c.mu is held.
func (c *dataCache) fits(ino uint64, need int64) bool {
	over := c.used.Load() + need - c.max
	if over <= 0 {
		return true
	}
	if need > c.max {
		return false
	}
	cand := c.freq.estimate(ino)
	freed := int64(0)
	for victim := c.victim(nil); freed < over; victim = c.victim(victim) {
		if victim == nil || c.freq.estimate(victim.v.ino) >= cand {
			return false // nil cannot happen: used covers the entries' costs
		}
		freed += victim.cost()
	}
	return true
}

// protectedShare is the protected segment's part of the bytes, in
// percent (W-TinyLFU's 80%).
const protectedShare = 80

// promote moves an entry asked for again to the protected segment's hot
// end; what overflows that segment goes back to probation's hot end.
func (c *dataCache) promote(e *cacheEntry) {
	unlink(e)
	if !e.protected {
		e.protected = true
		c.protUsed += e.cost()
	}
	pushFront(&c.protected, e)
	for c.protUsed > c.max/100*protectedShare { // c.max*protectedShare could overflow
		d := c.protected.prev
		unlink(d)
		d.protected = false
		c.protUsed -= d.cost()
		pushFront(&c.probation, d)
	}
}

// victim is the entry evicted after after (nil: the first): probation's
// cold end to its hot end, then the protected segment's the same way. nil
// when none is left.
func (c *dataCache) victim(after *cacheEntry) *cacheEntry {
	var e *cacheEntry
	switch {
	case after == nil:
		e = c.probation.prev
	default:
		e = after.prev
	}
	if e == &c.probation {
		e = c.protected.prev
	}
	if e == &c.protected {
		return nil
	}
	return e
}

func (c *dataCache) remove(e *cacheEntry) {
	unlink(e)
	if e.protected {
		c.protUsed -= e.cost()
	}
	delete(c.byIno, e.v.ino)
	c.used.Add(-e.cost())
}

func unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func pushFront(l, e *cacheEntry) {
	e.prev, e.next = l, l.next
	l.next.prev = e
	l.next = e
}

// len is the number of entries (tests).
func (c *dataCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byIno)
}
