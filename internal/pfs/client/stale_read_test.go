package client_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
)

// staleReaders opens n readers of the test file, each on its own client
// made with opts, before any copy is stale.
func staleReaders(t *testing.T, e *replEnv, n int, opts ...client.Option) []*client.File {
	t.Helper()
	var readers []*client.File
	for i := 0; i < n; i++ {
		cl := client.New(e.cl.Meta(), append([]client.Option{client.WithSecurity(e.sec)}, opts...)...)
		t.Cleanup(cl.Close)
		e.meta.mu.Lock()
		a := e.meta.attr
		e.meta.mu.Unlock()
		f, err := cl.OpenAttr(ctxT(t), a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.SetReadAhead(-1)
		readers = append(readers, f)
	}
	return readers
}

// staleAfterOpen writes "A", lets the readers open, then writes "B" while
// copy 2 fails (marked stale, acknowledged), and brings server 2 back
// unhealed: it still holds "A".
func staleAfterOpen(t *testing.T, e *replEnv, open func() []*client.File) ([]*client.File, []byte) {
	t.Helper()
	w := e.open(t)
	t.Cleanup(func() { w.Close() })
	mustWrite(t, w, bytes.Repeat([]byte("A"), 4096), 0)
	if err := w.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	readers := open()
	e.iod(2).mode.Store(modeFail) // the forward to copy 2 fails: marked stale
	nw := bytes.Repeat([]byte("B"), 4096)
	mustWrite(t, w, nw, 0)
	if err := w.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.iod(2).mode.Store(modeOK)
	return readers, nw
}

func readAll(t *testing.T, readers []*client.File, want []byte) {
	t.Helper()
	p := make([]byte, len(want))
	for i, f := range readers {
		for j := 0; j < 2; j++ {
			if _, err := f.ReadAt(p, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, want) {
				t.Fatalf("reader %d: read %q..., want the acknowledged %q... (the stale copy 2 was served)", i, p[:4], want[:4])
			}
		}
	}
}

// TestStaleListRefreshedByWatch: a reader with the metadata cache that
// opened the file before a copy was marked stale learns of the record from
// its watch before the write is acknowledged (meta waits for the watchers),
// and never reads the stale copy afterwards, at once.
func TestStaleListRefreshedByWatch(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	readers, nw := staleAfterOpen(t, e, func() []*client.File {
		rs := staleReaders(t, e, 16, client.WithCache())
		// Their watches registered (the fake answers a new watcher at once).
		for i := 0; i < 200; i++ {
			e.meta.mu.Lock()
			n := len(e.meta.watchers)
			e.meta.mu.Unlock()
			if n == len(rs) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return rs
	})
	readAll(t, readers, nw)
}

// TestStaleListRefreshedAfterStaleEvery: a reader without the cache
// re-reads the stale records when they are older than client.StaleEvery,
// and asks meta at most once per StaleEvery however often it reads.
func TestStaleListRefreshedAfterStaleEvery(t *testing.T) {
	e := startRepl(t, 2, 1, 2)
	readers, nw := staleAfterOpen(t, e, func() []*client.File { return staleReaders(t, e, 16) })
	time.Sleep(client.StaleEvery + 100*time.Millisecond)
	readAll(t, readers, nw)
	before := e.meta.getStale.Load()
	start := time.Now()
	p := make([]byte, 4096)
	for i := 0; i < 50; i++ {
		if _, err := readers[0].ReadAt(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.meta.getStale.Load() - before; time.Since(start) < client.StaleEvery && n > 1 {
		t.Fatalf("50 reads within %v asked meta for the stale records %d times, want at most 1", client.StaleEvery, n)
	}
}
