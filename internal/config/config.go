// Package config reads the director's configuration file: a small
// keepalived-like language, one statement per line, services in braces.
//
//	# comments run to the end of the line
//	admin 127.0.0.1:7500          # admin API and /metrics (loopback)
//	meta 127.0.0.1:7400           # file system, for mwlc request sizes (l7)
//	docroot /www                  # where virtual domains live in it
//	interface eth0                # dataplane xdp: the link to attach to
//	xdp-mode auto                 # auto | native | generic
//	xdp-conns 262144              # XDP connection-table size
//	ha { ... }                    # one of a group of directors (ha.go, docs/ha.md)
//	feedback { ... }              # weights from the servers' load (feedback.go, docs/feedback.md)
//
//	service www {
//	    vip 127.0.0.100:8080
//	    protocol tcp              # tcp | udp
//	    dataplane l4              # l4 | l7 | xdp (direct routing in the kernel)
//	    scheduler wlc             # rr wrr lc wlc sed nq sh mh; mwlc with l7
//	    persistence 0s            # keep a client on its server this long
//	    udp-timeout 300s
//	    tcp-timeout 900s          # xdp, l4: idle established TCP flows end
//	    tcp-fin-timeout 120s      # xdp, l4: after the client's FIN or RST
//	    max-conns 10000           # l4: live TCP connections / UDP flows at most
//	    max-conns-per-source 1000 # l4: of one client address at most
//	    inactive-timeout 60s      # lc/wlc count closed connections this long
//	    pass-internal off         # l7: pass clients' /load, /healthz, /metrics to nodes
//	    weights config            # config (weight=N) | feedback (the feedback block's controller)
//	    check http port=9080 path=/healthz status=200 interval=2s timeout=1s rise=2 fall=3
//	    server 127.0.0.21:8080 weight=1
//	    server 127.0.0.22:8080 weight=2
//	}
//
// Every error names the file, the line and the field.
package config

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
	"github.com/corral-cluster/corral/internal/sched"
)

// Director is a whole configuration.
type Director struct {
	// File is where the configuration came from (named in errors).
	File string
	// Admin is the admin API's address (HTTP, JSON, /metrics).
	Admin     string
	AdminLine int // where Admin was set; 0 for the default
	// Meta is the file system's metadata server; the l7 dataplane asks it
	// the size of requested files for mwlc. Empty: sizes unknown.
	Meta string
	// Docroot is the directory of virtual domains in the file system.
	Docroot string
	// Interface is where the XDP dataplane attaches (the link facing
	// clients and real servers); XDPMode is auto, native or generic;
	// XDPConns the connection table's size.
	Interface string
	XDPMode   string
	XDPConns  int
	// HA, if set, makes this director one of a group (internal/ha): the
	// block `ha { ... }`.
	HA *HA
	// Feedback, if set, polls the real servers' load for the services
	// with `weights feedback` (feedback.go, docs/feedback.md).
	Feedback *Feedback
	// QoS are the l7 dataplane's request classes (qos.go), in file order.
	QoS      []qos.Spec
	Services []Service
}

// HA is the director's high-availability block.
type HA struct {
	Line     int      // where the block starts
	Group    string   // group: the VIP set's name
	Name     string   // name: this director's name in the group (default: the host name)
	Mode     string   // mode: active-standby (default) or active-active
	Priority int      // priority: 1..255, default 100; the highest in-sync director takes the VIPs back
	Etcd     []string // etcd: the station's etcd client URLs
	EtcdCA   string   // etcd-ca, etcd-cert, etcd-key: client TLS files (all three or none)
	EtcdCert string
	EtcdKey  string
	Sync     string        // sync: address:port the connection streams come to (on the director's link)
	KeyFile  string        // key-file: the group's shared secret (16+ bytes), 0600
	LeaseTTL time.Duration // lease-ttl: whole seconds, 1s..60s, default 2s
}

