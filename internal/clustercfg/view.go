package clustercfg

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/qos"
)

// Director defaults, as internal/config fills them in.
const (
	defaultAdmin    = "127.0.0.1:7500"
	defaultDocroot  = "/www"
	defaultXDPMode  = "auto"
	defaultXDPConns = 262144
)

func importDirector(d *config.Director) (*Config, error) {
	if d == nil {
		return nil, errors.New("import: no director configuration")
	}
	c := &Config{}
	dir := Director{Name: "director1", Interface: d.Interface}
	if d.Admin != "" && (d.AdminLine != 0 || d.Admin != defaultAdmin) {
		dir.Admin = d.Admin
	}
	if d.XDPMode != defaultXDPMode {
		dir.XDPMode = d.XDPMode
	}
	if d.XDPConns != defaultXDPConns {
		dir.XDPConns = d.XDPConns
	}
	c.Directors = []Director{dir}
	if d.Meta != "" {
		c.FileSystem.Meta = []string{d.Meta}
	}
	if d.Docroot != "" && d.Docroot != defaultDocroot {
		c.FileSystem.Docroot = d.Docroot
	}
	def := config.NewService("")
	dur := func(v, dflt time.Duration) string {
		if v == dflt {
			return ""
		}
		return v.String()
	}
	for _, s := range d.Services {
		o := Service{Name: s.Name, VIP: s.VIP.String(), PassInternal: s.PassInternal,
			Persistence:     dur(s.Persistence, def.Persistence),
			UDPTimeout:      dur(s.UDPTimeout, def.UDPTimeout),
			TCPTimeout:      dur(s.TCPTimeout, def.TCPTimeout),
			TCPFinTimeout:   dur(s.TCPFinTimeout, def.TCPFinTimeout),
			InactiveTimeout: dur(s.InactiveTimeout, def.InactiveTimeout),
			MaxConns:        s.MaxConns, MaxConnsPerSource: s.MaxConnsPerSource,
		}
		if s.Protocol != def.Protocol {
			o.Protocol = s.Protocol
		}
		if s.Dataplane != def.Dataplane {
			o.Dataplane = s.Dataplane
		}
		if s.Scheduler != def.Scheduler {
			o.Scheduler = s.Scheduler
		}
		o.Check = importCheck(s.Check)
		if s.Weights == "feedback" {
			o.Weights = "feedback"
		}
		if spec := d.QoSClasses(&s); len(spec) > 0 {
			// The station lists a service's classes ("all" in
			// director.conf is every one by name).
			for _, q := range spec {
				o.QoS = append(o.QoS, q.Name)
			}
			o.QoSPerServer, o.QoSInflight, o.QoSReserve = s.QoSPerServer, s.QoSInflight, s.QoSReserve
		}
		for _, r := range s.Servers {
			rs := RealServer{Address: r.Addr.String()}
			if r.Weight != 1 {
				w := r.Weight
				rs.Weight = &w
			}
			o.Servers = append(o.Servers, rs)
		}
		c.Services = append(c.Services, o)
	}
	c.QoS = importQoS(d.QoS)
	c.Feedback = importFeedback(d.Feedback)
	return c, nil
}

// importQoS is director.conf's classes as the station's. The station has
// no paths, burst nor queue cap: those are left out (docs/qos.md). A
// service's qos-inflight, qos-per-server and qos-reserve are its own
// fields (importDirector).
func importQoS(specs []qos.Spec) []QoSClass {
	var out []QoSClass
	for _, s := range specs {
		q := QoSClass{Name: s.Name, Priority: s.Priority, Rate: s.Rate, Concurrency: s.Concurrency,
			Match: QoSMatch{Prefixes: slices.Clone(s.Prefixes), Regex: s.Regex, Domains: slices.Clone(s.Domains),
				Users: slices.Clone(s.Users), Header: s.Header}}
		for _, p := range s.Networks {
			q.Match.Networks = append(q.Match.Networks, p.String())
		}
		if s.Overload != qos.Queue {
			q.Overload = s.Overload
		}
		if s.Deadline != qos.DefaultDeadline {
			q.Deadline = s.Deadline.String()
		}
		if s.RetryAfter != qos.DefaultRetryAfter {
			q.RetryAfter = s.RetryAfter
		}
		out = append(out, q)
	}
	return out
}

