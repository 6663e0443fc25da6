package clustercfg

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/sched"
)

// enums are the values a field may take ("Type.yaml-name"); validation
// and the generated schema both use them.
var enums = map[string][]string{
	"Director.xdp-mode": {"auto", "native", "generic"},
	"DirectorHA.mode":   {"active-standby", "active-active"},
	"Service.protocol":  {"tcp", "udp"},
	"Service.dataplane": sched.Dataplanes,
	"Service.scheduler": sortedKeys(sched.Names),
	"Check.type":        {"tcp", "http", "exec", "none"},
	"QoSClass.overload": {"queue", "reject"},
	"Layout.placement":  {"striped", "whole"},
	"Account.role":      {"admin", "webmaster", "read-only"},
	"Service.weights":   {"static", "feedback"},
	"Feedback.source":   {"snmp", "agent"},
	"Feedback.cpu":      {"laload", "cpuraw"},
	// snmp-version: a YAML 3 is an integer; write "3" or 3 (both read).
	"Feedback.snmp-version":  {"2c", "3"},
	"Feedback.v3-auth-proto": fbAuthProtos,
	"Feedback.v3-priv-proto": fbPrivProtos,
}

// bounds are integer fields' ranges, for the schema (validation says the
// same in its own words; TestBounds keeps them together).
var bounds = map[string][2]int{
	"Node.weight":          {0, 65535},
	"RealServer.weight":    {0, 65535},
	"Director.xdp-conns":   {0, 1 << 24},
	"DirectorHA.priority":  {0, 255},
	"Service.port":         {0, 65535},
	"Check.port":           {0, 65535},
	"Check.status":         {0, 599},
	"Check.rise":           {0, 100},
	"Check.fall":           {0, 100},
	"QoSClass.concurrency": {0, 1 << 30},
	"QoSClass.retry-after": {0, 86400},
	"Layout.stripe-count":  {-1, 1 << 16},
	"Layout.replicas":      {0, 5},
	"Feedback.floor":       {0, 65535},
	"Feedback.max":         {0, 65535},
	"Feedback.port":        {0, 65535},
	"Feedback.agent-port":  {0, 65535},
	// 0: the default (32 per server), or none (qos-inflight, qos-reserve).
	"Service.qos-per-server": {0, config.MaxQoSLimit},
	"Service.qos-inflight":   {0, config.MaxQoSLimit},
	"Service.qos-reserve":    {0, config.MaxQoSLimit},
	// 0: the default (10000; per source 1000 or max-conns if lower).
	"Service.max-conns":            {0, config.MaxConnsLimit},
	"Service.max-conns-per-source": {0, config.MaxConnsLimit},
}

// zeroOr are integer fields where 0 means the default and a value below
// the given one is refused: the schema says "0, or N..max" (its plain
// range would let an editor pass a value Parse refuses).
var zeroOr = map[string]int{
	"Director.xdp-conns": 1024,
	"Check.status":       100,
}

// checker validates a decoded Config; lines places each path.
type checker struct {
	c     *Config
	file  string
	lines map[string]int
	errs  Errors
}

