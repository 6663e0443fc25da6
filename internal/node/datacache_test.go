package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The doorkeeper holds what was put in it; of keys never put in, few
// test positive (two probes in 8 bits per key: well under 10%).
func TestDoorkeeper(t *testing.T) {
	var d doorkeeper
	d.init(8 * 1024)
	early := 0
	for k := uint64(0); k < 1024; k++ {
		if d.testAndSet(mix(k)) {
			early++ // a false positive: possible in a Bloom filter
		}
		if !d.has(mix(k)) || !d.testAndSet(mix(k)) {
			t.Fatalf("key %d: added, then not found", k)
		}
	}
	if early > 50 {
		t.Errorf("%d of 1024 keys positive before they were added", early)
	}
	fp := 0
	for k := uint64(1 << 40); k < 1<<40+10000; k++ {
		if d.has(mix(k)) {
			fp++
		}
	}
	if fp > 1000 {
		t.Errorf("%d of 10000 keys never added test positive", fp)
	}
	d.clear()
	for k := uint64(0); k < 1024; k++ {
		if d.has(mix(k)) {
			t.Fatalf("key %d still there after clear", k)
		}
	}
}

// A key's estimate counts its requests: the first in the doorkeeper, the
// rest in the sketch, up to the counters' limit; keys never asked for
// estimate (almost always) 0; halving ages every count.
func TestTinyLFUCounts(t *testing.T) {
	f := newTinyLFU(1024)
	for i := 1; i <= 20; i++ {
		f.touch(7)
		if want := min(i, countMax+1); f.estimate(7) != want {
			t.Fatalf("after %d requests: estimate %d, want %d", i, f.estimate(7), want)
		}
	}
	for k := uint64(100); k < 600; k++ { // 500 keys once, 100 of them 5 times
		f.touch(k)
		if k < 200 {
			for range 4 {
				f.touch(k)
			}
		}
	}
	over := 0
	for k := uint64(100); k < 200; k++ {
		if f.estimate(k) < 5 {
			t.Fatalf("key %d asked for 5 times, estimate %d (count-min never underestimates)", k, f.estimate(k))
		}
	}
	for k := uint64(200); k < 600; k++ {
		if f.estimate(k) > 1 {
			over++
		}
	}
	if over > 20 {
		t.Errorf("%d of 400 keys asked for once estimate more than 1", over)
	}
	never := 0
	for k := uint64(1 << 30); k < 1<<30+1000; k++ {
		if f.estimate(k) > 0 {
			never++
		}
	}
	if never > 100 {
		t.Errorf("%d of 1000 keys never asked for have a nonzero estimate", never)
	}
	f.reset()
	if got := f.estimate(7); got != countMax/2 {
		t.Errorf("after halving: estimate %d, want %d (the doorkeeper is emptied too)", got, countMax/2)
	}
	if got := f.estimate(150); got != 2 {
		t.Errorf("after halving a count of 4 (plus the doorkeeper's 1): %d, want 2", got)
	}
}

// Aging happens by itself: after sampleSize requests the counts halve.
func TestTinyLFUAges(t *testing.T) {
	f := newTinyLFU(1024)
	for range 10 {
		f.touch(1)
	}
	for k := range uint64(f.sampleSize) {
		f.touch(1000 + k)
	}
	if got := f.estimate(1); got > 10/2 {
		t.Errorf("after %d other requests key 1 still estimates %d: counts never halved", f.sampleSize, got)
	}
}

func ver(ino uint64, size int) version {
	return version{ino: ino, size: uint64(size), mtime: 1, ctime: 1}
}

func fillWith(size int) func() ([]byte, error) {
	return func() ([]byte, error) { return make([]byte, size), nil }
}

