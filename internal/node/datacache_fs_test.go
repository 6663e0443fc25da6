package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

type answer struct {
	status int
	header http.Header
	body   string
}

func fetch(t *testing.T, url, method, path string, hdr map[string]string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, nil)
	req.Host = "a.test"
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header.Clone()
	h.Del("Date")
	h.Del("X-Served-By")
	body := string(b)
	// A multipart answer's boundary is random: compare it as BOUNDARY.
	if _, ps, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && ps["boundary"] != "" {
		body = strings.ReplaceAll(body, ps["boundary"], "BOUNDARY")
		h.Set("Content-Type", strings.ReplaceAll(h.Get("Content-Type"), ps["boundary"], "BOUNDARY"))
	}
	return answer{resp.StatusCode, h, body}
}

// The answers from the cache are the uncached path's, byte for byte and
// header for header: Range (single, suffix, multiple, unsatisfiable, other
// units), HEAD, conditional requests; and a hit asks no I/O server.
func TestCacheAnswersAsUncached(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	data := make([]byte, 40000) // over one stripe unit: both servers hold some
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	put(t, cl, "/www/a.test/f.bin", data)
	put(t, cl, "/www/a.test/index.html", []byte("<h1>hello</h1>"))
	put(t, cl, "/www/a.test/empty.txt", nil)
	put(t, cl, "/www/a.test/big.bin", make([]byte, 100<<10)) // over --cache-file-max

	off := New(Config{Meta: fsys.Meta.Addr})
	on := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20})
	t.Cleanup(off.Close)
	t.Cleanup(on.Close)
	offSrv, onSrv := httptest.NewServer(off), httptest.NewServer(on)
	t.Cleanup(offSrv.Close)
	t.Cleanup(onSrv.Close)

	first := fetch(t, offSrv.URL, "GET", "/f.bin", nil)
	etag, lm := first.header.Get("ETag"), first.header.Get("Last-Modified")
	if first.status != 200 || first.body != string(data) || etag == "" || lm == "" {
		t.Fatalf("uncached GET: %d, %d bytes, ETag %q, Last-Modified %q", first.status, len(first.body), etag, lm)
	}
	type req struct {
		method, path string
		hdr          map[string]string
	}
	reqs := []req{
		{"GET", "/f.bin", nil},
		{"HEAD", "/f.bin", nil},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=0-99"}},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=-10"}},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=39990-"}},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=100-199,1000-1009,-5"}},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=50000-"}},
		{"GET", "/f.bin", map[string]string{"Range": "bytes=-0"}},
		{"GET", "/f.bin", map[string]string{"Range": "items=0-5"}},
		{"HEAD", "/f.bin", map[string]string{"Range": "bytes=0-9"}},
		{"GET", "/f.bin", map[string]string{"If-None-Match": etag}},
		{"HEAD", "/f.bin", map[string]string{"If-None-Match": etag}},
		{"GET", "/f.bin", map[string]string{"If-Modified-Since": lm}},
		{"GET", "/f.bin", map[string]string{"If-Range": etag, "Range": "bytes=10-19"}},
		{"GET", "/f.bin", map[string]string{"If-Range": `"other"`, "Range": "bytes=10-19"}},
		{"GET", "/f.bin", map[string]string{"If-Match": `"other"`}},
		{"GET", "/", nil},
		{"GET", "/index.html", map[string]string{"Range": "bytes=3-4"}},
		{"GET", "/empty.txt", nil},
		{"GET", "/empty.txt", map[string]string{"Range": "bytes=0-5"}},
		{"GET", "/big.bin", map[string]string{"Range": "bytes=7-70000"}},
		{"GET", "/missing", nil},
	}
	compare := func(round string) {
		for _, r := range reqs {
			want := fetch(t, offSrv.URL, r.method, r.path, r.hdr)
			got := fetch(t, onSrv.URL, r.method, r.path, r.hdr)
			if got.status != want.status || got.body != want.body {
				t.Errorf("%s: %s %s %v: cached %d, %d bytes; uncached %d, %d bytes", round, r.method, r.path, r.hdr,
					got.status, len(got.body), want.status, len(want.body))
			}
			for k := range merge(got.header, want.header) {
				if g, w := got.header.Values(k), want.header.Values(k); strings.Join(g, "\n") != strings.Join(w, "\n") {
					t.Errorf("%s: %s %s %v: header %s cached %q, uncached %q", round, r.method, r.path, r.hdr, k, g, w)
				}
			}
		}
	}
	compare("first round (misses fill the cache)")
	hits := on.cache.hits.Load()
	compare("second round (hits)")
	if on.cache.hits.Load() == hits {
		t.Fatal("the second round had no cache hit")
	}
	if on.cache.len() != 3 {
		t.Errorf("%d files cached, want 3 (f.bin, index.html, empty.txt; big.bin is over the limit)", on.cache.len())
	}

	// With every I/O server gone the cache still answers; the uncached
	// path cannot.
	for _, p := range fsys.IODs {
		p.Stop()
	}
	if a := fetch(t, onSrv.URL, "GET", "/f.bin", map[string]string{"Range": "bytes=0-99"}); a.status != 206 || a.body != string(data[:100]) {
		t.Errorf("hit with the I/O servers down: %d, %d bytes", a.status, len(a.body))
	}
	// The uncached path fails (503, or a body cut short once the
	// header is out): the hits above cannot have asked an I/O server.
	hreq, _ := http.NewRequest("GET", onSrv.URL+"/big.bin", nil)
	hreq.Host = "a.test"
	if resp, err := http.DefaultClient.Do(hreq); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == 200 && len(b) == 100<<10 {
			t.Error("an uncached file served with the I/O servers down: is the test's premise wrong?")
		}
	}
	m := fetch(t, "http://"+mustServeAdmin(t, on), "GET", "/metrics", nil).body
	for _, series := range []string{"corral_node_cache_hits_total", "corral_node_cache_misses_total", "corral_node_cache_admissions_total", "corral_node_cache_bytes"} {
		if !regexp.MustCompile(`(?m)^` + series + ` [1-9]`).MatchString(m) {
			t.Errorf("metrics: %s not positive", series)
		}
	}
}

