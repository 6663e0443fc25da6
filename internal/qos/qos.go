// Package qos is the l7 dataplane's differentiated service (paper 003,
// issue 17): request classes, the classifier that puts each request in
// one, and the admission control that limits what reaches the nodes and
// serves waiting requests highest class first. It also carries a class
// from director to node (the X-Corral-Class header, header.go).
//
// It is a leaf (layer 0): the director's configuration (internal/config)
// holds Specs, the director compiles them into a Classifier and an
// Admission per service, and the node reads the header.
package qos

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Overload actions.
const (
	Queue  = "queue"  // wait, at most the deadline, then 503 + Retry-After
	Reject = "reject" // 503 + Retry-After at once
)

// Defaults.
const (
	DefaultName       = "default"
	DefaultDeadline   = time.Second
	DefaultRetryAfter = 1
	// DefaultQueue caps one class's waiting requests: each waiter is a
	// goroutine and a client connection, so the cap bounds memory.
	DefaultQueue = 1024
	MaxQueue     = 1 << 16
	// MinRate is the lowest rate: one request in about 17 minutes.
	MinRate = 0.001
)

// Spec is one class as configured (director.conf's `qos NAME { ... }`,
// the station's QoSClass).
type Spec struct {
	Name     string
	Priority int // higher is served first
	Line     int // where it is defined (0: built in code)
	// Match: every kind given must hold; within a kind any value may.
	Networks []netip.Prefix // client address
	Prefixes []string       // URL path prefixes
	Regex    string         // RE2 on the URL path
	Paths    []string       // a file ("/a/b.html": exactly it) or a directory ("/img/": all under it)
	Domains  []string       // virtual domain (Host without port, case-insensitive)
	Users    []string       // HTTP basic auth user name (Authorization: Basic)
	Header   string         // "Name: value": the request has this header with exactly this value
	// Limits and the overload action.
	Rate        float64 // requests per second (token bucket; 0: none)
	Burst       int     // bucket size (0: max(1, Rate))
	Concurrency int     // requests in flight (0: none)
	Overload    string  // Queue (default) or Reject
	Deadline    time.Duration
	RetryAfter  int // seconds
	QueueMax    int // waiting requests at most (0: DefaultQueue)
}

// NewSpec is a class with every field at its default.
func NewSpec(name string) Spec {
	return Spec{Name: name, Overload: Queue, Deadline: DefaultDeadline, RetryAfter: DefaultRetryAfter}
}

// HasMatch says whether any condition is set (a class without one
// matches every request).
func (s *Spec) HasMatch() bool {
	return len(s.Networks)+len(s.Prefixes)+len(s.Paths)+len(s.Domains)+len(s.Users) > 0 || s.Regex != "" || s.Header != ""
}

// Class is a compiled Spec.
type Class struct {
	Spec
	Rank int // 0 is the highest priority
	Nice int // the OS priority the node gives its requests (0..19)
	re   *regexp.Regexp
	hdrK string
	hdrV string
}

// Classifier puts requests in classes.
type Classifier struct {
	classes []*Class // priority order, highest first; the default class last
	def     *Class
}

// NiceStep is how much nicer each lower class's node threads are than
// the class above; the lowest is at most 19 (Linux's range).
const NiceStep = 5

// Compile checks specs and builds a classifier. The classes are tried in
// priority order (highest first; equal priorities in the order given);
// a class named DefaultName, if any, only sets the default class's limits
// and must have no match.
func Compile(specs []Spec) (*Classifier, error) {
	c := &Classifier{}
	seen := map[string]bool{}
	var def *Spec
	for i := range specs {
		s := specs[i]
		if err := CheckSpec(&s); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("qos %s: defined twice", s.Name)
		}
		seen[s.Name] = true
		if s.Name == DefaultName {
			if s.HasMatch() {
				return nil, fmt.Errorf("qos %s: the default class takes the requests no class matches: it has no match", s.Name)
			}
			def = &s
			continue
		}
		k := &Class{Spec: s}
		if s.Regex != "" {
			k.re = regexp.MustCompile(s.Regex) // CheckSpec compiled it
		}
		if s.Header != "" {
			k.hdrK, k.hdrV, _ = splitHeader(s.Header)
		}
		c.classes = append(c.classes, k)
	}
	slices.SortStableFunc(c.classes, func(a, b *Class) int { return b.Priority - a.Priority })
	if def == nil {
		d := NewSpec(DefaultName)
		def = &d
	}
	c.def = &Class{Spec: *def}
	if len(c.classes) > 0 {
		// Below every class, whatever its number says.
		c.def.Priority = min(c.def.Priority, c.classes[len(c.classes)-1].Priority-1)
	}
	c.classes = append(c.classes, c.def)
	// Nice by rank among distinct priorities: equal priorities are
	// equal on the node too.
	rank, nice := 0, 0
	for i, k := range c.classes {
		if i > 0 && k.Priority != c.classes[i-1].Priority {
			rank++
			nice = min(19, nice+NiceStep)
		}
		k.Rank, k.Nice = rank, nice
	}
	return c, nil
}

