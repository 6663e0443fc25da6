package node

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// SetSites changes where requests are served from; a request already
// answering keeps the file it started with.
func TestSetSitesLive(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	defer cl.Close()
	oldBig := bytes.Repeat([]byte("old!"), 1<<18) // 1 MiB: more than the socket buffers hold
	put(t, cl, "/www/a.test/index.html", []byte("old-a"))
	put(t, cl, "/www/a.test/big.bin", oldBig)
	put(t, cl, "/new/a.test/index.html", []byte("new-a"))
	put(t, cl, "/new/a.test/big.bin", bytes.Repeat([]byte("new!"), 1<<18))
	put(t, cl, "/custom/b/index.html", []byte("custom-b"))
	s := New(Config{Meta: fsys.Meta.Addr})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(host, path string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = host
		return http.DefaultClient.Do(req)
	}
	body := func(host, path string) string {
		t.Helper()
		r, err := get(host, path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	if b := body("a.test", "/"); b != "old-a" {
		t.Fatalf("before: %q", b)
	}
	if b := body("b.test", "/"); !strings.HasPrefix(b, "404") {
		t.Fatalf("b.test before: %q", b)
	}
	// In flight: headers in, body mostly not read.
	inflight, err := get("a.test", "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer inflight.Body.Close()
	head := make([]byte, 4)
	if _, err := io.ReadFull(inflight.Body, head); err != nil || string(head) != "old!" {
		t.Fatalf("in-flight start: %q %v", head, err)
	}

	if err := s.SetSites(Sites{Docroot: "/new", DefaultDomain: "A.test", Domains: map[string]string{"B.test.": "/custom/b"}}); err != nil {
		t.Fatal(err)
	}
	if b := body("a.test", "/"); b != "new-a" {
		t.Fatalf("after: a.test %q, want new-a", b)
	}
	if b := body("b.test", "/"); b != "custom-b" {
		t.Fatalf("after: b.test %q, want custom-b (its own docroot)", b)
	}
	if b := body("10.0.0.1", "/"); b != "new-a" {
		t.Fatalf("after: default domain %q, want new-a", b)
	}
	rest, err := io.ReadAll(inflight.Body)
	if err != nil || !bytes.Equal(append(head, rest...), oldBig) {
		t.Fatalf("the in-flight request: %d bytes, %v; want the old file whole", 4+len(rest), err)
	}
	if st := s.Sites(); st.Docroot != "/new" || st.DefaultDomain != "a.test" || st.Domains["b.test"] != "/custom/b" {
		t.Fatalf("Sites: %+v", st)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("health: %v", err)
	}
	// The health check follows the docroot at once.
	if err := s.SetSites(Sites{Docroot: "/missing"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "docroot /missing missing") {
		t.Fatalf("health after a docroot that is not there: %v", err)
	}
	for _, bad := range []Sites{{Docroot: "www"}, {Docroot: "/www/../x"}, {Docroot: "/www", DefaultDomain: "a/b"},
		{Docroot: "/www", Domains: map[string]string{"c.test": "rel"}}, {Docroot: "/www", Domains: map[string]string{"": "/x"}}} {
		if err := s.SetSites(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if s.Sites().Docroot != "/missing" {
		t.Fatal("a refused SetSites changed the sites")
	}
}

// A domain is a host name, never a step out of the docroot: "." and ".."
// (DOCROOT/.. is the parent) are refused as the default domain and as a
// domain with its own directory.
func TestSitesCheckDots(t *testing.T) {
	for _, bad := range []Sites{{Docroot: "/www", DefaultDomain: ".."}, {Docroot: "/www", DefaultDomain: "."},
		{Docroot: "/www", Domains: map[string]string{"..": "/x"}}} {
		if err := bad.check(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (&Sites{Docroot: "/www", DefaultDomain: "a.test", Domains: map[string]string{"b.test": "/x"}}).check(); err != nil {
		t.Errorf("good sites refused: %v", err)
	}
}