// A scan of one-hit files ten times the cache's size leaves a hot set in
// place: none of them is asked for twice, so none looks more popular than
// a hot file at the LRU's cold end.
func TestAdmissionResistsScan(t *testing.T) {
	const size, entries = 4096, 100
	c := newDataCache(entries*(size+entryOverhead), size)
	ctx := context.Background()
	hot := 50
	for round := range 5 {
		for ino := uint64(1); ino <= uint64(hot); ino++ {
			if _, err := c.get(ctx, ver(ino, size), false, fillWith(size)); err != nil {
				t.Fatal(err)
			}
		}
		if round == 0 && c.len() != hot {
			t.Fatalf("an empty cache took %d of %d files", c.len(), hot)
		}
	}
	for ino := uint64(1000); ino < 1000+10*entries; ino++ {
		c.get(ctx, ver(ino, size), false, fillWith(size))
		if c.used.Load() > c.max {
			t.Fatalf("cache holds %d bytes, bound %d", c.used.Load(), c.max)
		}
	}
	c.mu.Lock()
	for ino := uint64(1); ino <= uint64(hot); ino++ {
		if c.byIno[ino] == nil {
			t.Errorf("hot file %d evicted by a scan of one-hit files", ino)
		}
	}
	c.mu.Unlock()
	// The free room went to scan files (an empty slot costs nothing to
	// fill), but they only ever evicted each other.
	if c.len() != entries {
		t.Errorf("%d entries, want a full cache of %d", c.len(), entries)
	}
	// A file that turns popular gets in, pushing out a cold one.
	for range 4 {
		c.get(ctx, ver(5000, size), false, fillWith(size))
	}
	if _, ok := c.lookup(ver(5000, size)); !ok {
		t.Error("a file asked for 5 times was not admitted over one-hit files")
	}
}

// A copy is used only for the exact version it was read under; another
// version of the inode drops it (stale) and is read anew.
func TestVersionMismatchMisses(t *testing.T) {
	c := newDataCache(1<<20, 1<<16)
	ctx := context.Background()
	v1 := version{ino: 9, size: 3, mtime: 10, ctime: 10}
	c.get(ctx, v1, false, func() ([]byte, error) { return []byte("old"), nil })
	if d, ok := c.lookup(v1); !ok || string(d) != "old" {
		t.Fatalf("v1: %q %v", d, ok)
	}
	for _, v2 := range []version{
		{ino: 9, size: 3, mtime: 11, ctime: 11}, // rewritten, same size
		{ino: 9, size: 3, mtime: 10, ctime: 12}, // mtime set back by a setattr
		{ino: 9, size: 4, mtime: 10, ctime: 10},
	} {
		c.get(ctx, v1, false, func() ([]byte, error) { return []byte("old"), nil })
		if _, ok := c.lookup(v2); ok {
			t.Fatalf("%+v served the copy of %+v", v2, v1)
		}
		if c.len() != 0 || c.used.Load() != 0 {
			t.Fatalf("stale copy kept: %d entries, %d bytes", c.len(), c.used.Load())
		}
	}
	d, _ := c.get(ctx, v1, false, func() ([]byte, error) { return []byte("ol"), nil })
	if string(d) != "ol" || c.len() != 0 {
		t.Errorf("a read shorter than the version's size was cached (%d entries)", c.len())
	}
	if _, err := c.get(ctx, v1, false, func() ([]byte, error) { return nil, errors.New("iod down") }); err == nil || c.len() != 0 {
		t.Errorf("a failed read: err %v, %d entries", err, c.len())
	}
}