func merge(a, b http.Header) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// mustServeAdmin serves s's admin mux and returns its address.
func mustServeAdmin(t *testing.T, s *Server) string {
	srv := httptest.NewServer(s.AdminMux())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A file changed through the library is never served from the copy read
// before: new content of another size; new content of the same size (a
// new mtime); and new content of the same size whose mtime a setattr put
// back (only the ctime tells).
func TestCacheNeverStale(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	ctx := context.Background()
	const p = "/www/a.test/f.txt"
	put(t, cl, p, []byte("version one"))
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	expect := func(want string) {
		t.Helper()
		for range 3 { // a miss, then hits
			if a := fetch(t, srv.URL, "GET", "/f.txt", nil); a.status != 200 || a.body != want {
				t.Fatalf("GET: %d %q, want %q", a.status, a.body, want)
			}
		}
	}
	rewrite := func(content string) proto.Attr {
		t.Helper()
		f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(content), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		a, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	expect("version one")
	hits := s.cache.hits.Load()
	if hits < 2 {
		t.Fatalf("%d hits after three GETs of one file", hits)
	}
	a1 := rewrite("version two, longer")
	expect("version two, longer")

	a2 := rewrite("VERSION TWO, LONGER")
	if a2.Size != a1.Size || a2.Mtime == a1.Mtime {
		t.Fatalf("same-size rewrite: size %d->%d, mtime %d->%d (want same size, new mtime)", a1.Size, a2.Size, a1.Mtime, a2.Mtime)
	}
	expect("VERSION TWO, LONGER")

	rewrite("version 2: longer!!")
	a3, err := cl.SetAttr(ctx, &proto.SetAttr{Ino: a2.Ino, Mask: proto.SetMtime, Mtime: a2.Mtime})
	if err != nil {
		t.Fatal(err)
	}
	if a3.Size != a2.Size || a3.Mtime != a2.Mtime || a3.Ctime == a2.Ctime {
		t.Fatalf("mtime put back: size %d->%d, mtime %d->%d, ctime %d->%d (want only the ctime changed)",
			a2.Size, a3.Size, a2.Mtime, a3.Mtime, a2.Ctime, a3.Ctime)
	}
	expect("version 2: longer!!")
	if s.cache.len() != 1 {
		t.Errorf("%d entries for one file", s.cache.len())
	}
}

// Many clients at once over files of mixed sizes, a cache that holds a
// fraction of them: every answer is the file's content, and the cache
// never holds more than its bound (run with -race: hits share bytes).
func TestCacheConcurrentRequests(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	const files, max = 40, 32 << 10
	content := make([]string, files)
	for i := range files {
		b := make([]byte, (i*997)%(8<<10))
		for j := range b {
			b[j] = byte(i + j)
		}
		content[i] = string(b)
		put(t, cl, fmt.Sprintf("/www/a.test/%d", i), b)
	}
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: max})
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 3)), 1.2, 1, files-1)
			for range 60 {
				i := int(z.Uint64())
				if a := fetch(t, srv.URL, "GET", fmt.Sprintf("/%d", i), nil); a.status != 200 || a.body != content[i] {
					t.Errorf("file %d: %d, %d bytes, want %d", i, a.status, len(a.body), len(content[i]))
					return
				}
				if u := s.cache.used.Load(); u > max {
					t.Errorf("cache holds %d bytes, bound %d", u, max)
					return
				}
			}
		})
	}
	wg.Wait()
	if s.cache.hits.Load() == 0 || s.cache.evictions.Load() == 0 {
		t.Errorf("hits %d, evictions %d: the cache was not exercised", s.cache.hits.Load(), s.cache.evictions.Load())
	}
}

