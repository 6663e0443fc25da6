package client

// BufferState is what the write state holds buffered, and whether it is
// dirty: for tests of Sync against concurrent writers.
func (f *File) BufferState() (pend int, dirty bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pend), f.dirty
}
