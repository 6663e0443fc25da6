package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// uploadBed is a real file system, an uploader on it and an HTTP server
// whose "auth" takes the principal from a test header (the real auth
// wrapper is the station core's).
type uploadBed struct {
	t      *testing.T
	cl     *client.Client
	srv    *httptest.Server
	mu     sync.Mutex
	audits []api.AuditEntry
}

var testPrincipals = map[string]*Principal{
	"wa":     {Name: "wa", Role: api.RoleWebmaster, Domains: []string{"a.test"}},
	"wb":     {Name: "wb", Role: api.RoleWebmaster, Domains: []string{"b.test", "gone.test"}},
	"admin":  {Name: "admin", Role: api.RoleAdmin},
	"reader": {Name: "reader", Role: api.RoleReadOnly},
	"node1":  {Name: "node1", Role: api.RoleNode, Member: true},
}

func newUploadBed(t *testing.T) *uploadBed {
	if testing.Short() {
		t.Skip("starts a file system (meta + iods)")
	}
	fsys := pfstest.Start(t, 2)
	b := &uploadBed{t: t, cl: client.New(fsys.MetaAddr(), client.WithSecurity(proto.Security{Cred: fsys.Cred}))}
	t.Cleanup(b.cl.Close)
	cfg := &clustercfg.Config{
		FileSystem: clustercfg.FileSystem{Docroot: "/www"},
		Domains:    []clustercfg.Domain{{Name: "a.test", Service: "web"}, {Name: "b.test", Service: "web", Docroot: "/sites/b"}},
	}
	u := &uploader{
		docroot: func(ctx context.Context, d string) (string, error) { return docrootOf(cfg, d) },
		fs:      func(context.Context) (*client.Client, error) { return b.cl, nil },
		audit: func(ctx context.Context, e api.AuditEntry) error {
			b.mu.Lock()
			b.audits = append(b.audits, e)
			b.mu.Unlock()
			return nil
		},
		event: func(api.Event) {},
	}
	auth := func(h func(http.ResponseWriter, *http.Request, *Principal)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { h(w, r, testPrincipals[r.Header.Get("X-Test-User")]) }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+api.RouteFiles+"{domain}/{path...}", auth(u.put))
	mux.HandleFunc("DELETE "+api.RouteFiles+"{domain}/{path...}", auth(u.del))
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// do sends method on RouteFiles+rest as user, without following redirects.
func (b *uploadBed) do(method, user, rest string, body []byte) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.srv.URL+api.RouteFiles+rest, bytes.NewReader(body))
	req.Header.Set("X-Test-User", user)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func (b *uploadBed) read(p string) ([]byte, error) {
	f, err := b.cl.Open(context.Background(), p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, f.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

func TestUploadWebmasterDomains(t *testing.T) {
	b := newUploadBed(t)
	ctx := context.Background()
	big := make([]byte, 3<<20+17) // several stripes, streamed
	for i := range big {
		big[i] = byte(i * 7)
	}
	if st, out := b.do("PUT", "wa", "a.test/img/big.bin", big); st != 200 {
		t.Fatalf("webmaster of a.test writes a.test: %d %s", st, out)
	}
	var fr api.FileReply
	if st, out := b.do("PUT", "wa", "a.test/index.html", []byte("<h1>A</h1>")); st != 200 || json.Unmarshal([]byte(out), &fr) != nil || fr.Size != 10 || fr.Path != "index.html" {
		t.Fatalf("index: %d %s", st, out)
	}
	if got, err := b.read("/www/a.test/img/big.bin"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("uploaded file read back: %d bytes, %v", len(got), err)
	}
	// Another domain, whoever is not its webmaster or an admin.
	for _, who := range []string{"wa", "reader", "node1", "nobody"} {
		if st, out := b.do("PUT", who, "b.test/index.html", []byte("x")); st != 403 {
			t.Errorf("%s writes b.test: %d %s, want 403", who, st, out)
		}
	}
	if st, out := b.do("DELETE", "wa", "b.test/index.html", nil); st != 403 {
		t.Errorf("wa deletes in b.test: %d %s", st, out)
	}
	// Admin writes both; b.test has its own docroot.
	for _, p := range []string{"a.test/admin.txt", "b.test/index.html"} {
		if st, out := b.do("PUT", "admin", p, []byte("by admin")); st != 200 {
			t.Errorf("admin writes %s: %d %s", p, st, out)
		}
	}
	if got, err := b.read("/sites/b/index.html"); err != nil || string(got) != "by admin" {
		t.Errorf("/sites/b/index.html: %q %v", got, err)
	}
	// A webmaster of a domain the configuration no longer has: 404.
	if st, out := b.do("PUT", "wb", "gone.test/x", []byte("x")); st != 404 {
		t.Errorf("unknown domain: %d %s", st, out)
	}
	// Delete a directory tree.
	if st, out := b.do("DELETE", "wa", "a.test/img", nil); st != 200 {
		t.Errorf("delete: %d %s", st, out)
	}
	if _, err := b.cl.Stat(ctx, "/www/a.test/img"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted directory: %v", err)
	}
	b.mu.Lock()
	n := len(b.audits)
	first := b.audits[0]
	b.mu.Unlock()
	if n != 5 || first.User != "wa" || first.Action != "upload" || !strings.Contains(first.Detail, "a.test/img/big.bin") {
		t.Errorf("audit: %d entries, first %+v", n, first)
	}
}

func TestUploadCannotEscape(t *testing.T) {
	b := newUploadBed(t)
	ctx := context.Background()
	if st, out := b.do("PUT", "admin", "b.test/keep.html", []byte("B's")); st != 200 {
		t.Fatalf("setup: %d %s", st, out)
	}
	if err := b.cl.MkdirAll(ctx, "/www/a.test/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	// Links in a.test that lead into b.test's directory.
	if err := b.cl.SymlinkPath(ctx, "/sites/b", "/www/a.test/evil"); err != nil {
		t.Fatal(err)
	}
	if err := b.cl.SymlinkPath(ctx, "../../../sites/b", "/www/a.test/sub/up"); err != nil {
		t.Fatal(err)
	}
	if err := b.cl.SymlinkPath(ctx, "/sites/b/keep.html", "/www/a.test/link.html"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.test/evil/x.html", "a.test/sub/up/x.html", "a.test/evil/deeper/x.html"} {
		if st, out := b.do("PUT", "wa", p, []byte("pwned")); st != 403 || !strings.Contains(out, "symbolic link") {
			t.Errorf("PUT %s: %d %s, want 403", p, st, out)
		}
	}
	if st, out := b.do("DELETE", "wa", "a.test/evil/keep.html", nil); st != 403 {
		t.Errorf("DELETE through a link: %d %s", st, out)
	}
	// ".." in the path: refused by the handler, or cleaned by the router
	// into another domain's URL (a redirect), never written.
	for _, p := range []string{"a.test/../b.test/x.html", "a.test/sub/..%2F..%2F..%2Fsites%2Fb%2Fx.html"} {
		if st, out := b.do("PUT", "wa", p, []byte("pwned")); st/100 == 2 {
			t.Errorf("PUT %s: %d %s", p, st, out)
		}
	}
	req := httptest.NewRequest("PUT", api.RouteFiles+"a.test/x", strings.NewReader("pwned"))
	req.SetPathValue("domain", "a.test")
	req.SetPathValue("path", "sub/../../../sites/b/x.html")
	w := httptest.NewRecorder()
	(&uploader{}).put(w, req, testPrincipals["wa"])
	if w.Code != 400 || !strings.Contains(w.Body.String(), "..") {
		t.Errorf("path with ..: %d %s", w.Code, w.Body)
	}
	// A link as the file itself is replaced, not written through.
	if st, out := b.do("PUT", "wa", "a.test/link.html", []byte("A's own")); st != 200 {
		t.Errorf("PUT over a link: %d %s", st, out)
	}
	if got, err := b.read("/sites/b/keep.html"); err != nil || string(got) != "B's" {
		t.Errorf("b.test's file changed: %q %v", got, err)
	}
	if got, err := b.read("/www/a.test/link.html"); err != nil || string(got) != "A's own" {
		t.Errorf("a.test/link.html: %q %v", got, err)
	}
	ents, err := b.cl.ReadDir(ctx, "/sites/b")
	if err != nil || len(ents) != 1 {
		t.Errorf("/sites/b holds %d entries (%v), want only keep.html", len(ents), err)
	}
}

func TestCleanUpload(t *testing.T) {
	for in, want := range map[string]string{"a/b.html": "a/b.html", "./a//b/": "a/b", "x": "x"} {
		if got, err := cleanUpload(in); err != nil || got != want {
			t.Errorf("cleanUpload(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/", "..", "a/../../b", "a/..", "a\x00b", strings.Repeat("a", maxUploadPath+1)} {
		if got, err := cleanUpload(in); err == nil {
			t.Errorf("cleanUpload(%q) = %q, want an error", in, got)
		}
	}
}

func FuzzCleanUpload(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/./b/../c", "//x//", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := cleanUpload(s)
		if err != nil {
			return
		}
		if got == "" || strings.HasPrefix(got, "/") || strings.Contains(got, "\x00") {
			t.Fatalf("cleanUpload(%q) = %q", s, got)
		}
		for _, seg := range strings.Split(got, "/") {
			if seg == ".." || seg == "." || seg == "" {
				t.Fatalf("cleanUpload(%q) = %q has segment %q", s, got, seg)
			}
		}
	})
}