// Concurrent misses of one version read it once; all get its bytes.
func TestSingleFill(t *testing.T) {
	c := newDataCache(1<<20, 1<<16)
	const n = 16
	release := make(chan struct{})
	var reads atomic.Int32
	read := func() ([]byte, error) {
		reads.Add(1)
		<-release
		return []byte("hello"), nil
	}
	var wg sync.WaitGroup
	got := make([]string, n)
	for i := range n {
		wg.Go(func() {
			d, err := c.get(context.Background(), ver(1, 5), false, read)
			if err != nil {
				t.Error(err)
			}
			got[i] = string(d)
		})
	}
	// Every get counts its miss before it waits: then all are waiting.
	for deadline := time.Now().Add(10 * time.Second); c.misses.Load() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the cache", c.misses.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if reads.Load() != 1 {
		t.Errorf("%d reads for %d concurrent misses, want 1", reads.Load(), n)
	}
	for i, g := range got {
		if g != "hello" {
			t.Errorf("request %d got %q", i, g)
		}
	}
	// A read that panics leaves no fill behind: the next get reads.
	func() {
		defer func() { recover() }()
		c.get(context.Background(), ver(3, 5), false, func() ([]byte, error) { panic("boom") })
	}()
	if d, err := c.get(context.Background(), ver(3, 5), false, fillWith(5)); err != nil || len(d) != 5 {
		t.Errorf("after a panicking read: %d bytes, %v", len(d), err)
	}
	// A waiter that gives up does not wait for the read.
	block := make(chan struct{})
	defer close(block)
	go c.get(context.Background(), ver(2, 5), false, func() ([]byte, error) { <-block; return []byte("later"), nil })
	for deadline := time.Now().Add(10 * time.Second); c.misses.Load() < n+3; {
		if time.Now().After(deadline) {
			t.Fatal("the first get of inode 2 never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.get(ctx, ver(2, 5), false, fillWith(5)); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled waiter: %v", err)
	}
}