// importCheck keeps the fields that differ from the default check.
func importCheck(ch config.Check) *Check {
	def := config.DefaultCheck()
	o := &Check{Port: ch.Port, Body: ch.BodyMatch, Command: ch.Command}
	if ch.Type != def.Type {
		o.Type = ch.Type
	}
	if ch.Path != def.Path {
		o.Path = ch.Path
	}
	if ch.Status != def.Status {
		o.Status = ch.Status
	}
	if ch.Interval != def.Interval {
		o.Interval = ch.Interval.String()
	}
	if ch.Timeout != def.Timeout {
		o.Timeout = ch.Timeout.String()
	}
	if ch.Rise != def.Rise {
		o.Rise = ch.Rise
	}
	if ch.Fall != def.Fall {
		o.Fall = ch.Fall
	}
	if len(o.Command) == 0 {
		o.Command = nil
	}
	if o.Type == "" && o.Port == 0 && o.Path == "" && o.Status == 0 && o.Body == "" && o.Command == nil &&
		o.Interval == "" && o.Timeout == "" && o.Rise == 0 && o.Fall == 0 {
		return nil
	}
	return o
}

// or is v, or dflt when v is empty.
func or[T comparable](v, dflt T) T {
	var zero T
	if v == zero {
		return dflt
	}
	return v
}

// dur reads a duration Parse has checked; empty is dflt.
func dur(v string, dflt time.Duration) (time.Duration, error) {
	if v == "" {
		return dflt, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration", v)
	}
	return d, nil
}