// A Range request on a file the cache cannot hold (over the clamped
// --cache-file-max, larger than the whole cache) reads only the range.
func TestRangeOnUncacheableFile(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	put(t, cl, "/www/a.test/big.bin", make([]byte, 8<<20))
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20, CacheFileMax: 1 << 30})
	t.Cleanup(s.Close)
	fills := 0
	s.fill = func(ctx context.Context, a proto.Attr) ([]byte, error) { fills++; return s.readWhole(ctx, a) }
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "http://a.test/big.bin", nil)
		r.Header.Set("Range", "bytes=0-0")
		s.ServeHTTP(w, r)
		if w.Code != http.StatusPartialContent || w.Body.Len() != 1 {
			t.Fatalf("status %d, %d bytes", w.Code, w.Body.Len())
		}
	}
	runtime.ReadMemStats(&after)
	if fills != 0 || s.cache.misses.Load() != 0 {
		t.Errorf("%d whole-file reads, %d cache misses for ranges of an 8M file in a 1M cache", fills, s.cache.misses.Load())
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("3 one-byte ranges allocated %d bytes: the 8M file was read whole", got)
	}
}

// Content that reached the I/O servers without the setattr that publishes
// it (the writer has not closed the file, or died first) leaves the
// attributes as they were: a cached node shows it once the copy is older
// than --data-cache-max-age, as an uncached node shows it at once.
func TestCacheMaxAgeUnpublishedWrite(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	put(t, cl, "/www/a.test/f.txt", []byte("version one"))
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	on := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20, Now: clock})
	off := New(Config{Meta: fsys.Meta.Addr})
	t.Cleanup(on.Close)
	t.Cleanup(off.Close)
	onS, offS := httptest.NewServer(on), httptest.NewServer(off)
	t.Cleanup(onS.Close)
	t.Cleanup(offS.Close)
	if got := fetch(t, onS.URL, "GET", "/f.txt", nil).body; got != "version one" {
		t.Fatalf("first GET: %q", got)
	}
	w := client.New(fsys.Meta.Addr)
	t.Cleanup(w.Close)
	f, err := w.Open(context.Background(), "/www/a.test/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("VERSION TWO"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(); err != nil { // on the I/O servers; no Close
		t.Fatal(err)
	}
	if got := fetch(t, offS.URL, "GET", "/f.txt", nil).body; got != "VERSION TWO" {
		t.Fatalf("uncached node: %q (the test's premise: the bytes are on the I/O servers)", got)
	}
	step(DefaultDataCacheMaxAge / 2)
	if got := fetch(t, onS.URL, "GET", "/f.txt", nil).body; got != "version one" {
		t.Logf("within the max age the cached node already shows %q", got)
	}
	step(DefaultDataCacheMaxAge)
	if got := fetch(t, onS.URL, "GET", "/f.txt", nil).body; got != "VERSION TWO" {
		t.Errorf("cached node %v after the write: %q", DefaultDataCacheMaxAge*3/2, got)
	}
}

