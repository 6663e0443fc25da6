package vhost

import (
	"strings"
	"testing"
)

func TestMapping(t *testing.T) {
	cases := []struct{ host, path, want string }{
		{"Example.ORG:8080", "/a/b.html", "/www/example.org/a/b.html"},
		{"example.org.", "/", "/www/example.org/index.html"},
		{"example.org", "/../../etc/passwd", "/www/example.org/etc/passwd"},
		{"example.org", "/d/", "/www/example.org/d/index.html"},
		{"127.0.0.1:80", "/x", "/www/127.0.0.1/x"},
	}
	for _, c := range cases {
		d, ok := Domain(c.host)
		if !ok {
			t.Fatalf("%q rejected", c.host)
		}
		if got := File("/www", d, c.path); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.host, c.path, got, c.want)
		}
	}
	for _, bad := range []string{"", "..", "a/b", "a b", "x\x00"} {
		if _, ok := Domain(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzDomain(f *testing.F) {
	f.Add("example.org:80", "/a/../b")
	f.Fuzz(func(t *testing.T, host, p string) {
		if c := Clean(p); !strings.HasPrefix(c, "/") || strings.HasPrefix(c, "//") {
			t.Fatalf("Clean(%q) = %q: not a single-slash absolute path", p, c)
		}
		d, ok := Domain(host)
		if !ok {
			return
		}
		got := File("/www", d, p)
		if len(got) < len("/www/"+d) || got[:len("/www/"+d)] != "/www/"+d {
			t.Fatalf("%q %q escaped to %q", host, p, got)
		}
	})
}

// TestClean: a cleaned path is a single-slash absolute path, so a redirect
// built from it cannot name another host (//evil.example is
// protocol-relative).
func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"//evil.example/../sub": "/sub", "//evil.example/": "/evil.example/", "": "/", "/": "/",
		"/a//b/./c/..": "/a/b", "/a/b/": "/a/b/", "/../../x": "/x", "///": "/", "a": "/a",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
