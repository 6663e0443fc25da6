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

// Clean is urlPath as the server sees it: absolute, slashes collapsed,
// dot segments resolved without climbing above /, and a trailing slash
// kept (it asks for the index). It never starts with "//", so a redirect
// built from it stays on this site.
func Clean(urlPath string) string {
	p := path.Clean("/" + urlPath)
	if strings.HasSuffix(urlPath, "/") && p != "/" {
		p += "/"
	}
	return p
}

// Rel is the file's path inside its domain's directory for urlPath: Clean,
// with a trailing slash naming index.html.
func Rel(urlPath string) string {
	p := Clean(urlPath)
	if strings.HasSuffix(p, "/") {
		p += "index.html"
	}
	return p
}

// File is the file-system path for urlPath in domain under docroot; a path
// ending in / names its index.html. Dot segments cannot climb out of the
// domain.
func File(docroot, domain, urlPath string) string {
	return path.Join(docroot, domain, Rel(urlPath))
}