// A conditional GET answered 304 reads nothing into the cache on a miss
// (no body to send); one that is not 304 does.
func TestCacheNotModifiedNoFill(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	put(t, cl, "/www/a.test/f.txt", []byte("hello"))
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20})
	t.Cleanup(s.Close)
	var fills atomic.Int32
	s.fill = func(ctx context.Context, a proto.Attr) ([]byte, error) { fills.Add(1); return s.readWhole(ctx, a) }
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	head := fetch(t, srv.URL, "HEAD", "/f.txt", nil)
	etag, lm := head.header.Get("ETag"), head.header.Get("Last-Modified")
	for _, h := range []map[string]string{
		{"If-None-Match": etag},
		{"If-None-Match": `"x", W/` + etag},
		{"If-None-Match": "*"},
		{"If-Modified-Since": lm},
	} {
		if a := fetch(t, srv.URL, "GET", "/f.txt", h); a.status != http.StatusNotModified {
			t.Errorf("%v: status %d", h, a.status)
		}
	}
	if fills.Load() != 0 || s.cache.len() != 0 {
		t.Errorf("304 answers read the file %d times into the cache (%d entries)", fills.Load(), s.cache.len())
	}
	for _, h := range []map[string]string{{"If-None-Match": `"other"`}, {"If-Modified-Since": "Mon, 02 Jan 2006 15:04:05 GMT"}} {
		if a := fetch(t, srv.URL, "GET", "/f.txt", h); a.status != http.StatusOK || a.body != "hello" {
			t.Errorf("%v: status %d, %q", h, a.status, a.body)
		}
	}
	if fills.Load() != 1 || s.cache.len() != 1 {
		t.Errorf("modified since: %d reads, %d entries; want the file read once and cached", fills.Load(), s.cache.len())
	}
}

// Requests waiting for another's read of a file: one whose client leaves
// returns at once without reading (499 in the log); when the read fails
// they all fail with it (503), none reads the file again.
func TestCacheWaitersOfAFill(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	put(t, cl, "/www/a.test/f.txt", []byte("hello"))
	s := New(Config{Meta: fsys.Meta.Addr, DataCache: 1 << 20, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(s.Close)
	started, release := make(chan struct{}), make(chan struct{})
	var fills atomic.Int32
	s.fill = func(ctx context.Context, a proto.Attr) ([]byte, error) {
		if fills.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil, errors.New("iod down")
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("GET", "http://a.test/f.txt", nil).WithContext(ctx))
		return w
	}
	waitMisses := func(n uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); s.cache.misses.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d requests reached the cache", s.cache.misses.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	const n = 4 // the filler and 3 waiters
	codes := make(chan int, n)
	go func() { codes <- serve(context.Background()).Code }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan *httptest.ResponseRecorder)
	go func() { gone <- serve(ctx) }()
	waitMisses(2)
	cancel()
	if w := <-gone; w.Code != StatusClientClosed || w.Body.Len() != 0 {
		t.Errorf("a waiter whose client left: status %d, %d body bytes; want %d, nothing", w.Code, w.Body.Len(), StatusClientClosed)
	}
	for range n - 1 {
		go func() { codes <- serve(context.Background()).Code }()
	}
	waitMisses(2 + n - 1)
	once.Do(func() { close(release) })
	for range n {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Errorf("a request of the failed read: status %d, want 503", c)
		}
	}
	if fills.Load() != 1 {
		t.Errorf("%d reads, want the one shared", fills.Load())
	}
}
