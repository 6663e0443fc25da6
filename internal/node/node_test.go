package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func put(t testing.TB, cl *client.Client, p string, data []byte) {
	t.Helper()
	ctx := context.Background()
	if err := cl.MkdirAll(ctx, p[:strings.LastIndex(p, "/")], 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := cl.CreatePath(ctx, p, 0o644, client.CreateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(data, 0)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestServe(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	big := make([]byte, 3<<20+7)
	for i := range big {
		big[i] = byte(i * 13)
	}
	put(t, cl, "/www/a.test/index.html", []byte("<h1>a</h1>"))
	put(t, cl, "/www/a.test/big.bin", big)
	put(t, cl, "/www/a.test/style.css", []byte("body{}"))
	put(t, cl, "/www/a.test/sub/x.txt", []byte("x"))
	put(t, cl, "/www/b.test/index.html", []byte("<h1>b</h1>"))
	// The same answers with the data cache off and on (the small files
	// then come from it after their first request).
	for _, dc := range []int64{0, DefaultDataCache} {
		s := New(Config{Meta: fsys.Meta.Addr, DefaultDomain: "a.test", DataCache: dc})
		defer s.Close()
		srv := httptest.NewServer(s)
		defer srv.Close()
		for range 2 {
			serveChecks(t, srv.URL, big)
		}
		if dc > 0 && s.cache.hits.Load() == 0 {
			t.Error("with the data cache on, nothing came from it")
		}
	}
}

func serveChecks(t *testing.T, url string, big []byte) {
	t.Helper()
	do := func(method, host, path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	r, body := do("GET", "A.test:80", "/", nil)
	if r.StatusCode != 200 || body != "<h1>a</h1>" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q %s", r.StatusCode, body, r.Header.Get("Content-Type"))
	}
	if r, body = do("GET", "b.test", "/", nil); body != "<h1>b</h1>" {
		t.Fatalf("virtual domain b: %q", body)
	}
	if r, body = do("GET", "10.1.2.3", "/", nil); body != "<h1>a</h1>" {
		t.Fatalf("default domain: %d %q", r.StatusCode, body)
	}
	if r, _ = do("GET", "a.test", "/style.css", nil); r.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Fatalf("css type %q", r.Header.Get("Content-Type"))
	}
	r, body = do("GET", "a.test", "/big.bin", map[string]string{"Range": "bytes=1000-1999"})
	if r.StatusCode != 206 || body != string(big[1000:2000]) {
		t.Fatalf("range: %d, %d bytes", r.StatusCode, len(body))
	}
	r, body = do("GET", "a.test", "/big.bin", nil)
	if body != string(big) {
		t.Fatalf("whole file: %d bytes, want %d", len(body), len(big))
	}
	etag := r.Header.Get("ETag")
	if etag == "" || r.Header.Get("Last-Modified") == "" {
		t.Fatal("no ETag or Last-Modified")
	}
	if r, _ = do("GET", "a.test", "/big.bin", map[string]string{"If-None-Match": etag}); r.StatusCode != 304 {
		t.Fatalf("If-None-Match: %d", r.StatusCode)
	}
	if r, body = do("HEAD", "a.test", "/big.bin", nil); r.StatusCode != 200 || body != "" || r.ContentLength != int64(len(big)) {
		t.Fatalf("HEAD: %d %d", r.StatusCode, r.ContentLength)
	}
	if r, _ = do("GET", "a.test", "/sub", nil); r.StatusCode != 301 {
		t.Fatalf("directory without slash: %d", r.StatusCode)
	}
	if r, _ = do("GET", "a.test", "/sub/", nil); r.StatusCode != 404 {
		t.Fatalf("directory listing: %d, want 404", r.StatusCode)
	}
	if r, _ = do("GET", "a.test", "/../b.test/index.html", nil); r.StatusCode != 404 {
		t.Fatalf("escape attempt: %d", r.StatusCode)
	}
	if r, _ = do("POST", "a.test", "/", nil); r.StatusCode != 405 {
		t.Fatalf("POST: %d", r.StatusCode)
	}
	if r, _ = do("GET", "a b", "/", nil); r.StatusCode != 400 {
		t.Fatalf("bad host: %d", r.StatusCode)
	}
}
