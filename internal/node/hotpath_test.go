package node

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// A hot file's copy is read again in the background before it is too old
// to use, so requests for it never wait for the I/O servers: with them
// gone, a request past the age of the first read is still answered from
// the copy the refresh read. And a file rewritten through another client
// is served fresh at once.
func TestHotFileRefreshedAhead(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	put(t, cl, "/www/a.test/hot.txt", []byte("hot one"))
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const age = time.Minute
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20, DataCacheMaxAge: age, Now: clock})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	get := func(want string) {
		t.Helper()
		if a := fetch(t, srv.URL, "GET", "/hot.txt", nil); a.status != 200 || a.body != want {
			t.Fatalf("GET: %d %q, want 200 %q", a.status, a.body, want)
		}
	}
	get("hot one") // a miss: read and cached

	// Changed through another client: the next request sees it.
	put(t, cl, "/www/a.test/hot.txt", []byte("hot two"))
	get("hot two")
	misses := s.fs.CacheStats().Misses
	for range 20 {
		get("hot two")
	}
	if m := s.fs.CacheStats().Misses; m != misses {
		t.Errorf("20 requests for a hot file asked meta %d times, want none", m-misses)
	}

	step(age * 9 / 10)
	get("hot two") // a hit on a copy past 4/5 of its age: refreshed behind it
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.cache.mu.Lock()
		n := len(s.cache.fills)
		s.cache.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh did not end within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range fsys.IODs {
		p.Stop()
	}
	step(age / 2) // 1.4 ages after the first read, 0.5 after the refresh
	get("hot two")
}