// Under concurrent requests of Zipf-distributed files of mixed sizes the
// cache never holds more than its bound, and its accounting stays exact.
func TestByteBoundConcurrent(t *testing.T) {
	const max = 256 << 10
	c := newDataCache(max, 32<<10)
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if u := c.used.Load(); u > max {
				t.Errorf("cache holds %d bytes, bound %d", u, max)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 2)), 1.1, 1, 2000)
			for range 3000 {
				ino := z.Uint64() + 1
				size := int(ino*977) % (32 << 10) // each inode its own size
				v := ver(ino, size)
				if r.IntN(50) == 0 {
					v.mtime++ // now and then a changed file
				}
				d, err := c.get(context.Background(), v, false, fillWith(size))
				if err != nil || len(d) != size {
					t.Errorf("inode %d: %d bytes, %v", ino, len(d), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	watcher.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	sum, n, prot := int64(0), 0, int64(0)
	for e := c.victim(nil); e != nil; e = c.victim(e) {
		sum += e.cost()
		if e.protected {
			prot += e.cost()
		}
		if n++; c.byIno[e.v.ino] != e {
			t.Fatalf("inode %d on a segment's list but not in the map", e.v.ino)
		}
	}
	if sum != c.used.Load() || n != len(c.byIno) || sum > max || prot != c.protUsed || prot > max*protectedShare/100 {
		t.Errorf("lists hold %d entries, %d bytes (%d protected, counted %d); map %d entries; used %d; bound %d",
			n, sum, prot, c.protUsed, len(c.byIno), c.used.Load(), max)
	}
	if c.hits.Load() == 0 || c.evictions.Load() == 0 {
		t.Errorf("hits %d evictions %d: the workload did not exercise the cache", c.hits.Load(), c.evictions.Load())
	}
	t.Logf("hits %d misses %d admissions %d evictions %d", c.hits.Load(), c.misses.Load(), c.admissions.Load(), c.evictions.Load())
}

func TestCacheOff(t *testing.T) {
	if c := newDataCache(0, 0); c != nil || c.cacheable(1) {
		t.Error("a cache of 0 bytes is on")
	}
}

// A huge cache neither overflows the protected segment's share (which
// made a hit dereference nil) nor passes the flag check.
func TestHugeCacheNoOverflow(t *testing.T) {
	for _, c := range []*dataCache{newDataCache(1<<57, 1<<16), func() *dataCache {
		c := newDataCache(1<<20, 1<<16)
		c.max = 1 << 62 // the share's arithmetic itself, past any clamp
		return c
	}()} {
		v := ver(1, 5)
		for range 3 { // a miss, then hits that promote
			if d, err := c.get(context.Background(), v, false, fillWith(5)); err != nil || len(d) != 5 {
				t.Fatalf("max %d: %d bytes, %v", c.max, len(d), err)
			}
		}
		if c.hits.Load() != 2 || c.protUsed != c.used.Load() {
			t.Errorf("max %d: hits %d, protected %d of %d bytes", c.max, c.hits.Load(), c.protUsed, c.used.Load())
		}
	}
	if c := newDataCache(1<<57, 1<<16); c.max != MaxDataCache {
		t.Errorf("a cache of 2^57 bytes has max %d, want the limit %d", c.max, MaxDataCache)
	}
	for size, ok := range map[int64]bool{0: true, 64 << 20: true, MaxDataCache: true, MaxDataCache + 1: false, 1 << 57: false, -1: false} {
		err := CheckDataCache(size, DefaultCacheFileMax)
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "--data-cache") {
			t.Errorf("CheckDataCache(%d): %v", size, err)
		}
	}
}

// --cache-file-max is bounded (the read-ahead window) and must fit in
// --data-cache with its bookkeeping; a file that cannot fit is not
// cacheable; a partial request does not read a file the cache would not
// take.
func TestCacheFileMaxBounded(t *testing.T) {
	for _, tc := range []struct {
		size, fileMax int64
		want          []string // in the error; nil: no error
	}{
		{64 << 20, 64 << 10, nil},
		{0, 64 << 10, nil},
		{128<<10 + entryOverhead, 128 << 10, nil},
		{128<<10 + entryOverhead - 1, 128 << 10, []string{"--cache-file-max", "--data-cache"}},
		{1 << 20, 1 << 30, []string{"--cache-file-max", "limit"}},
		{64 << 20, MaxCacheFileMax + 1, []string{"--cache-file-max"}},
		{64 << 20, 0, []string{"--cache-file-max"}},
	} {
		err := CheckDataCache(tc.size, tc.fileMax)
		if (err == nil) != (tc.want == nil) {
			t.Errorf("CheckDataCache(%d, %d): %v", tc.size, tc.fileMax, err)
		}
		for _, w := range tc.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("CheckDataCache(%d, %d): %q does not name %s", tc.size, tc.fileMax, err, w)
			}
		}
	}
	if c := newDataCache(1<<20, 1<<30); c.fileMax != MaxCacheFileMax || c.cacheable(8<<20) {
		t.Errorf("--cache-file-max 1G: fileMax %d, an 8M file cacheable %v", c.fileMax, c.cacheable(8<<20))
	}
	if c := newDataCache(896+entryOverhead, 64<<10); c.cacheable(897) || !c.cacheable(896) { // 896: a size class
		t.Error("cacheable ignores that a file and its bookkeeping must fit in the cache")
	}

	c := newDataCache(2*(4096+entryOverhead), 4096)
	ctx := context.Background()
	reads := 0
	read := func() ([]byte, error) { reads++; return make([]byte, 4096), nil }
	if _, err := c.get(ctx, ver(1, 4096), true, read); err != nil || reads != 1 {
		t.Fatalf("a partial request on an empty cache: %v, %d reads (want the file read, it fits)", err, reads)
	}
	for range 3 { // inodes 1 and 2 popular, the cache full
		c.get(ctx, ver(1, 4096), false, read)
		c.get(ctx, ver(2, 4096), false, read)
	}
	reads = 0
	if _, err := c.get(ctx, ver(3, 4096), true, read); !errors.Is(err, errNotAdmitted) || reads != 0 {
		t.Errorf("a partial request for a file the full cache would not take: %v, %d reads", err, reads)
	}
	if d, err := c.get(ctx, ver(3, 4096), false, read); err != nil || len(d) != 4096 || reads != 1 {
		t.Errorf("a whole request for it: %d bytes, %v, %d reads", len(d), err, reads)
	}
}

