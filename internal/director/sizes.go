package director

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// fileSize returns the size of a file in the file system (cached), or 0
// when unknown.
func (d *Director) fileSize(ctx context.Context, p string) int64 {
	d.fsMu.Lock()
	fs := d.fs
	d.fsMu.Unlock()
	if fs == nil {
		return 0
	}
	return d.sizes.get(p, func() int64 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		n, err := fs.Size(ctx, p)
		if err != nil {
			return 0
		}
		return n
	})
}

// sizeCache remembers file sizes for a while: web content changes rarely
// and asking meta per request would double its load. It is bounded in
// bytes, least recently used out first: keys are URLs, which clients
// choose, so a count of entries bounds nothing.
type sizeCache struct {
	mu    sync.Mutex
	max   int64 // bytes; 0: defaultSizeCacheBytes
	bytes int64
	m     map[string]*list.Element
	lru   list.List // of *sizeEntry, most recent at the front
}

type sizeEntry struct {
	key  string
	size int64
	at   time.Time
}

const (
	sizeTTL               = 10 * time.Second
	defaultSizeCacheBytes = 8 << 20
	// sizeEntryOverhead is what an entry costs besides its key: the map
	// slot, the list element and the entry itself.
	sizeEntryOverhead = 160
)

func entryCost(k string) int64 { return int64(len(k)) + sizeEntryOverhead }

func (c *sizeCache) get(k string, load func() int64) int64 {
	c.mu.Lock()
	if e, ok := c.m[k]; ok {
		se := e.Value.(*sizeEntry)
		if time.Since(se.at) < sizeTTL {
			c.lru.MoveToFront(e)
			c.mu.Unlock()
			return se.size
		}
	}
	c.mu.Unlock()
	v := load()
	c.put(k, v)
	return v
}

func (c *sizeCache) put(k string, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*list.Element{}
	}
	max := c.max
	if max == 0 {
		max = defaultSizeCacheBytes
	}
	if e, ok := c.m[k]; ok {
		se := e.Value.(*sizeEntry)
		se.size, se.at = v, time.Now()
		c.lru.MoveToFront(e)
		return
	}
	cost := entryCost(k)
	if cost > max/16 {
		return // one key may not take a sixteenth of the cache
	}
	// Strings cut from a request share its memory: keep only the key.
	k = string([]byte(k))
	c.m[k] = c.lru.PushFront(&sizeEntry{key: k, size: v, at: time.Now()})
	c.bytes += cost
	for c.bytes > max {
		e := c.lru.Back()
		se := e.Value.(*sizeEntry)
		c.lru.Remove(e)
		delete(c.m, se.key)
		c.bytes -= entryCost(se.key)
	}
}

// accounted is the bytes the cache holds by its own count.
func (c *sizeCache) accounted() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, len(c.m)
}
