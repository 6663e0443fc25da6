package node

import (
	"fmt"
	"maps"
	"path"
	"strings"
	"time"
)

// Sites are where the virtual domains live in the file system. A node
// started from flags has them from Config; one taking its configuration
// from the station changes them live (SetSites): each request reads them
// once, at its start, so a request in flight finishes where it began.
type Sites struct {
	// Docroot is the directory of the virtual domains: DOCROOT/HOST.
	Docroot string
	// DefaultDomain serves requests whose Host has no directory ("": 404).
	DefaultDomain string
	// Domains maps a host name (lower case) to its own directory, for
	// domains not at DOCROOT/HOST.
	Domains map[string]string
}

// root is the directory of domain dom.
func (st *Sites) root(dom string) string {
	if d, ok := st.Domains[dom]; ok {
		return d
	}
	return st.Docroot + "/" + dom
}

// check says what is wrong with st, if anything.
func (st *Sites) check() error {
	ok := func(p string) bool { return strings.HasPrefix(p, "/") && path.Clean(p) == p }
	if !ok(st.Docroot) {
		return fmt.Errorf("docroot %q: want an absolute, clean path in the file system", st.Docroot)
	}
	// A host name, not a path: DOCROOT/.. would serve the docroot's parent.
	host := func(h string) bool { return h != "" && h != "." && h != ".." && !strings.ContainsAny(h, "/") }
	if st.DefaultDomain != "" && !host(st.DefaultDomain) {
		return fmt.Errorf("default domain %q: a host name, not a path", st.DefaultDomain)
	}
	for h, d := range st.Domains {
		if !host(h) {
			return fmt.Errorf("domain %q: want a host name", h)
		}
		if !ok(d) {
			return fmt.Errorf("domain %s: docroot %q: want an absolute, clean path in the file system", h, d)
		}
	}
	return nil
}

// SetSites changes the docroot, default domain and per-domain directories
// for the requests that start from now on; the health check looks at the
// new docroot at once.
func (s *Server) SetSites(st Sites) error {
	if st.Docroot == "" {
		st.Docroot = "/www"
	}
	// Host names as vhost.Domain makes them from a Host header.
	doms := make(map[string]string, len(st.Domains))
	for h, d := range st.Domains {
		doms[strings.TrimSuffix(strings.ToLower(h), ".")] = d
	}
	st.Domains = doms
	st.DefaultDomain = strings.TrimSuffix(strings.ToLower(st.DefaultDomain), ".")
	if err := st.check(); err != nil {
		return err
	}
	s.sites.Store(&st)
	s.hmu.Lock()
	s.hAt = time.Time{}
	s.hmu.Unlock()
	return nil
}

// Sites are the sites now served.
func (s *Server) Sites() Sites {
	st := *s.sites.Load()
	st.Domains = maps.Clone(st.Domains)
	return st
}