// Service is one virtual service: a VIP and its pool.
type Service struct {
	Name      string
	VIP       netip.AddrPort
	Protocol  string // tcp or udp
	Dataplane string // l4, l7 or xdp
	Scheduler string
	// Persistence keeps a client (by source address) on the same real
	// server while it has connections and for this long after.
	Persistence time.Duration
	// UDPTimeout ends a UDP flow idle this long.
	UDPTimeout time.Duration
	// TCPTimeout and TCPFinTimeout end idle TCP flows (established; after
	// the client's FIN or RST) in the XDP connection table and the l4
	// proxy (L4Timeouts).
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	// MaxConns and MaxConnsPerSource cap the l4 dataplane's live flows,
	// of the service and of one client address, IPv6 /64 (0: the default;
	// ConnLimits); LimitsLine is where the first is set (0: neither).
	MaxConns, MaxConnsPerSource int
	LimitsLine                  int
	// InactiveTimeout is how long a closed connection still counts as
	// inactive for the lc family (LVS's TIME_WAIT entries).
	InactiveTimeout time.Duration
	// PassInternal lets the l7 dataplane pass requests for a node's own
	// endpoints (/load, /healthz, /metrics) from clients; off by default.
	PassInternal bool
	// Weights is where the servers' weights come from: config (their
	// weight=N) or feedback (the feedback block's controller).
	Weights string
	Check   Check
	Servers []RealServer
	Line    int
	// QoS names the classes that apply (empty: all; QoSOff: none, no
	// admission control); QoSInflight and QoSPerServer set the admission
	// limit (QoSLimit); QoSReserve the slots per server only the top
	// class may take (QoSReserveSlots); QoSLine is where the first of
	// them is (0: none).
	QoS                                   []string
	QoSOff                                bool
	QoSInflight, QoSPerServer, QoSReserve int
	QoSLine                               int
}

// Check is a service's health check.
type Check struct {
	Type      string   // tcp, http, exec or none
	Path      string   // http: request path
	Status    int      // http: expected status
	BodyMatch string   // http: substring the body must contain
	Command   []string // exec: program and arguments; the server's address is appended
	Interval  time.Duration
	Timeout   time.Duration
	// Port, if set, is checked instead of the server's own port, on the
	// server's address (keepalived's connect_port): a node's /healthz is
	// on its admin port.
	Port int
	Rise int // successes in a row that bring a server back
	Fall int // failures in a row that take it out
}

// RealServer is one member of a pool.
type RealServer struct {
	Addr   netip.AddrPort
	Weight int // 0: drain (no new connections)
	Line   int
}