// CheckSpec says what is wrong with a spec, naming it.
func CheckSpec(s *Spec) error {
	bad := func(f string, a ...any) error { return fmt.Errorf("qos %s: %s", s.Name, fmt.Sprintf(f, a...)) }
	if !ValidName(s.Name) {
		return fmt.Errorf("qos %q: a name is 1..32 letters, digits, '-', '_', '.'", s.Name)
	}
	if s.Regex != "" {
		if _, err := regexp.Compile(s.Regex); err != nil {
			return bad("regex %q: %v", s.Regex, err)
		}
	}
	if s.Header != "" {
		if _, _, ok := splitHeader(s.Header); !ok {
			return bad("header %q: want \"Name: value\"", s.Header)
		}
	}
	for _, p := range append(slices.Clone(s.Prefixes), s.Paths...) {
		if !strings.HasPrefix(p, "/") {
			return bad("path %q must start with /", p)
		}
	}
	if s.Rate != 0 && !(s.Rate >= MinRate && s.Rate <= 1e9) {
		return bad("rate %v: want %v..1e9 requests per second", s.Rate, MinRate)
	}
	if s.Burst < 0 || s.Burst > 1<<20 {
		return bad("burst %d: want 0..1048576", s.Burst)
	}
	if s.Concurrency < 0 || s.Concurrency > 1<<30 {
		return bad("concurrency %d: want 0..1073741824", s.Concurrency)
	}
	if s.Overload != Queue && s.Overload != Reject {
		return bad("overload %q: want queue or reject", s.Overload)
	}
	if s.Deadline <= 0 || s.Deadline > time.Minute {
		return bad("deadline %v: want more than 0, at most 1m", s.Deadline)
	}
	if s.RetryAfter < 0 || s.RetryAfter > 86400 {
		return bad("retry-after %d: want 0..86400 seconds", s.RetryAfter)
	}
	if s.QueueMax < 0 || s.QueueMax > MaxQueue {
		return bad("queue %d: want 0..%d", s.QueueMax, MaxQueue)
	}
	return nil
}

// ValidName is a class name: it goes into headers and metric labels.
func ValidName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// splitHeader splits "Name: value".
func splitHeader(h string) (k, v string, ok bool) {
	k, v, ok = strings.Cut(h, ":")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
		return "", "", false
	}
	return http.CanonicalHeaderKey(k), v, true
}

// Classes are the classes in priority order, the default class last.
func (c *Classifier) Classes() []*Class { return c.classes }

// Default is the class of requests no other class matches.
func (c *Classifier) Default() *Class { return c.def }

// Class finds a class by name (nil: none).
func (c *Classifier) Class(name string) *Class {
	for _, k := range c.classes {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// Classify returns the first class in priority order that matches req
// from client address src, else the default class.
func (c *Classifier) Classify(req *http.Request, src netip.Addr) *Class {
	for _, k := range c.classes[:len(c.classes)-1] {
		if k.Matches(req, src) {
			return k
		}
	}
	return c.def
}

// Matches says whether req from src is of this class.
func (k *Class) Matches(req *http.Request, src netip.Addr) bool {
	if len(k.Networks) > 0 {
		a := src.Unmap()
		if !slices.ContainsFunc(k.Networks, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return false
		}
	}
	path := ""
	if req.URL != nil {
		path = req.URL.Path
	}
	if len(k.Prefixes) > 0 && !slices.ContainsFunc(k.Prefixes, func(p string) bool { return strings.HasPrefix(path, p) }) {
		return false
	}
	if k.re != nil && !k.re.MatchString(path) {
		return false
	}
	if len(k.Paths) > 0 && !slices.ContainsFunc(k.Paths, func(p string) bool { return underPath(path, p) }) {
		return false
	}
	if len(k.Domains) > 0 {
		host := hostOnly(req.Host)
		if !slices.ContainsFunc(k.Domains, func(d string) bool { return strings.EqualFold(d, host) }) {
			return false
		}
	}
	if len(k.Users) > 0 {
		u, ok := BasicUser(req.Header.Get("Authorization"))
		if !ok || !slices.Contains(k.Users, u) {
			return false
		}
	}
	if k.hdrK != "" && !slices.Contains(req.Header.Values(k.hdrK), k.hdrV) {
		return false
	}
	return true
}

// underPath: a directory ("/img/" or "/img") holds everything under it,
// a file only itself. "/img" does not hold "/images".
func underPath(path, p string) bool {
	if strings.HasSuffix(p, "/") {
		return strings.HasPrefix(path, p) || path == strings.TrimSuffix(p, "/")
	}
	return path == p || strings.HasPrefix(path, p+"/")
}

func hostOnly(h string) string {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().String()
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.TrimSuffix(strings.Trim(h, "[]"), ".")
}

// BasicUser is the user name of an "Authorization: Basic" header. The
// director does not check the password (the site does): a class by user
// is for telling customers apart, not for keeping anyone out.
func BasicUser(auth string) (string, bool) {
	const prefix = "basic "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) || len(auth) > 4096 {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth[len(prefix):]))
	if err != nil {
		return "", false
	}
	u, _, ok := strings.Cut(string(b), ":")
	return u, ok
}