// The cache charges what the heap really holds: files just past a size
// class cost their class, so the heap stays within --data-cache (plus the
// sketch, made before the measurement) where it ran 24% over.
func TestChargeIsHeapSize(t *testing.T) {
	for n := int64(1); n <= 2*MaxCacheFileMax; n += 1 + n/16 {
		if got, want := allocSize(n), int64(cap(slices.Grow([]byte(nil), int(n)))); got != want {
			t.Fatalf("allocSize(%d) = %d, the heap gives %d", n, got, want)
		}
	}
	for _, size := range []int{4097, 32769, 1000} {
		const max = 16 << 20
		c := newDataCache(max, 64<<10)
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		for i := uint64(1); i < 2*max/uint64(size); i++ {
			c.get(context.Background(), ver(i, size), false, fillWith(size))
		}
		runtime.GC()
		runtime.ReadMemStats(&b)
		grew := int64(b.HeapAlloc) - int64(a.HeapAlloc)
		if grew > max+max/20 {
			t.Errorf("files of %d bytes: the heap grew %d KiB for a cache of %d KiB (charged %d KiB, %d entries)",
				size, grew>>10, max>>10, c.used.Load()>>10, c.len())
		}
		t.Logf("files of %d bytes: heap grew %d KiB, charged %d KiB", size, grew>>10, c.used.Load()>>10)
		runtime.KeepAlive(c)
	}
}

// An older version never displaces a newer copy: not a slow fill of it
// that ends after the newer one was admitted, nor a request that got older
// attributes. Its requests are still answered with its own bytes.
func TestOlderVersionKeepsNewer(t *testing.T) {
	c := newDataCache(1<<20, 1<<16)
	ctx := context.Background()
	v1 := version{ino: 7, size: 3, mtime: 1, ctime: 1}
	v2 := version{ino: 7, size: 3, mtime: 2, ctime: 2}
	release := make(chan struct{})
	done := make(chan []byte)
	go func() {
		d, _ := c.get(ctx, v1, false, func() ([]byte, error) { <-release; return []byte("old"), nil })
		done <- d
	}()
	for deadline := time.Now().Add(10 * time.Second); c.misses.Load() < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the fill of v1 never started")
		}
		time.Sleep(time.Millisecond)
	}
	if d, err := c.get(ctx, v2, false, func() ([]byte, error) { return []byte("new"), nil }); err != nil || string(d) != "new" {
		t.Fatalf("v2: %q, %v", d, err)
	}
	close(release)
	if d := <-done; string(d) != "old" {
		t.Errorf("the slow fill of v1 answered %q", d)
	}
	if d, ok := c.lookup(v2); !ok || string(d) != "new" {
		t.Errorf("after v1's slow fill ended, v2 is no longer cached (%q, %v)", d, ok)
	}
	if d, err := c.get(ctx, v1, false, func() ([]byte, error) { return []byte("old"), nil }); err != nil || string(d) != "old" {
		t.Errorf("a request with v1's attributes got %q, %v", d, err)
	}
	if _, ok := c.lookup(v1); ok {
		t.Error("v1 served from the cache")
	}
	if d, ok := c.lookup(v2); !ok || string(d) != "new" {
		t.Errorf("requests with v1's attributes dropped the copy of v2 (%q, %v)", d, ok)
	}
	// Same ctime, older mtime: older too; a newer ctime wins whatever the mtime.
	if (version{ctime: 2, mtime: 1}).supersedes(v2) || !(version{ctime: 3, mtime: 0}).supersedes(v2) || !v2.supersedes(v2) {
		t.Error("supersedes orders by ctime, then mtime")
	}
}