// DefaultCheck is a TCP connect every 2 s, out after 3 failures, back after 2
// successes.
func DefaultCheck() Check {
	return Check{Type: "tcp", Status: 200, Path: "/healthz", Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
}

// Error is a configuration error at a place.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Errors is every error found in one file, in line order. Parse returns
// all of them at once so that an operator fixes a file in one pass.
type Errors []*Error

func (l Errors) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find each *Error.
func (l Errors) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Load reads and validates a configuration file.
func Load(path string) (*Director, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse reads a configuration from b and validates it (Validate); name is
// used in errors. It reports every error it finds, not only the first.
func Parse(name string, b []byte) (*Director, error) {
	d, errs, bad := parse(name, b)
	for _, e := range validate(d) {
		if !bad[e.service+" *"] && !bad[e.service+" "+e.key] && !(e.key == "scheduler" && bad[e.service+" dataplane"]) &&
			!(e.key != "vip" && bad[e.service+" protocol"]) {
			errs = append(errs, e.Error)
		}
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return nil, errs
	}
	return d, nil
}

// Validate checks a whole configuration (one built in code, or parsed):
// each service's fields against each other, and the services against each
// other (a VIP used twice, xdp without an interface).
func Validate(d *Director) error {
	var errs Errors
	for _, e := range validate(d) {
		errs = append(errs, e.Error)
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// placed is a validation error, the service it belongs to and the
// statement it is about, so that Parse can drop errors that only follow
// from a syntax error (a vip "missing" after a bad vip line).
type placed struct {
	*Error
	service, key string
}

// MaxLine is the longest line a configuration file may have.
const MaxLine = 64 << 10

// parse reads the statements; bad holds "SERVICE KEY" for each statement
// with a syntax error ("SERVICE *": the service is cut short).
func parse(name string, b []byte) (*Director, Errors, map[string]bool) {
	d := &Director{File: name, Admin: "127.0.0.1:7500", Docroot: "/www", XDPMode: "auto", XDPConns: 262144}
	var errs Errors
	bad := map[string]bool{}
	var svc *Service
	skip := false // inside a service that is not kept (a duplicate name)
	var scratch Service
	var ha *HA // inside the ha block
	var haScratch HA
	var fb *Feedback // inside the feedback block
	var fbScratch Feedback
	var qb *qosBlock // inside a qos block
	line := 0
	for rest := b; len(rest) > 0; {
		var raw []byte
		raw, rest, _ = bytes.Cut(rest, []byte("\n"))
		raw = bytes.TrimSuffix(raw, []byte("\r"))
		line++
		if len(raw) > MaxLine {
			// Refused, not cut or skipped quietly: what follows on the
			// line could be anything.
			errs = append(errs, &Error{File: name, Line: line, Msg: fmt.Sprintf("line longer than %d bytes", MaxLine)})
			if svc != nil {
				bad[svc.Name+" *"] = true
			}
			if ha != nil {
				bad[haKey+" *"] = true
			}
			if fb != nil {
				bad[feedbackKey+" *"] = true
			}
			continue
		}
		text := string(raw)
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		key, args := f[0], f[1:]
		field := key
		if svc != nil {
			field = "service " + svc.Name + ": " + key
		}
		if ha != nil {
			field = "ha: " + key
		}
		if fb != nil {
			field = "feedback: " + key
		}
		errf := func(fld, format string, a ...any) {
			errs = append(errs, &Error{File: name, Line: line, Field: fld, Msg: fmt.Sprintf(format, a...)})
			if svc != nil {
				bad[svc.Name+" "+key] = true
			}
			if ha != nil {
				bad[haKey+" "+key] = true
			}
			if fb != nil {
				bad[feedbackKey+" "+key] = true
			}
		}
		// opensBlock checks a block's header "KEY {"; a malformed one that
		// still ends in "{" opens the block, so its body is checked too.
		opensBlock := func(key string, args []string) bool {
			if len(args) == 1 && args[0] == "{" {
				return true
			}
			errf(key, "want: %s {", key)
			return len(args) > 0 && args[len(args)-1] == "{"
		}
		one := func() (string, bool) {
			if len(args) != 1 {
				errf(field, "want exactly one value, got %d", len(args))
				return "", false
			}
			return args[0], true
		}
		if qb != nil {
			if key == "service" || key == "ha" || key == "qos" || key == "feedback" {
				errf(key, "the qos block %s is not closed before this %s", qb.spec.Name, key)
				qb = nil
				continue
			}
			if qosStatements(qb, text, errf) {
				finishQoS(d, qb)
				qb = nil
			}
			continue
		}
		if ha != nil {
			if key == "}" {
				if len(args) != 0 {
					errf("", "unexpected text after '}'")
				}
				ha = nil
				continue
			}
			if key == "service" || key == "ha" {
				errf(key, "the ha block is not closed before this %s", key)
				continue
			}
			parseHA(ha, key, args, func(format string, a ...any) { errf(field, format, a...) })
			continue
		}
		if fb != nil {
			if key == "}" {
				if len(args) != 0 {
					errf("", "unexpected text after '}'")
				}
				fb = nil
				continue
			}
			if key == "service" || key == "ha" || key == "feedback" {
				errf(key, "the feedback block is not closed before this %s", key)
				continue
			}
			parseFeedback(fb, key, args, func(format string, a ...any) { errf(field, format, a...) })
			continue
		}
		if svc == nil {
			switch key {
			case "admin", "meta", "docroot", "interface", "xdp-mode", "xdp-conns":
				v, ok := one()
				if !ok {
					continue
				}
				switch key {
				case "admin":
					if _, err := netip.ParseAddrPort(v); err != nil {
						errf(key, "%q is not an address:port", v)
						continue
					}
					d.Admin, d.AdminLine = v, line
				case "meta":
					d.Meta = v
				case "docroot":
					if !strings.HasPrefix(v, "/") {
						errf(key, "%q must be an absolute path in the file system", v)
						continue
					}
					d.Docroot = v
				case "interface":
					d.Interface = v
				case "xdp-mode":
					if v != "auto" && v != "native" && v != "generic" {
						errf(key, "%q: want auto, native or generic", v)
						continue
					}
					d.XDPMode = v
				case "xdp-conns":
					n, err := strconv.Atoi(v)
					if err != nil || n < 1024 || n > 1<<24 {
						errf(key, "%q: want a number of flows, 1024..16777216", v)
						continue
					}
					d.XDPConns = n
				}
			case "service":
				if len(args) != 2 || args[1] != "{" {
					errf(key, "want: service NAME {")
					if len(args) == 0 || args[len(args)-1] != "{" {
						continue
					}
					args = []string{strings.Join(args[:len(args)-1], "_"), "{"}
				}
				skip = false
				for _, s := range d.Services {
					if s.Name == args[0] {
						errf(key, "service %q already defined on line %d", args[0], s.Line)
						skip = true
					}
				}
				nsvc := NewService(args[0])
				nsvc.Line = line
				if skip {
					scratch = nsvc // parsed for its errors, then dropped
					svc = &scratch
				} else {
					d.Services = append(d.Services, nsvc)
					svc = &d.Services[len(d.Services)-1]
				}
			case "ha":
				if !opensBlock(key, args) {
					continue
				}
				if d.HA != nil {
					errf(key, "ha block already defined on line %d", d.HA.Line)
					haScratch = *NewHA() // parsed for its errors, then dropped
					haScratch.Line = line
					ha = &haScratch
					continue
				}
				d.HA = NewHA()
				d.HA.Line = line
				ha = d.HA
			case "feedback":
				if !opensBlock(key, args) {
					continue
				}
				if d.Feedback != nil {
					errf(key, "feedback block already defined on line %d", d.Feedback.Line)
					fbScratch = *NewFeedback() // parsed for its errors, then dropped
					fbScratch.Line = line
					fb = &fbScratch
					continue
				}
				d.Feedback = NewFeedback()
				d.Feedback.Line = line
				fb = d.Feedback
			case "qos":
				qb = startQoS(d, text, line, errf)
			case "}":
				errf("", "'}' without an open service, ha, feedback or qos block")
			default:
				errf(key, "unknown statement (want admin, meta, docroot, interface, xdp-mode, xdp-conns, ha, feedback, qos or service)")
			}
			continue
		}
		switch key {
		case "}":
			if len(args) != 0 {
				errf("", "unexpected text after '}'")
			}
			svc, skip = nil, false
		case "vip":
			v, ok := one()
			if !ok {
				continue
			}
			ap, err := netip.ParseAddrPort(v)
			if err != nil || ap.Port() == 0 {
				errf(field, "%q is not an address:port", v)
				continue
			}
			svc.VIP = ap
		case "protocol", "dataplane", "scheduler":
			v, ok := one()
			if !ok {
				continue
			}
			switch key {
			case "protocol":
				if v != "tcp" && v != "udp" {
					errf(field, "%q: want tcp or udp", v)
					continue
				}
				svc.Protocol = v
			case "dataplane":
				if !slices.Contains(sched.Dataplanes, v) {
					errf(field, "%q: want %s", v, orList(sched.Dataplanes))
					continue
				}
				svc.Dataplane = v
			case "scheduler":
				if _, err := sched.New(v); err != nil {
					errf(field, "%v", err)
					continue
				}
				svc.Scheduler = v
			}
		case "persistence", "udp-timeout", "tcp-timeout", "tcp-fin-timeout", "inactive-timeout":
			v, ok := one()
			if !ok {
				continue
			}
			dur, err := time.ParseDuration(v)
			if err != nil || dur < 0 {
				errf(field, "%q is not a duration (like 300s or 5m)", v)
				continue
			}
			switch key {
			case "persistence":
				svc.Persistence = dur
			case "udp-timeout":
				svc.UDPTimeout = dur
			case "tcp-timeout":
				svc.TCPTimeout = dur
			case "tcp-fin-timeout":
				svc.TCPFinTimeout = dur
			case "inactive-timeout":
				svc.InactiveTimeout = dur
			}
		case "pass-internal":
			v, ok := one()
			if !ok {
				continue
			}
			if v != "on" && v != "off" {
				errf(field, "%q: want on or off", v)
				continue
			}
			svc.PassInternal = v == "on"
		case "weights":
			parseWeights(svc, args, func(format string, a ...any) { errf(field, format, a...) })
		case "check":
			c, err := parseCheck(args)
			if err != nil {
				errf(field, "%v", err)
				continue
			}
			svc.Check = c
		case "server":
			if len(args) < 1 {
				errf(field, "want: server ADDR:PORT [weight=N]")
				continue
			}
			ap, err := netip.ParseAddrPort(args[0])
			if err != nil || ap.Port() == 0 {
				errf(field, "%q is not an address:port", args[0])
				continue
			}
			rs := RealServer{Addr: ap, Weight: 1, Line: line}
			okOpts := true
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k != "weight" {
					errf(field, "unknown option %q (want weight=N)", kv)
					okOpts = false
					continue
				}
				w, err := strconv.Atoi(v)
				if err != nil || w < 0 || w > 65535 {
					errf(field+" weight", "%q: want 0..65535", v)
					okOpts = false
					continue
				}
				rs.Weight = w
			}
			if !okOpts {
				continue
			}
			dup := false
			for _, o := range svc.Servers {
				if o.Addr == ap {
					errf(field, "%s already in the pool (line %d)", ap, o.Line)
					dup = true
				}
			}
			if !dup {
				svc.Servers = append(svc.Servers, rs)
			}
		case "service":
			errf(key, "service %q is not closed before this one", svc.Name)
		default:
			if parseServiceQoS(svc, key, args, line, func(format string, a ...any) { errf(field, format, a...) }) {
				continue
			}
			if parseServiceLimits(svc, key, args, line, func(format string, a ...any) { errf(field, format, a...) }) {
				continue
			}
			errf(field, "unknown field (want vip, protocol, dataplane, scheduler, persistence, udp-timeout, tcp-timeout, tcp-fin-timeout, inactive-timeout, max-conns, max-conns-per-source, pass-internal, weights, check, server, qos, qos-inflight, qos-per-server, qos-reserve)")
		}
	}
	if svc != nil {
		errs = append(errs, &Error{File: name, Line: svc.Line, Field: "service " + svc.Name, Msg: "not closed: missing '}'"})
		bad[svc.Name+" *"] = true
	}
	if qb != nil {
		errs = append(errs, &Error{File: name, Line: qb.spec.Line, Field: "qos " + qb.spec.Name, Msg: "not closed: missing '}'"})
	}
	if ha != nil {
		errs = append(errs, &Error{File: name, Line: ha.Line, Field: "ha", Msg: "not closed: missing '}'"})
		bad[haKey+" *"] = true
	}
	if fb != nil {
		errs = append(errs, &Error{File: name, Line: fb.Line, Field: "feedback", Msg: "not closed: missing '}'"})
		bad[feedbackKey+" *"] = true
	}
	return d, errs, bad
}

// NewService is a service with every field at its default.
func NewService(name string) Service {
	return Service{Name: name, Protocol: "tcp", Dataplane: "l4", Scheduler: "wlc", Weights: "config",
		UDPTimeout: 300 * time.Second, TCPTimeout: 900 * time.Second, TCPFinTimeout: 120 * time.Second,
		InactiveTimeout: DefaultInactiveTimeout, Check: DefaultCheck()}
}

// DefaultInactiveTimeout is how long a closed connection still counts as
// inactive for lc/wlc (LVS keeps TIME_WAIT entries 2 minutes; a minute
// is enough to spread a run of short connections and forgets sooner).
const DefaultInactiveTimeout = 60 * time.Second

func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

func validate(d *Director) []placed {
	var out []placed
	file := d.File
	seen := map[string]*Service{}
	for i := range d.Services {
		s := &d.Services[i]
		errf := func(line int, field, format string, a ...any) {
			out = append(out, placed{&Error{File: file, Line: line, Field: "service " + s.Name + ": " + field, Msg: fmt.Sprintf(format, a...)}, s.Name, field})
		}
		if !s.VIP.IsValid() {
			errf(s.Line, "vip", "missing")
			continue
		}
		k := s.Protocol + " " + s.VIP.String()
		if o := seen[k]; o != nil {
			errf(s.Line, "vip", "%s %s is also service %q's (line %d)", s.Protocol, s.VIP, o.Name, o.Line)
		} else {
			seen[k] = s
		}
		if s.Dataplane == "l7" && s.Protocol != "tcp" {
			errf(s.Line, "dataplane", "l7 needs protocol tcp")
		}
		if err := sched.Supports(s.Scheduler, s.Dataplane); err != nil {
			errf(s.Line, "scheduler", "%v", err)
		}
		if s.Dataplane == "xdp" {
			if d.Interface == "" {
				errf(s.Line, "dataplane", "xdp needs the director's 'interface NAME' (the link to attach to)")
			}
			if s.Persistence > 0 {
				errf(s.Line, "persistence", "not with dataplane xdp: use scheduler sh or mh to keep a client on its server")
			}
			if len(s.Servers) > 64 {
				errf(s.Line, "server", "%d servers: dataplane xdp takes at most 64 per service", len(s.Servers))
			}
			for _, r := range s.Servers {
				if r.Addr.Port() != s.VIP.Port() {
					errf(r.Line, "server", "%s: with dataplane xdp (direct routing) a server listens on the VIP's port %d; only MACs are rewritten", r.Addr, s.VIP.Port())
				}
			}
		}
		if s.Protocol == "udp" && s.Check.Type == "http" {
			errf(s.Line, "check", "an http check on a udp service")
		}
		if s.PassInternal && s.Dataplane != "l7" {
			errf(s.Line, "pass-internal", "only the l7 dataplane looks at paths")
		}
		if p := s.Check.Port; p != 0 {
			// The check's port is the node's admin port: clients' traffic
			// must never go there.
			for _, r := range s.Servers {
				if int(r.Addr.Port()) == p {
					errf(r.Line, "server", "%s: port %d is the check's port (the node's admin port), not one to serve clients on", r.Addr, p)
				}
			}
		}
	}
	out = append(out, validateQoS(d)...)
	out = append(out, validateLimits(d)...)
	out = append(out, validateHA(d)...)
	return append(out, validateFeedback(d)...)
}

func parseCheck(args []string) (Check, error) {
	c := DefaultCheck()
	if len(args) == 0 {
		return c, fmt.Errorf("want: check tcp|http|exec|none [key=value...]")
	}
	c.Type = args[0]
	switch c.Type {
	case "tcp", "http", "none":
	case "exec":
	default:
		return c, fmt.Errorf("%q: want tcp, http, exec or none", c.Type)
	}
	for _, kv := range args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return c, fmt.Errorf("%q: want key=value", kv)
		}
		var err error
		switch k {
		case "interval", "timeout":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil && d <= 0 {
				err = fmt.Errorf("must be positive")
			}
			if k == "interval" {
				c.Interval = d
			} else {
				c.Timeout = d
			}
		case "rise", "fall":
			var n int
			if n, err = strconv.Atoi(v); err == nil && (n < 1 || n > 100) {
				err = fmt.Errorf("want 1..100")
			}
			if k == "rise" {
				c.Rise = n
			} else {
				c.Fall = n
			}
		case "port":
			if c.Port, err = strconv.Atoi(v); err == nil && (c.Port < 1 || c.Port > 65535) {
				err = fmt.Errorf("want 1..65535")
			}
		case "path":
			if !strings.HasPrefix(v, "/") {
				err = fmt.Errorf("must start with /")
			}
			c.Path = v
		case "status":
			if c.Status, err = strconv.Atoi(v); err == nil && (c.Status < 100 || c.Status > 599) {
				err = fmt.Errorf("want 100..599")
			}
		case "body-match":
			c.BodyMatch = v
		case "command":
			c.Command = strings.Split(v, ",")
		default:
			return c, fmt.Errorf("unknown option %q (want interval, timeout, rise, fall, port, path, status, body-match, command)", k)
		}
		if err != nil {
			return c, fmt.Errorf("%s %q: %v", k, v, err)
		}
	}
	if c.Type == "exec" && len(c.Command) == 0 {
		return c, fmt.Errorf("exec needs command=PROGRAM[,ARG...]")
	}
	if c.Timeout > c.Interval {
		return c, fmt.Errorf("timeout %v longer than interval %v", c.Timeout, c.Interval)
	}
	return c, nil
}

// Format writes a configuration back in the language, every field
// explicit, so that Parse(Format(d)) gives d again (lines aside).
func Format(d *Director) string {
	var b strings.Builder
	fmt.Fprintf(&b, "admin %s\n", d.Admin)
	if d.Meta != "" {
		fmt.Fprintf(&b, "meta %s\n", d.Meta)
	}
	fmt.Fprintf(&b, "docroot %s\n", d.Docroot)
	if d.Interface != "" {
		fmt.Fprintf(&b, "interface %s\n", d.Interface)
	}
	fmt.Fprintf(&b, "xdp-mode %s\nxdp-conns %d\n", d.XDPMode, d.XDPConns)
	if d.HA != nil {
		formatHA(&b, d.HA)
	}
	if d.Feedback != nil {
		formatFeedback(&b, d.Feedback)
	}
	formatQoS(&b, d.QoS)
	for _, s := range d.Services {
		fmt.Fprintf(&b, "\nservice %s {\n", s.Name)
		fmt.Fprintf(&b, "    vip %s\n    protocol %s\n    dataplane %s\n    scheduler %s\n", s.VIP, s.Protocol, s.Dataplane, s.Scheduler)
		fmt.Fprintf(&b, "    persistence %v\n    udp-timeout %v\n    tcp-timeout %v\n    tcp-fin-timeout %v\n    inactive-timeout %v\n",
			s.Persistence, s.UDPTimeout, s.TCPTimeout, s.TCPFinTimeout, s.InactiveTimeout)
		if s.MaxConns != 0 { // 0: the default, which may change
			fmt.Fprintf(&b, "    max-conns %d\n", s.MaxConns)
		}
		if s.MaxConnsPerSource != 0 {
			fmt.Fprintf(&b, "    max-conns-per-source %d\n", s.MaxConnsPerSource)
		}
		if s.PassInternal {
			b.WriteString("    pass-internal on\n")
		}
		if s.Weights == "feedback" {
			b.WriteString("    weights feedback\n")
		}
		fmt.Fprintf(&b, "    check %s\n", FormatCheck(s.Check))
		formatServiceQoS(&b, &s)
		for _, r := range s.Servers {
			fmt.Fprintf(&b, "    server %s weight=%d\n", r.Addr, r.Weight)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// FormatCheck is a check as its 'check' statement's arguments.
func FormatCheck(c Check) string {
	f := []string{c.Type}
	if c.Type == "exec" {
		f = append(f, "command="+strings.Join(c.Command, ","))
	}
	f = append(f, "path="+c.Path, fmt.Sprintf("status=%d", c.Status))
	if c.BodyMatch != "" {
		f = append(f, "body-match="+c.BodyMatch)
	}
	if c.Port != 0 {
		f = append(f, fmt.Sprintf("port=%d", c.Port))
	}
	f = append(f, fmt.Sprintf("interval=%v", c.Interval), fmt.Sprintf("timeout=%v", c.Timeout),
		fmt.Sprintf("rise=%d", c.Rise), fmt.Sprintf("fall=%d", c.Fall))
	return strings.Join(f, " ")
}