func directorView(c *Config, name string, drained []string, st *HAState) (*config.Director, error) {
	var dir *Director
	for i := range c.Directors {
		if c.Directors[i].Name == name {
			dir = &c.Directors[i]
		}
	}
	if dir == nil {
		return nil, fmt.Errorf("no director named %q in the configuration", name)
	}
	d := &config.Director{
		File:      "cluster configuration (director " + name + ")",
		Admin:     or(dir.Admin, defaultAdmin),
		Docroot:   or(c.FileSystem.Docroot, defaultDocroot),
		Interface: dir.Interface,
		XDPMode:   or(dir.XDPMode, defaultXDPMode),
		XDPConns:  or(dir.XDPConns, defaultXDPConns),
	}
	if len(c.FileSystem.Meta) > 0 {
		d.Meta = c.FileSystem.Meta[0]
	}
	var errs []error
	for i, s := range c.Services {
		o, err := serviceView(c, &s, drained)
		if err != nil {
			errs = append(errs, fmt.Errorf("services[%d] (%s): %w", i, s.Name, err))
			continue
		}
		d.Services = append(d.Services, o)
	}
	qs, err := qosView(c)
	if err != nil {
		errs = append(errs, err)
	}
	d.QoS = qs
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	ha, err := haView(dir, st)
	if err != nil {
		return nil, err
	}
	if st != nil {
		// The whole block is known: the director's own checks apply.
		d.HA = ha
	}
	if err := config.Validate(d); err != nil {
		// Its errors name a file and lines this view does not have.
		var ce config.Errors
		if errors.As(err, &ce) {
			msgs := make([]string, len(ce))
			for i, e := range ce {
				msgs[i] = e.Field + ": " + e.Msg
			}
			return nil, fmt.Errorf("director %s would refuse it: %s", name, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("director %s would refuse it: %w", name, err)
	}
	d.HA = ha
	return d, nil
}

// HA defaults, as internal/config fills them in.
const (
	defaultHAMode     = "active-standby"
	defaultHAPriority = 100
	defaultLeaseTTL   = 2 * time.Second
)

// haView is the director's config.HA: its entry with the defaults, and
// the station's etcd and the files from st (nil: left empty). nil when
// the director has no ha entry.
func haView(dir *Director, st *HAState) (*config.HA, error) {
	h := dir.HA
	if h == nil {
		return nil, nil
	}
	ttl, err := dur(h.LeaseTTL, defaultLeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("ha.lease-ttl: %w", err)
	}
	o := &config.HA{Group: h.Group, Name: dir.Name, Mode: or(h.Mode, defaultHAMode),
		Priority: or(h.Priority, defaultHAPriority), Sync: h.Sync, LeaseTTL: ttl}
	if st != nil {
		o.Etcd = slices.Clone(st.Etcd)
		o.EtcdCA, o.EtcdCert, o.EtcdKey = st.EtcdCA, st.EtcdCert, st.EtcdKey
		o.KeyFile = st.KeyFile
	}
	return o, nil
}

func serviceView(c *Config, s *Service, drained []string) (config.Service, error) {
	o := config.NewService(s.Name)
	vip, err := netip.ParseAddrPort(s.VIP)
	if err != nil {
		return o, fmt.Errorf("vip %q: %v", s.VIP, err)
	}
	o.VIP = vip
	o.Protocol = or(s.Protocol, o.Protocol)
	o.Dataplane = or(s.Dataplane, o.Dataplane)
	o.Scheduler = or(s.Scheduler, o.Scheduler)
	o.PassInternal = s.PassInternal
	o.MaxConns, o.MaxConnsPerSource = s.MaxConns, s.MaxConnsPerSource
	// Request classes are the l7 dataplane's (docs/qos.md): a service
	// lists those that apply, and one that lists none has none.
	if o.Dataplane == "l7" && len(c.QoS) > 0 {
		o.QoS = slices.Clone(s.QoS)
		o.QoSOff = len(s.QoS) == 0
		if !o.QoSOff {
			o.QoSPerServer, o.QoSInflight, o.QoSReserve = s.QoSPerServer, s.QoSInflight, s.QoSReserve
		}
	}
	for _, f := range []struct {
		v   string
		dst *time.Duration
	}{{s.Persistence, &o.Persistence}, {s.UDPTimeout, &o.UDPTimeout}, {s.TCPTimeout, &o.TCPTimeout},
		{s.TCPFinTimeout, &o.TCPFinTimeout}, {s.InactiveTimeout, &o.InactiveTimeout}} {
		if *f.dst, err = dur(f.v, *f.dst); err != nil {
			return o, err
		}
	}
	if s.Check != nil {
		ch := &o.Check
		ch.Type = or(s.Check.Type, ch.Type)
		ch.Port = s.Check.Port
		ch.Path = or(s.Check.Path, ch.Path)
		ch.Status = or(s.Check.Status, ch.Status)
		ch.BodyMatch = s.Check.Body
		ch.Command = slices.Clone(s.Check.Command)
		ch.Rise = or(s.Check.Rise, ch.Rise)
		ch.Fall = or(s.Check.Fall, ch.Fall)
		if ch.Interval, err = dur(s.Check.Interval, ch.Interval); err != nil {
			return o, err
		}
		if ch.Timeout, err = dur(s.Check.Timeout, ch.Timeout); err != nil {
			return o, err
		}
	}
	seen := map[netip.AddrPort]bool{}
	add := func(addr string, w *int, node string) error {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fmt.Errorf("server %q: %v", addr, err)
		}
		if seen[ap] {
			return fmt.Errorf("server %s twice in the pool", ap)
		}
		seen[ap] = true
		weight := 1
		if w != nil {
			weight = *w
		}
		if node != "" && slices.Contains(drained, node) {
			weight = 0 // drained: no new connections
		}
		o.Servers = append(o.Servers, config.RealServer{Addr: ap, Weight: weight})
		return nil
	}
	if len(s.Servers) > 0 {
		for _, r := range s.Servers {
			if err := add(r.Address, r.Weight, serverNode(c, r.Address)); err != nil {
				return o, err
			}
		}
		return o, nil
	}
	for _, n := range c.Nodes {
		if s.Cluster == "" || n.Cluster != s.Cluster {
			continue
		}
		ap, err := netip.ParseAddrPort(n.Address)
		if err != nil {
			return o, fmt.Errorf("node %s address %q: %v", n.Name, n.Address, err)
		}
		if s.Port != 0 {
			ap = netip.AddrPortFrom(ap.Addr(), uint16(s.Port))
		}
		if err := add(ap.String(), n.Weight, n.Name); err != nil {
			return o, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if len(o.Servers) == 0 {
		return o, errors.New("empty pool")
	}
	return o, nil
}

// serverNode is the node an explicit pool's server is on, so that a
// drained node is drained there too ("weight 0 in every service"): the
// node whose address it is, else the one node on its IP ("" if none, or
// if several nodes share the IP and none has this address).
func serverNode(c *Config, addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ""
	}
	byIP := ""
	for _, n := range c.Nodes {
		na, err := netip.ParseAddrPort(n.Address)
		if err != nil || na.Addr() != ap.Addr() {
			continue
		}
		if na == ap {
			return n.Name
		}
		if byIP != "" {
			byIP = "-" // several: not this one's to guess
		} else {
			byIP = n.Name
		}
	}
	if byIP == "-" {
		return ""
	}
	return byIP
}

func nodeView(c *Config, name string) (*NodeConfig, error) {
	var node *Node
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			node = &c.Nodes[i]
		}
	}
	if node == nil {
		return nil, fmt.Errorf("no node named %q in the configuration", name)
	}
	nc := &NodeConfig{
		Docroot:       or(c.FileSystem.Docroot, defaultDocroot),
		DefaultDomain: node.DefaultDomain,
		Domains:       map[string]string{},
		Meta:          slices.Clone(c.FileSystem.Meta),
	}
	for _, d := range c.Domains {
		nc.Domains[d.Name] = or(d.Docroot, path.Join(nc.Docroot, d.Name))
	}
	return nc, nil
}

