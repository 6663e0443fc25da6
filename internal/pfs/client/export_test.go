package client

import "sync"

// BufferState is what the write state holds buffered, and whether it is
// dirty: for tests of Sync against concurrent writers.
func (f *File) BufferState() (pend int, dirty bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pend), f.dirty
}

// FreezeWatch stops the cache's watch from applying answers (as a client
// that hangs) until the returned function is called.
func (c *Client) FreezeWatch() (thaw func()) {
	c.cache.hold.Lock()
	var once sync.Once
	return func() { once.Do(c.cache.hold.Unlock) }
}

// MarkDown makes the client take server id for down (as after a failure).
func (c *Client) MarkDown(id uint32) { c.markDown(id) }
