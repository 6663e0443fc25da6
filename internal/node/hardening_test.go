package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// raw sends one request line as is (no client-side cleaning) and returns
// the response.
func raw(t *testing.T, addr, target, host string, hdr ...string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", target, host, strings.Join(hdr, ""))
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return r
}

func body(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

// TestInternalEndpointsOffServicePort: /healthz and /load are on the admin
// mux only; on the service port (what a VIP forwards to) they are ordinary
// content paths. They used to be answered there.
func TestInternalEndpointsOffServicePort(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/index.html", []byte("a"))
	put(t, cl, "/www/a.test/load", []byte("a file named load"))
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	adm := httptest.NewServer(s.AdminMux())
	defer adm.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if r := raw(t, addr, "/healthz", "a.test"); r.StatusCode != 404 {
		t.Errorf("service port /healthz: %d, want 404 (content path)", r.StatusCode)
	}
	if r := raw(t, addr, "/load", "a.test"); r.StatusCode != 200 || body(r) != "a file named load" {
		t.Errorf("service port /load: %d, want the file", r.StatusCode)
	}
	aaddr := strings.TrimPrefix(adm.URL, "http://")
	if r := raw(t, aaddr, "/healthz", "x"); r.StatusCode != 200 || body(r) != "ok\n" {
		t.Errorf("admin /healthz: %d", r.StatusCode)
	}
	if r := raw(t, aaddr, "/load", "x"); r.StatusCode != 200 || !strings.Contains(body(r), `"active"`) {
		t.Errorf("admin /load: %d", r.StatusCode)
	}
	// Configured to, the service port answers them too.
	s2 := New(Config{Meta: fsys.Meta.Addr, HealthzOnService: true})
	defer s2.Close()
	srv2 := httptest.NewServer(s2)
	defer srv2.Close()
	if r := raw(t, strings.TrimPrefix(srv2.URL, "http://"), "/healthz", "a.test"); r.StatusCode != 200 || body(r) != "ok\n" {
		t.Errorf("service port /healthz with HealthzOnService: %d", r.StatusCode)
	}
	if r := raw(t, strings.TrimPrefix(srv2.URL, "http://"), "/load", "a.test"); r.StatusCode != 200 || body(r) != "a file named load" {
		t.Errorf("service port /load with HealthzOnService: %d, want the file", r.StatusCode)
	}
}

// TestRunAdminListener: Run listens for the admin endpoints on
// DefaultAdminAddr of the service address, or on Config.Admin.
func TestRunAdminListener(t *testing.T) {
	if a, _ := DefaultAdminAddr("127.0.0.21:8080"); a != "127.0.0.21:9080" {
		t.Errorf("default admin of 127.0.0.21:8080: %s", a)
	}
	if a, _ := DefaultAdminAddr("127.0.0.1:0"); a != "127.0.0.1:0" {
		t.Errorf("default admin of 127.0.0.1:0: %s", a)
	}
	if _, err := DefaultAdminAddr("nonsense"); err == nil {
		t.Error("DefaultAdminAddr of nonsense: no error")
	}
	fsys := pfstest.Start(t, 1)
	s := New(Config{Meta: fsys.Meta.Addr, Admin: "127.0.0.1:0"})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { done <- s.Serve(ctx, "127.0.0.1:0", func(a string) { ready <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	svc := <-ready
	if s.AdminAddr() == "" || s.AdminAddr() == svc {
		t.Fatalf("admin %q, service %q", s.AdminAddr(), svc)
	}
	if r := raw(t, s.AdminAddr(), "/load", "x"); r.StatusCode != 200 {
		t.Errorf("admin /load: %d", r.StatusCode)
	}
}

// TestHealthzTellsTruth: /healthz is 503 with the reason while the file
// system is unreachable and 200 again once it is back; an answer is reused
// for a second (clock seam: no sleeping). It used to say ok regardless.
func TestHealthzTellsTruth(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/index.html", []byte("a"))
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	step := func() { now.Add(int64(2 * time.Second)) }
	s := New(Config{Meta: fsys.Meta.Addr, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	defer s.Close()
	adm := httptest.NewServer(s.AdminMux())
	defer adm.Close()
	health := func() (int, string) {
		r, err := http.Get(adm.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if c, b := health(); c != 200 {
		t.Fatalf("healthy: %d %q", c, b)
	}
	addr := fsys.Meta.Addr
	fsys.Meta.Stop()
	if c, _ := health(); c != 200 {
		t.Fatalf("within the cache second: %d, want the cached 200", c)
	}
	step()
	if c, b := health(); c != 503 || !strings.Contains(b, "file system unreachable") {
		t.Fatalf("meta down: %d %q, want 503 with the reason", c, b)
	}
	p, err := fsys.StartMeta(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	fsys.Meta = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		step()
		c, b := health()
		if c == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("meta back: still %d %q", c, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStalledClientsClosed: clients that request a large file and never
// read are cut off after the write timeout (they used to be held forever,
// each with its buffers); a client reading slowly but steadily is not.
func TestStalledClientsClosed(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	put(t, cl, "/www/a.test/big.bin", big)
	s := New(Config{Meta: fsys.Meta.Addr, WriteTimeout: time.Second, IdleTimeout: time.Second})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { done <- s.Serve(ctx, "127.0.0.1:0", func(a string) { ready <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := <-ready

	rss := func() string {
		b, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
		return "?"
	}
	t.Logf("RSS before: %s", rss())
	// NODE_STALLED=300 reproduces the stalled-client figure (RSS in the log).
	stalled := 20
	if n, err := strconv.Atoi(os.Getenv("NODE_STALLED")); err == nil && n > 0 {
		stalled = n
	}
	var conns []*net.TCPConn
	for range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := c.(*net.TCPConn)
		tc.SetReadBuffer(4096)
		t.Cleanup(func() { tc.Close() })
		fmt.Fprintf(tc, "GET /big.bin HTTP/1.1\r\nHost: a.test\r\n\r\n")
		conns = append(conns, tc)
	}
	// An idle kept-alive connection goes too.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idle.Close() })

	// A slow reader of the whole file: 512 KiB every 100 ms, so about
	// 3 s in all (more than the timeout, and more than the kernel's socket
	// buffers hold) but never a second without progress.
	var slowErr error
	var slowN int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			slowErr = err
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /big.bin HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		buf := make([]byte, 512<<10)
		for {
			n, err := io.ReadFull(c, buf)
			slowN += int64(n)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					slowErr = err
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	time.Sleep(200 * time.Millisecond)
	t.Logf("RSS with %d stalled clients: %s, %d requests active", stalled, rss(), s.active.Load())
	deadline := time.Now().Add(30 * time.Second)
	for s.active.Load() > 1 { // the slow reader may still be going
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d requests still active: stalled clients are held", s.active.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("RSS after the timeout: %s", rss())
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("stalled client %d: %v after %d bytes, want the connection closed", i, err, n)
		} else if n >= int64(len(big)) {
			t.Errorf("stalled client %d got the whole file", i)
		}
	}
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.Copy(io.Discard, idle); err != nil || n != 0 {
		t.Errorf("idle connection: %d bytes, %v; want closed", n, err)
	}
	wg.Wait()
	if slowErr != nil || slowN < int64(len(big)) {
		t.Errorf("slow but moving reader: %d bytes, %v; want the whole range", slowN, slowErr)
	}
}

// TestNoOpenRedirect: the directory redirect's Location is the cleaned,
// single-slash path; //evil.example/../sub used to redirect to
// //evil.example/../sub/, another host for a browser.
func TestNoOpenRedirect(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/sub/index.html", []byte("sub"))
	put(t, cl, "/www/a.test/evil.example/x", []byte("x"))
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for target, want := range map[string]string{
		"//evil.example/../sub": "/sub/", "/sub": "/sub/", "//evil.example": "/evil.example/",
		"/./sub": "/sub/", `/\evil.example/../sub`: "/sub/", "/sub/.": "/sub/", "/sub?a=1&b=//x": "/sub/?a=1&b=//x",
		"//evil.example%2f..%2fsub": "/sub/",
	} {
		r := raw(t, addr, target, "a.test")
		if r.StatusCode != 301 || r.Header.Get("Location") != want {
			t.Errorf("GET %s: %d Location %q, want 301 %q", target, r.StatusCode, r.Header.Get("Location"), want)
		}
	}
	if r := raw(t, addr, "/sub%3F/", "a.test"); r.StatusCode != 404 {
		t.Errorf("GET /sub%%3F/: %d", r.StatusCode)
	}
}

// TestSymlinksStayInDomain: links resolve inside the domain's directory;
// one leading out (absolute, or ".." above it) is 404. /rootlink/secret.txt
// used to serve a file outside the docroot.
func TestSymlinksStayInDomain(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	ctx := context.Background()
	put(t, cl, "/secret.txt", []byte("secret"))
	put(t, cl, "/www/b.test/index.html", []byte("b"))
	put(t, cl, "/www/a.test/sub/x.txt", []byte("x"))
	links := map[string]string{
		"/www/a.test/rootlink": "/",
		"/www/a.test/up":       "../b.test",
		"/www/a.test/upup":     "sub/../../../secret.txt",
		"/www/a.test/alias":    "sub",
		"/www/a.test/l.txt":    "sub/x.txt",
		"/www/a.test/sub/back": "../sub/x.txt",
		"/www/a.test/loop":     "loop",
		"/www/alias.test":      "a.test", // an alias domain: the root may be a link
	}
	for p, target := range links {
		if err := cl.SymlinkPath(ctx, target, p); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for target, want := range map[string]int{
		"/rootlink/secret.txt": 404, "/up/index.html": 404, "/upup": 404, "/up/": 404, "/loop": 404,
		"/alias/x.txt": 200, "/l.txt": 200, "/sub/back": 200, "/alias": 301,
	} {
		r := raw(t, addr, target, "a.test")
		if r.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", target, r.StatusCode, want)
		}
		if want == 200 && body(r) != "x" {
			t.Errorf("GET %s: wrong body", target)
		}
	}
	if r := raw(t, addr, "/sub/x.txt", "alias.test"); r.StatusCode != 200 || body(r) != "x" {
		t.Errorf("alias domain: %d", r.StatusCode)
	}
	if r := raw(t, addr, "/rootlink/secret.txt", "alias.test"); r.StatusCode != 404 {
		t.Errorf("alias domain, link out: %d", r.StatusCode)
	}
}

// TestRangeEdges: RFC 9110 range cases; bytes=-0 selects nothing and is
// 416 with "bytes */SIZE" (it used to be 206 with an invalid
// Content-Range).
func TestRangeEdges(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/f", []byte("0123456789"))
	put(t, cl, "/www/a.test/empty", nil)
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		file, rng    string
		code         int
		contentRange string
		body         string
	}{
		{"/f", "bytes=-0", 416, "bytes */10", ""},
		{"/f", "bytes=-00", 416, "bytes */10", ""},
		{"/f", "bytes=0-0,-0", 206, "bytes 0-0/10", "0"},
		{"/f", "bytes=-3", 206, "bytes 7-9/10", "789"},
		{"/f", "bytes=-20", 206, "bytes 0-9/10", "0123456789"},
		{"/f", "bytes=8-", 206, "bytes 8-9/10", "89"},
		{"/f", "bytes=5-100", 206, "bytes 5-9/10", "56789"},
		{"/f", "bytes=10-", 416, "bytes */10", ""},
		{"/f", "items=0-1", 200, "", "0123456789"},
		{"/f", "Bytes=1-2", 206, "bytes 1-2/10", "12"},
		// Nothing of an empty file can be selected; serving it whole
		// (ignoring Range, as RFC 9110 allows) is what net/http does.
		{"/empty", "bytes=-0", 200, "", ""},
		{"/empty", "bytes=0-", 200, "", ""},
	}
	for _, c := range cases {
		r := raw(t, addr, c.file, "a.test", "Range: "+c.rng+"\r\n")
		b := body(r)
		if r.StatusCode != c.code || r.Header.Get("Content-Range") != c.contentRange || (c.code != 416 && b != c.body) {
			t.Errorf("%s Range %s: %d %q %q, want %d %q %q", c.file, c.rng, r.StatusCode, r.Header.Get("Content-Range"), b, c.code, c.contentRange, c.body)
		}
	}
	// Two ranges: a multipart 206 with both parts.
	r := raw(t, addr, "/f", "a.test", "Range: bytes=0-1,-2\r\n")
	if b := body(r); r.StatusCode != 206 || !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/byteranges") ||
		!strings.Contains(b, "Content-Range: bytes 0-1/10") || !strings.Contains(b, "Content-Range: bytes 8-9/10") {
		t.Errorf("two ranges: %d %s\n%s", r.StatusCode, r.Header.Get("Content-Type"), b)
	}
}

// syncBuf is a log sink safe for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestLongURL: a path over 4096 bytes is 414 without a file-system call,
// other requests are unaffected, and log lines stay short. It used to be a
// 503 (meta closed the node's shared connection) with the URL logged three
// times.
func TestLongURL(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/index.html", []byte("a"))
	var access, logs syncBuf
	s := New(Config{Meta: fsys.Meta.Addr, AccessLog: &access, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var wg sync.WaitGroup
	var fails atomic.Int64
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", srv.URL+"/", nil)
				req.Host = "a.test"
				r, err := hc.Do(req)
				if err != nil || r.StatusCode != 200 {
					fails.Add(1)
				}
				if r != nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}()
	}
	for _, n := range []int{4097, 5000, 60000} {
		long := "/" + strings.Repeat("a", n)
		if r := raw(t, addr, long, "a.test"); r.StatusCode != 414 {
			t.Errorf("GET of a %d-byte path: %d, want 414", len(long), r.StatusCode)
		}
	}
	// Under MaxPath, but the docroot and domain make the file-system path
	// longer than PATH_MAX: 414 as well, not 503.
	if r := raw(t, addr, "/"+strings.Repeat("b/", 2046), "a.test"); r.StatusCode != 414 {
		t.Errorf("GET of a path near the limit: %d, want 414", r.StatusCode)
	}
	close(stop)
	wg.Wait()
	if f := fails.Load(); f > 0 {
		t.Errorf("%d good requests failed alongside the long ones", f)
	}
	for _, l := range strings.Split(access.String()+logs.String(), "\n") {
		if len(l) > 1024 {
			t.Errorf("log line of %d bytes: %.120s...", len(l), l)
		}
	}
}

// TestReadAheadBudget: past the node's read-ahead budget a request is
// served without read-ahead, and correctly.
func TestReadAheadBudget(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	big := make([]byte, 12<<20+5) // more than the socket buffers take
	for i := range big {
		big[i] = byte(i * 7)
	}
	put(t, cl, "/www/a.test/big.bin", big)
	s := New(Config{Meta: fsys.Meta.Addr, ReadAheadBudget: ReadAhead})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	// A stalled client holds the one window.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /big.bin HTTP/1.1\r\nHost: a.test\r\n\r\n")
	deadline := time.Now().Add(20 * time.Second)
	for s.raUsed.Load() != ReadAhead {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled request did not take the window: %d", s.raUsed.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, rng := range []string{"", "Range: bytes=100000-2100000\r\n"} {
		r := raw(t, strings.TrimPrefix(srv.URL, "http://"), "/big.bin", "a.test", rng)
		want := big
		if rng != "" {
			want = big[100000:2100001]
		}
		if b := body(r); r.StatusCode/100 != 2 || b != string(want) {
			t.Errorf("GET %q without read-ahead: %d, %d bytes, want %d", rng, r.StatusCode, len(b), len(want))
		}
	}
	if u := s.raUsed.Load(); u != ReadAhead {
		t.Errorf("budget in use %d after the requests, want %d (the stalled one's)", u, ReadAhead)
	}
}

// TestHealthzWrongCredential: a node whose credential the cluster refuses
// cannot serve content, and /healthz says so.
func TestHealthzWrongCredential(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	other, err := proto.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Meta: fsys.Meta.Addr, Security: proto.Security{Cred: other.ReadOnly()}})
	defer s.Close()
	adm := httptest.NewServer(s.AdminMux())
	defer adm.Close()
	r, err := http.Get(adm.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 503 || !strings.Contains(string(b), "file system unreachable") {
		t.Fatalf("healthz with a refused credential: %d %q", r.StatusCode, b)
	}
	t.Logf("%s", b)
}

// FuzzRange: fixRange takes any Range header without panicking, and what
// it leaves never holds a zero-length suffix range.
func FuzzRange(f *testing.F) {
	for _, h := range []string{"bytes=-0", "bytes=0-0,-0", "items=1-2", "Bytes= -00 , 5-", "bytes=", "=", ""} {
		f.Add(h, int64(10))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		r, _ := http.NewRequest("GET", "http://a.test/", nil)
		r.Header["Range"] = []string{h}
		fixRange(r, size&(1<<40-1))
		got := r.Header.Get("Range")
		if spec, ok := strings.CutPrefix(got, "bytes="); ok {
			for _, ra := range strings.Split(spec, ",") {
				if n, suffix := strings.CutPrefix(strings.TrimSpace(ra), "-"); suffix && n != "" && strings.Trim(n, "0") == "" {
					t.Fatalf("Range %q left as %q", h, got)
				}
			}
		}
	})
}

// TestBodyThatNeverComes: a GET announcing a body it never sends gets its
// answer at once and its connection closed. Before, net/http waited with
// no deadline for the body (to keep the connection) before the header,
// holding the request, its file and a read-ahead window for good.
func TestBodyThatNeverComes(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/f", []byte("small"))
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /f HTTP/1.1\r\nHost: a.test\r\nContent-Length: 100\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the announced body does not come: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "small" || !resp.Close {
		t.Fatalf("%d %q close=%v, want 200 \"small\" and the connection closed", resp.StatusCode, b, resp.Close)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still active", s.active.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHeadIgnoresRange: Range is defined for GET only (RFC 9110 14.2).
func TestHeadIgnoresRange(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	put(t, cl, "/www/a.test/f", []byte("0123456789"))
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, rng := range []string{"bytes=0-1", "bytes=-0", "bytes=0-1,4-5"} {
		req, _ := http.NewRequest("HEAD", srv.URL+"/f", nil)
		req.Host = "a.test"
		req.Header.Set("Range", rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Range") != "" || resp.ContentLength != 10 {
			t.Errorf("HEAD with Range %s: %d, Content-Range %q, length %d; want 200 as without it", rng, resp.StatusCode, resp.Header.Get("Content-Range"), resp.ContentLength)
		}
	}
}