// AdminAddr is the node's admin listener: Admin, or the address's host
// at port 9080 ("" if Address is not an ip:port).
func (n Node) AdminAddr() string {
	if n.Admin != "" {
		return n.Admin
	}
	ap, err := netip.ParseAddrPort(n.Address)
	if err != nil {
		return ""
	}
	return netip.AddrPortFrom(ap.Addr(), 9080).String()
}

// AdminAddr is the director's admin API address: Admin or the default.
func (d Director) AdminAddr() string { return or(d.Admin, defaultAdmin) }

// qosView is the cluster's request classes as the director's (internal/qos).
func qosView(c *Config) ([]qos.Spec, error) {
	var out []qos.Spec
	for i, q := range c.QoS {
		s := qos.NewSpec(q.Name)
		s.Priority = q.Priority
		for _, n := range q.Match.Networks {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				return nil, fmt.Errorf("qos[%d] (%s): network %q: %v", i, q.Name, n, err)
			}
			s.Networks = append(s.Networks, p.Masked())
		}
		s.Prefixes = slices.Clone(q.Match.Prefixes)
		s.Regex = q.Match.Regex
		s.Domains = slices.Clone(q.Match.Domains)
		s.Users = slices.Clone(q.Match.Users)
		s.Header = q.Match.Header
		s.Rate, s.Concurrency = q.Rate, q.Concurrency
		s.Overload = or(q.Overload, qos.Queue)
		var err error
		if s.Deadline, err = dur(q.Deadline, qos.DefaultDeadline); err != nil {
			return nil, fmt.Errorf("qos[%d] (%s): deadline: %w", i, q.Name, err)
		}
		if q.RetryAfter > 0 {
			s.RetryAfter = q.RetryAfter
		}
		out = append(out, s)
	}
	return out, nil
}