// Aging is periodic: every sampleSize requests, the first and the later.
func TestTinyLFUAgingPeriod(t *testing.T) {
	f := newTinyLFU(64)
	var resets []int
	for i := 1; i <= 4*f.sampleSize; i++ {
		before := f.additions
		f.touch(uint64(i))
		if f.additions < before {
			resets = append(resets, i)
		}
	}
	want := []int{f.sampleSize, 2 * f.sampleSize, 3 * f.sampleSize, 4 * f.sampleSize}
	if !slices.Equal(resets, want) {
		t.Errorf("counts halved at requests %v, want %v", resets, want)
	}
}

// A copy older than maxAge is read again though the attributes match (its
// content may have changed without them); it keeps its place meanwhile.
// maxAge 0 is no limit.
func TestMaxAgeRereads(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newDataCache(1<<20, 1<<16)
	c.now = func() time.Time { return now }
	c.maxAge = 5 * time.Second
	ctx := context.Background()
	v := ver(4, 3)
	reads := 0
	read := func(s string) func() ([]byte, error) {
		return func() ([]byte, error) { reads++; return []byte(s), nil }
	}
	for i, step := range []struct {
		after time.Duration
		read  string // what the file system has
		want  string
		reads int
	}{
		{0, "one", "one", 1},
		{4 * time.Second, "two", "one", 1}, // within the age: the copy
		{2 * time.Second, "two", "two", 2}, // 6s after the read: read again
		{5 * time.Second, "six", "two", 2}, // 5s after the re-read: still the copy
		{time.Nanosecond, "six", "six", 3}, // past it
	} {
		now = now.Add(step.after)
		d, err := c.get(ctx, v, false, read(step.read))
		if err != nil || string(d) != step.want || reads != step.reads {
			t.Errorf("step %d: %q, %v, %d reads; want %q, %d reads", i, d, err, reads, step.want, step.reads)
		}
	}
	if c.len() != 1 || c.used.Load() != charge(3) || c.admissions.Load() != 1 {
		t.Errorf("%d entries, %d bytes, %d admissions after re-reads in place", c.len(), c.used.Load(), c.admissions.Load())
	}
	// An old copy of another version goes whatever the versions' order.
	now = now.Add(time.Minute)
	older := version{ino: 4, size: 3, mtime: 0, ctime: 0}
	if _, ok := c.lookup(older); ok || c.len() != 0 {
		t.Errorf("a copy past its age kept against another version (%d entries)", c.len())
	}
	c.maxAge = 0
	c.get(ctx, v, false, read("fou"))
	now = now.Add(24 * time.Hour)
	if d, _ := c.get(ctx, v, false, read("fiv")); string(d) != "fou" {
		t.Errorf("no age limit: read again after a day (%q)", d)
	}
}

// A partial request reads a file whole only if the copy would be kept: in
// place of its own copy grown too old, even in a full cache; never under
// a newer version's copy.
func TestPartialReadsOnlyWhatIsKept(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newDataCache(2*charge(4096), 4096)
	c.now = func() time.Time { return now }
	c.maxAge = time.Second
	ctx := context.Background()
	reads := 0
	read := func() ([]byte, error) { reads++; return make([]byte, 4096), nil }
	for range 3 {
		c.get(ctx, ver(1, 4096), false, read)
		c.get(ctx, ver(2, 4096), false, read)
	}
	now = now.Add(2 * time.Second)
	reads = 0
	if _, err := c.get(ctx, ver(1, 4096), true, read); err != nil || reads != 1 {
		t.Errorf("a partial request for a copy grown too old: %v, %d reads; want it read again in place", err, reads)
	}
	if _, ok := c.lookup(ver(1, 4096)); !ok {
		t.Error("the copy read again is not there")
	}
	newer := version{ino: 1, size: 4096, mtime: 5, ctime: 5}
	c.get(ctx, newer, false, read)
	reads = 0
	if _, err := c.get(ctx, ver(1, 4096), true, read); !errors.Is(err, errNotAdmitted) || reads != 0 {
		t.Errorf("a partial request with older attributes than the copy: %v, %d reads", err, reads)
	}
}
