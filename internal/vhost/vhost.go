// Package vhost maps an HTTP request's Host and path to a file of a virtual
// domain in the file system: DOCROOT/HOST/PATH. The director (to learn a
// request's size for mwlc) and the nodes (to serve it) share the rule.
package vhost

import (
	"net"
	"path"
	"strings"
)

// Domain normalises a Host header to a domain directory name: lower case,
// port and trailing dot removed. ok is false for names that are not host
// names (empty, or with characters a directory name must not have).
func Domain(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || len(host) > 253 || host == "." || host == ".." {
		return "", false
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']') {
			return "", false
		}
	}
	return host, true
}

// File is the file-system path for urlPath in domain under docroot; a path
// ending in / names its index.html. Dot segments cannot climb out of the
// domain.
func File(docroot, domain, urlPath string) string {
	p := path.Clean("/" + urlPath)
	if strings.HasSuffix(urlPath, "/") {
		p = path.Join(p, "index.html")
	}
	return path.Join(docroot, domain, p)
}