// lineOf is the line of path, or of its nearest ancestor that has one.
func (k *checker) lineOf(p string) int {
	for p != "" {
		if l, ok := k.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 1
}

func (k *checker) bad(p, format string, a ...any) {
	k.errs = append(k.errs, &Error{File: k.file, Path: p, Line: k.lineOf(p), Msg: fmt.Sprintf(format, a...)})
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	// memberRE also takes ':' so that a member's default name (its role
	// and listen address) can be written in the configuration.
	memberRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$`)
	hostRE   = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
)

// patterns are the names' forms, for the schema (an editor then flags
// "www:80" as a service name, as Parse does).
var patterns = map[string]*regexp.Regexp{
	"Cluster.name":     nameRE,
	"Service.name":     nameRE,
	"QoSClass.name":    nameRE,
	"Account.name":     nameRE,
	"Node.name":        memberRE,
	"Director.name":    memberRE,
	"DirectorHA.group": nameRE,
	"Domain.name":      hostRE,
}

// names checks one section's names: present, well formed, unique.
func (k *checker) names(section string, n int, name func(i int) string, re *regexp.Regexp, what string) map[string]int {
	idx := map[string]int{}
	for i := 0; i < n; i++ {
		p := fmt.Sprintf("%s[%d].name", section, i)
		v := name(i)
		switch {
		case v == "":
			if _, given := k.lines[p]; given {
				k.bad(p, "empty")
			}
		case !re.MatchString(v) || len(v) > 253:
			k.bad(p, "%q is not a well-formed %s", clip(v), what)
		default:
			if j, dup := idx[v]; dup {
				k.bad(p, "%q is also %s[%d]'s name (line %d)", v, section, j, k.lineOf(fmt.Sprintf("%s[%d]", section, j)))
				continue
			}
			idx[v] = i
		}
	}
	return idx
}

func (k *checker) addrPort(p, v string) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(v)
	if err != nil {
		k.bad(p, "%q is not an ip:port (like 10.0.0.1:80 or [::1]:80)", clip(v))
		return ap, false
	}
	if ap.Port() == 0 {
		k.bad(p, "%q: port 0; want 1..65535", v)
		return ap, false
	}
	return ap, true
}

func (k *checker) duration(p, v string, positive bool) (time.Duration, bool) {
	if v == "" {
		return 0, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || (positive && d == 0) {
		want := "a duration (like 300ms, 2s, 5m)"
		if positive {
			want = "a positive duration (like 300ms, 2s, 5m)"
		}
		k.bad(p, "%q is not %s", clip(v), want)
		return 0, false
	}
	return d, true
}

func (k *checker) port(p string, v int, zeroOK bool) {
	if (v == 0 && zeroOK) || (v >= 1 && v <= 65535) {
		return
	}
	k.bad(p, "%d: want a port 1..65535", v)
}

func (k *checker) weight(p string, w *int) {
	if w != nil && (*w < 0 || *w > 65535) {
		k.bad(p, "%d: want 0..65535", *w)
	}
}

func (k *checker) enum(p, v string, allowed ...string) bool {
	if v == "" || slices.Contains(allowed, v) {
		return true
	}
	msg := fmt.Sprintf("%q: want %s", clip(v), orList(allowed))
	if s := suggest(v, allowed); s != "" {
		msg += fmt.Sprintf(" (did you mean '%s'?)", s)
	}
	k.bad(p, "%s", msg)
	return false
}

func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

func (k *checker) absPath(p, v string) bool {
	if v == "" {
		return true
	}
	if !strings.HasPrefix(v, "/") || path.Clean(v) != v {
		k.bad(p, "%q: want an absolute, clean path (like %s)", clip(v), path.Clean("/"+v))
		return false
	}
	return true
}

// ParseSize reads a layout's stripe-size: a byte count with an optional
// binary unit (4096, 64K, 1M, 1G; "0" inherits), as Parse accepts it.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size (like 4096, 64K, 1M)", clip(s))
	}
	return v * mult, nil
}

// validate checks every field and reference; errors go to k.errs.
func (k *checker) validate() {
	c := k.c
	clusters := k.names("clusters", len(c.Clusters), func(i int) string { return c.Clusters[i].Name }, nameRE, "name (letters, digits, '-', '_', '.')")
	domains := k.names("domains", len(c.Domains), func(i int) string { return c.Domains[i].Name }, hostRE, "host name")
	services := k.names("services", len(c.Services), func(i int) string { return c.Services[i].Name }, nameRE, "name (letters, digits, '-', '_', '.')")
	qos := k.names("qos", len(c.QoS), func(i int) string { return c.QoS[i].Name }, nameRE, "name (letters, digits, '-', '_', '.')")
	accounts := k.names("accounts", len(c.Accounts), func(i int) string { return c.Accounts[i].Name }, nameRE, "name (letters, digits, '-', '_', '.')")
	k.names("nodes", len(c.Nodes), func(i int) string { return c.Nodes[i].Name }, memberRE, "name (letters, digits, '-', '_', '.', ':')")
	k.names("directors", len(c.Directors), func(i int) string { return c.Directors[i].Name }, memberRE, "name (letters, digits, '-', '_', '.', ':')")

	perCluster := map[string]int{}
	nodeAddr := map[netip.AddrPort]int{}
	for i, n := range c.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		if n.Address != "" {
			if ap, ok := k.addrPort(p+".address", n.Address); ok {
				if j, dup := nodeAddr[ap]; dup {
					k.bad(p+".address", "%s is also nodes[%d]'s address", ap, j)
				}
				nodeAddr[ap] = i
			}
		}
		if n.Admin != "" {
			k.addrPort(p+".admin", n.Admin)
		}
		if n.Cluster != "" {
			if _, ok := clusters[n.Cluster]; !ok {
				k.bad(p+".cluster", "no cluster named %q", n.Cluster)
			}
			perCluster[n.Cluster]++
		}
		k.weight(p+".weight", n.Weight)
		if n.DefaultDomain != "" {
			if _, ok := domains[n.DefaultDomain]; !ok {
				k.bad(p+".default-domain", "no domain named %q", n.DefaultDomain)
			}
		}
	}

	for i, d := range c.Directors {
		p := fmt.Sprintf("directors[%d]", i)
		if d.Admin != "" {
			k.addrPort(p+".admin", d.Admin)
		}
		k.enum(p+".xdp-mode", d.XDPMode, enums["Director.xdp-mode"]...)
		if d.XDPConns != 0 && (d.XDPConns < 1024 || d.XDPConns > 1<<24) {
			k.bad(p+".xdp-conns", "%d: want 1024..16777216 flows", d.XDPConns)
		}
		if strings.ContainsAny(d.Interface, " /\t") || len(d.Interface) > 15 {
			k.bad(p+".interface", "%q is not a network interface name", clip(d.Interface))
		}
	}
	k.directorsHA()
	k.feedback()

	type vipKey struct {
		proto string
		vip   netip.AddrPort
	}
	vips := map[vipKey]int{}
	for i, s := range c.Services {
		p := fmt.Sprintf("services[%d]", i)
		proto := s.Protocol
		if proto == "" {
			proto = "tcp"
		}
		k.enum(p+".protocol", s.Protocol, enums["Service.protocol"]...)
		dp := s.Dataplane
		if dp == "" {
			dp = "l4"
		}
		dpOK := k.enum(p+".dataplane", s.Dataplane, enums["Service.dataplane"]...)
		if s.Scheduler != "" {
			if _, ok := sched.Names[s.Scheduler]; !ok {
				k.enum(p+".scheduler", s.Scheduler, enums["Service.scheduler"]...)
			} else if err := sched.Supports(s.Scheduler, dp); err != nil && dpOK {
				k.bad(p+".scheduler", "%v", err)
			}
		}
		var vip netip.AddrPort
		if s.VIP != "" {
			var ok bool
			if vip, ok = k.addrPort(p+".vip", s.VIP); ok {
				key := vipKey{proto, vip}
				if j, dup := vips[key]; dup {
					k.bad(p+".vip", "%s %s is also services[%d]'s (%s)", proto, vip, j, c.Services[j].Name)
				}
				vips[key] = i
			}
		}
		if s.Cluster != "" {
			if _, ok := clusters[s.Cluster]; !ok {
				k.bad(p+".cluster", "no cluster named %q", s.Cluster)
			}
		}
		k.port(p+".port", s.Port, true)
		if s.Port != 0 && len(s.Servers) > 0 {
			k.bad(p+".port", "%d: port is for a pool made from the cluster's nodes; with servers listed it would be ignored (each server's address has its port)", s.Port)
		}
		persist, _ := k.duration(p+".persistence", s.Persistence, false)
		k.duration(p+".udp-timeout", s.UDPTimeout, false)
		k.duration(p+".tcp-timeout", s.TCPTimeout, false)
		k.duration(p+".tcp-fin-timeout", s.TCPFinTimeout, false)
		k.duration(p+".inactive-timeout", s.InactiveTimeout, false)
		if dp == "l7" && proto != "tcp" {
			k.bad(p+".dataplane", "l7 needs protocol tcp")
		}
		if s.PassInternal && dp != "l7" {
			k.bad(p+".pass-internal", "only the l7 dataplane looks at paths")
		}
		if dp == "xdp" {
			if persist > 0 {
				k.bad(p+".persistence", "not with dataplane xdp: use scheduler sh or mh to keep a client on its server")
			}
			for _, d := range c.Directors {
				if d.Interface == "" {
					k.bad(p+".dataplane", "xdp needs director %q's interface (the link to attach to)", d.Name)
					break
				}
			}
		}
		if s.Check != nil {
			k.check(p+".check", s.Check, proto)
		}
		seen := map[netip.AddrPort]int{}
		for j, r := range s.Servers {
			rp := fmt.Sprintf("%s.servers[%d]", p, j)
			if r.Address != "" {
				if ap, ok := k.addrPort(rp+".address", r.Address); ok {
					if o, dup := seen[ap]; dup {
						k.bad(rp+".address", "%s is also servers[%d]", ap, o)
					}
					seen[ap] = j
					if dp == "xdp" && vip.IsValid() && ap.Port() != vip.Port() {
						k.bad(rp+".address", "%s: with dataplane xdp (direct routing) a server listens on the VIP's port %d", ap, vip.Port())
					}
					if s.Check != nil && s.Check.Port != 0 && int(ap.Port()) == s.Check.Port {
						k.bad(rp+".address", "%s: port %d is the check's port (the node's admin port), not one to serve clients on", ap, s.Check.Port)
					}
				}
			}
			k.weight(rp+".weight", r.Weight)
		}
		if dp == "xdp" && len(s.Servers) == 0 && vip.IsValid() {
			for j, n := range c.Nodes {
				ap, err := netip.ParseAddrPort(n.Address)
				if s.Cluster == "" || n.Cluster != s.Cluster || err != nil {
					continue
				}
				if port := or(s.Port, int(ap.Port())); port != int(vip.Port()) {
					k.bad(p+".port", "node %s (nodes[%d]) would serve on port %d: with dataplane xdp (direct routing) servers listen on the VIP's port %d", n.Name, j, port, vip.Port())
					break
				}
			}
		}
		if dp == "xdp" && len(s.Servers) > 64 {
			k.bad(p+".servers", "%d servers: dataplane xdp takes at most 64 per service", len(s.Servers))
		}
		if len(s.Servers) == 0 && (s.Cluster == "" || perCluster[s.Cluster] == 0) {
			if s.Cluster == "" {
				k.bad(p, "empty pool: list servers or name a cluster with nodes")
			} else if _, ok := clusters[s.Cluster]; ok {
				k.bad(p+".cluster", "empty pool: cluster %q has no nodes and no servers are listed", s.Cluster)
			}
		}
		for j, q := range s.QoS {
			if _, ok := qos[q]; !ok {
				k.bad(fmt.Sprintf("%s.qos[%d]", p, j), "no qos class named %q", q)
			}
		}
		k.qosLimits(p, &s, dp, dpOK)
		k.connLimits(p, &s, dp, dpOK)
	}

	// Host names are case-insensitive (nodes look a Host up in lower
	// case): two that differ only in case would be one domain at random.
	lower := map[string]int{}
	for i, d := range c.Domains {
		l := strings.ToLower(d.Name)
		if j, dup := lower[l]; dup && d.Name != c.Domains[j].Name {
			k.bad(fmt.Sprintf("domains[%d].name", i), "%q is domains[%d]'s %q in other case (host names ignore case)", d.Name, j, c.Domains[j].Name)
		} else if !dup {
			lower[l] = i
		}
	}
	for i, d := range c.Domains {
		p := fmt.Sprintf("domains[%d]", i)
		if d.Service != "" {
			if _, ok := services[d.Service]; !ok {
				k.bad(p+".service", "no service named %q", d.Service)
			}
		}
		k.absPath(p+".docroot", d.Docroot)
		if d.Webmaster != "" {
			j, ok := accounts[d.Webmaster]
			switch {
			case !ok:
				k.bad(p+".webmaster", "no account named %q", d.Webmaster)
			case c.Accounts[j].Role != "webmaster":
				k.bad(p+".webmaster", "account %q has role %q, not webmaster", d.Webmaster, c.Accounts[j].Role)
			case !slices.Contains(c.Accounts[j].Domains, d.Name):
				k.bad(p+".webmaster", "account %q does not list domain %q in its domains", d.Webmaster, d.Name)
			}
		}
	}

	for i, q := range c.QoS {
		p := fmt.Sprintf("qos[%d]", i)
		for j, n := range q.Match.Networks {
			if _, err := netip.ParsePrefix(n); err != nil {
				k.bad(fmt.Sprintf("%s.match.networks[%d]", p, j), "%q is not a network (CIDR, like 10.0.0.0/8)", clip(n))
			}
		}
		for j, pre := range q.Match.Prefixes {
			if !strings.HasPrefix(pre, "/") {
				k.bad(fmt.Sprintf("%s.match.prefixes[%d]", p, j), "%q: a path prefix starts with /", clip(pre))
			}
		}
		if q.Match.Regex != "" {
			if _, err := regexp.Compile(q.Match.Regex); err != nil {
				k.bad(p+".match.regex", "%v", err)
			}
		}
		for j, dn := range q.Match.Domains {
			if _, ok := domains[dn]; !ok {
				k.bad(fmt.Sprintf("%s.match.domains[%d]", p, j), "no domain named %q", dn)
			}
		}
		if h := q.Match.Header; h != "" {
			if name, _, ok := strings.Cut(h, ":"); !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t") {
				k.bad(p+".match.header", "%q: want \"Name: value\"", clip(h))
			}
		}
		if q.Rate < 0 || math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) {
			k.bad(p+".rate", "%v: want requests per second >= 0", q.Rate)
		}
		if q.Concurrency < 0 || q.Concurrency > 1<<30 {
			k.bad(p+".concurrency", "%d: want 0 (no limit) .. %d", q.Concurrency, 1<<30)
		}
		k.enum(p+".overload", q.Overload, enums["QoSClass.overload"]...)
		k.duration(p+".deadline", q.Deadline, true)
		if q.RetryAfter < 0 || q.RetryAfter > 86400 {
			k.bad(p+".retry-after", "%d: want 0..86400 seconds", q.RetryAfter)
		}
	}

	fs := c.FileSystem
	metas := map[netip.AddrPort]int{}
	for j, m := range fs.Meta {
		p := fmt.Sprintf("filesystem.meta[%d]", j)
		if ap, ok := k.addrPort(p, m); ok {
			if o, dup := metas[ap]; dup {
				k.bad(p, "%s is also meta[%d]", ap, o)
			}
			metas[ap] = j
		}
	}
	k.absPath("filesystem.docroot", fs.Docroot)
	lpaths := map[string]int{}
	for i, l := range fs.Layouts {
		p := fmt.Sprintf("filesystem.layouts[%d]", i)
		if l.Path != "" && k.absPath(p+".path", l.Path) {
			if j, dup := lpaths[l.Path]; dup {
				k.bad(p+".path", "%q is also layouts[%d]'s path", l.Path, j)
			}
			lpaths[l.Path] = i
		}
		if l.StripeSize != "" {
			n, err := ParseSize(l.StripeSize)
			if err == nil && n != 0 {
				err = layout.ValidStripeSize(n)
			}
			if err != nil {
				k.bad(p+".stripe-size", "%v", err)
			}
		}
		if l.StripeCount < -1 || l.StripeCount > 1<<16 {
			k.bad(p+".stripe-count", "%d: want -1 (all), 0 (inherit) or a number of I/O servers", l.StripeCount)
		}
		if l.Replicas < 0 || l.Replicas > 5 {
			k.bad(p+".replicas", "%d: want 1..5 (0 inherits)", l.Replicas)
		}
		k.enum(p+".placement", l.Placement, enums["Layout.placement"]...)
	}

	for i, a := range c.Accounts {
		p := fmt.Sprintf("accounts[%d]", i)
		if a.Role != "" || k.lines[p+".role"] != 0 {
			k.enum(p+".role", a.Role, enums["Account.role"]...)
			if a.Role == "" {
				k.bad(p+".role", "empty: want admin, webmaster or read-only")
			}
		}
		if a.Name == "admin" && a.Role != "" && a.Role != "admin" {
			// The station's bootstrap account: always an admin there.
			k.bad(p+".role", "%q: the account admin is the station's own and always an admin; give this one another name", a.Role)
		}
		if len(a.Domains) > 0 && a.Role != "webmaster" && a.Role != "" {
			k.bad(p+".domains", "only a webmaster has domains")
		}
		for j, dn := range a.Domains {
			if _, ok := domains[dn]; !ok {
				k.bad(fmt.Sprintf("%s.domains[%d]", p, j), "no domain named %q", dn)
			}
		}
	}
}

func (k *checker) check(p string, ch *Check, proto string) {
	k.enum(p+".type", ch.Type, enums["Check.type"]...)
	k.port(p+".port", ch.Port, true)
	if ch.Path != "" && !strings.HasPrefix(ch.Path, "/") {
		k.bad(p+".path", "%q must start with /", clip(ch.Path))
	}
	if ch.Status != 0 && (ch.Status < 100 || ch.Status > 599) {
		k.bad(p+".status", "%d: want an HTTP status 100..599", ch.Status)
	}
	if ch.Type == "exec" && (len(ch.Command) == 0 || ch.Command[0] == "") {
		k.bad(p+".command", "an exec check needs a command")
	}
	if ch.Type != "exec" && len(ch.Command) > 0 {
		k.bad(p+".command", "only an exec check runs a command")
	}
	if ch.Type != "http" {
		// Else silently a tcp check: path: /healthz alone reads like an
		// http check (keepalived's HTTP_GET) but would not be one.
		typ := or(ch.Type, "tcp")
		for _, f := range []struct {
			name string
			set  bool
		}{{"path", ch.Path != ""}, {"status", ch.Status != 0}, {"body", ch.Body != ""}} {
			if f.set {
				k.bad(p+"."+f.name, "only an http check has a %s (this one is type %s; add type: http)", f.name, typ)
			}
		}
	}
	if ch.Type == "http" && proto == "udp" {
		k.bad(p+".type", "an http check on a udp service")
	}
	iv, ok1 := k.duration(p+".interval", ch.Interval, true)
	to, ok2 := k.duration(p+".timeout", ch.Timeout, true)
	if ok1 && ok2 {
		if iv == 0 {
			iv = 2 * time.Second
		}
		if to == 0 {
			to = time.Second
		}
		if to > iv {
			k.bad(p+".timeout", "%v is longer than the interval %v", to, iv)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"rise", ch.Rise}, {"fall", ch.Fall}} {
		if f.v < 0 || f.v > 100 {
			k.bad(p+"."+f.name, "%d: want 1..100", f.v)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// directorsHA checks the directors' ha blocks, alone and against each
// other: a group's directors share one mode, no two share a sync
// address.
func (k *checker) directorsHA() {
	c := k.c
	type first struct {
		i    int
		mode string
	}
	groups := map[string]first{}
	syncs := map[netip.AddrPort]int{}
	for i, d := range c.Directors {
		h := d.HA
		if h == nil {
			continue
		}
		p := fmt.Sprintf("directors[%d].ha", i)
		if d.Name != "" && !nameRE.MatchString(d.Name) {
			k.bad(fmt.Sprintf("directors[%d].name", i), "%q: a director in an HA group is named in it: letters, digits, '-', '_', '.' (no ':')", clip(d.Name))
		}
		switch {
		case h.Group == "":
			k.bad(p+".group", "missing: name the VIP set the group's directors share (group: web)")
		case !nameRE.MatchString(h.Group):
			k.bad(p+".group", "%q is not a well-formed name (letters, digits, '-', '_', '.')", clip(h.Group))
		}
		modeOK := k.enum(p+".mode", h.Mode, enums["DirectorHA.mode"]...)
		if h.Priority != 0 && (h.Priority < 1 || h.Priority > 255) {
			k.bad(p+".priority", "%d: want 1..255", h.Priority)
		}
		if h.Sync == "" {
			k.bad(p+".sync", "missing: the ip:port on the director's link its peers stream connections to (sync: 10.0.0.11:7700)")
		} else if ap, ok := k.addrPort(p+".sync", h.Sync); ok {
			if ap.Addr().IsUnspecified() {
				k.bad(p+".sync", "%s: want the director's own address, which its peers dial", ap)
			} else if j, dup := syncs[ap]; dup {
				k.bad(p+".sync", "%s is also directors[%d]'s (%s) sync address", ap, j, c.Directors[j].Name)
			} else {
				syncs[ap] = i
			}
		}
		if ttl, ok := k.duration(p+".lease-ttl", h.LeaseTTL, true); ok && h.LeaseTTL != "" &&
			(ttl < time.Second || ttl > time.Minute || ttl%time.Second != 0) {
			k.bad(p+".lease-ttl", "%s: want whole seconds, 1s..60s (etcd grants leases in seconds)", h.LeaseTTL)
		}
		if d.Interface == "" {
			k.bad(p, "a director in an HA group needs its interface: the XDP program there answers ARP for the VIPs and forwards")
		}
		if h.Group != "" && modeOK {
			mode := or(h.Mode, "active-standby")
			if f, seen := groups[h.Group]; !seen {
				groups[h.Group] = first{i, mode}
			} else if f.mode != mode {
				k.bad(p+".mode", "%s: group %s is %s on directors[%d] (%s); every director of a group has one mode", mode, h.Group, f.mode, f.i, c.Directors[f.i].Name)
			}
		}
	}
	if len(groups) == 0 {
		return
	}
	for i, s := range c.Services {
		if s.Dataplane != "xdp" {
			k.bad(fmt.Sprintf("services[%d].dataplane", i), "%q: directors in an HA group sync the XDP connection table; every service must use dataplane xdp", or(s.Dataplane, "l4"))
		}
	}
}

// qosLimits checks a service's admission limits (qos-per-server,
// qos-inflight, qos-reserve) with the director's own rules
// (config.CheckQoSLimit, CheckQoSLimits), each error at its field.
func (k *checker) qosLimits(p string, s *Service, dp string, dpOK bool) {
	fields := []struct {
		key string
		v   int
	}{{"qos-per-server", s.QoSPerServer}, {"qos-inflight", s.QoSInflight}, {"qos-reserve", s.QoSReserve}}
	given, ok := "", true
	for _, f := range fields {
		if f.v == 0 {
			continue // not given (0 is also the default reserve)
		}
		if given == "" {
			given = f.key
		}
		if err := config.CheckQoSLimit(f.key, f.v); err != nil {
			k.bad(p+"."+f.key, "%d: %v", f.v, err)
			ok = false
		}
	}
	switch {
	case given == "" || !ok:
	case dp != "l7":
		if dpOK {
			k.bad(p+"."+given, "only the l7 dataplane has admission limits (this service is %s)", dp)
		}
	case len(s.QoS) == 0:
		// The view gives such a service no classes (qos off): the limit
		// would be ignored.
		k.bad(p+"."+given, "the service lists no qos classes (qos:), so it has no admission control to limit")
	default:
		if key, err := config.CheckQoSLimits(s.QoSInflight, s.QoSPerServer, s.QoSReserve); err != nil {
			k.bad(p+"."+key, "%v", err)
		}
	}
}

// connLimits checks a service's l4 caps (max-conns, max-conns-per-source)
// with the director's own rules (config.CheckConnLimit, CheckConnLimits).
func (k *checker) connLimits(p string, s *Service, dp string, dpOK bool) {
	ok := true
	for _, f := range []struct {
		key string
		v   int
	}{{"max-conns", s.MaxConns}, {"max-conns-per-source", s.MaxConnsPerSource}} {
		if f.v == 0 {
			continue
		}
		if err := config.CheckConnLimit(f.v); err != nil {
			k.bad(p+"."+f.key, "%d: %v", f.v, err)
			ok = false
		} else if dp != "l4" && dpOK {
			k.bad(p+"."+f.key, "only the l4 dataplane has it (this service is %s)", dp)
			ok = false
		}
	}
	if ok {
		if err := config.CheckConnLimits(s.MaxConns, s.MaxConnsPerSource); err != nil {
			k.bad(p+".max-conns-per-source", "%v", err)
		}
	}
}
