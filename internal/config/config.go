// Package config reads the director's configuration file: a small
// keepalived-like language, one statement per line, services in braces.
//
//	# comments run to the end of the line
//	admin 127.0.0.1:7500          # admin API and /metrics (loopback)
//	meta 127.0.0.10:7400          # file system, for mwlc request sizes (l7)
//	docroot /www                  # where virtual domains live in it
//	interface eth0                # dataplane xdp: the link to attach to
//	xdp-mode auto                 # auto | native | generic
//	xdp-conns 262144              # XDP connection-table size
//
//	service www {
//	    vip 127.0.0.100:8080
//	    protocol tcp              # tcp | udp
//	    dataplane l4              # l4 | l7 | xdp (direct routing in the kernel)
//	    scheduler wlc             # rr wrr lc wlc sed nq sh mh; mwlc with l7
//	    persistence 0s            # keep a client on its server this long
//	    udp-timeout 300s
//	    tcp-timeout 900s          # xdp: idle established TCP flows end
//	    tcp-fin-timeout 120s      # xdp: after the client's FIN or RST
//	    check http path=/healthz status=200 interval=2s timeout=1s rise=2 fall=3
//	    server 127.0.0.21:8080 weight=1
//	    server 127.0.0.22:8080 weight=2
//	}
//
// Every error names the file, the line and the field.
package config

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/sched"
)

// Director is a whole configuration.
type Director struct {
	// Admin is the admin API's address (HTTP, JSON, /metrics).
	Admin string
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
	Services  []Service
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
	// TCPTimeout and TCPFinTimeout end idle TCP flows in the XDP
	// connection table (established; after the client's FIN or RST).
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	Check         Check
	Servers       []RealServer
	Line          int
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
	Rise      int // successes in a row that bring a server back
	Fall      int // failures in a row that take it out
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

// Load reads and validates a configuration file.
func Load(path string) (*Director, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse reads a configuration from b; name is used in errors.
func Parse(name string, b []byte) (*Director, error) {
	d := &Director{Admin: "127.0.0.1:7500", Docroot: "/www", XDPMode: "auto", XDPConns: 262144}
	var svc *Service
	errf := func(line int, field, format string, a ...any) error {
		return &Error{File: name, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		key, args := f[0], f[1:]
		one := func() (string, error) {
			if len(args) != 1 {
				return "", errf(line, key, "want exactly one value, got %d", len(args))
			}
			return args[0], nil
		}
		if svc == nil {
			switch key {
			case "admin", "meta", "docroot", "interface", "xdp-mode", "xdp-conns":
				v, err := one()
				if err != nil {
					return nil, err
				}
				switch key {
				case "admin":
					if _, err := netip.ParseAddrPort(v); err != nil {
						return nil, errf(line, key, "%q is not an address:port", v)
					}
					d.Admin = v
				case "meta":
					d.Meta = v
				case "docroot":
					if !strings.HasPrefix(v, "/") {
						return nil, errf(line, key, "%q must be an absolute path in the file system", v)
					}
					d.Docroot = v
				case "interface":
					d.Interface = v
				case "xdp-mode":
					if v != "auto" && v != "native" && v != "generic" {
						return nil, errf(line, key, "%q: want auto, native or generic", v)
					}
					d.XDPMode = v
				case "xdp-conns":
					n, err := strconv.Atoi(v)
					if err != nil || n < 1024 || n > 1<<24 {
						return nil, errf(line, key, "%q: want a number of flows, 1024..16777216", v)
					}
					d.XDPConns = n
				}
			case "service":
				if len(args) != 2 || args[1] != "{" {
					return nil, errf(line, key, "want: service NAME {")
				}
				for _, s := range d.Services {
					if s.Name == args[0] {
						return nil, errf(line, key, "service %q already defined on line %d", args[0], s.Line)
					}
				}
				d.Services = append(d.Services, Service{Name: args[0], Protocol: "tcp", Dataplane: "l4", Scheduler: "wlc",
					UDPTimeout: 300 * time.Second, TCPTimeout: 900 * time.Second, TCPFinTimeout: 120 * time.Second,
					Check: DefaultCheck(), Line: line})
				svc = &d.Services[len(d.Services)-1]
			case "}":
				return nil, errf(line, "", "'}' without an open service")
			default:
				return nil, errf(line, key, "unknown statement (want admin, meta, docroot, interface, xdp-mode, xdp-conns or service)")
			}
			continue
		}
		field := "service " + svc.Name + ": " + key
		switch key {
		case "}":
			if len(args) != 0 {
				return nil, errf(line, "", "unexpected text after '}'")
			}
			if err := validate(svc, name); err != nil {
				return nil, err
			}
			svc = nil
		case "vip":
			v, err := one()
			if err != nil {
				return nil, errf(line, field, "%v", err.(*Error).Msg)
			}
			ap, err := netip.ParseAddrPort(v)
			if err != nil || ap.Port() == 0 {
				return nil, errf(line, field, "%q is not an address:port", v)
			}
			svc.VIP = ap
		case "protocol", "dataplane", "scheduler":
			v, err := one()
			if err != nil {
				return nil, errf(line, field, "%v", err.(*Error).Msg)
			}
			switch key {
			case "protocol":
				if v != "tcp" && v != "udp" {
					return nil, errf(line, field, "%q: want tcp or udp", v)
				}
				svc.Protocol = v
			case "dataplane":
				if v != "l4" && v != "l7" && v != "xdp" {
					return nil, errf(line, field, "%q: want l4, l7 or xdp", v)
				}
				svc.Dataplane = v
			case "scheduler":
				if _, err := sched.New(v); err != nil {
					return nil, errf(line, field, "%v", err)
				}
				svc.Scheduler = v
			}
		case "persistence", "udp-timeout", "tcp-timeout", "tcp-fin-timeout":
			v, err := one()
			if err != nil {
				return nil, errf(line, field, "%v", err.(*Error).Msg)
			}
			dur, err := time.ParseDuration(v)
			if err != nil || dur < 0 {
				return nil, errf(line, field, "%q is not a duration (like 300s or 5m)", v)
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
			}
		case "check":
			c, err := parseCheck(args)
			if err != nil {
				return nil, errf(line, field, "%v", err)
			}
			svc.Check = c
		case "server":
			if len(args) < 1 {
				return nil, errf(line, field, "want: server ADDR:PORT [weight=N]")
			}
			ap, err := netip.ParseAddrPort(args[0])
			if err != nil || ap.Port() == 0 {
				return nil, errf(line, field, "%q is not an address:port", args[0])
			}
			rs := RealServer{Addr: ap, Weight: 1, Line: line}
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k != "weight" {
					return nil, errf(line, field, "unknown option %q (want weight=N)", kv)
				}
				w, err := strconv.Atoi(v)
				if err != nil || w < 0 || w > 65535 {
					return nil, errf(line, field+" weight", "%q: want 0..65535", v)
				}
				rs.Weight = w
			}
			for _, o := range svc.Servers {
				if o.Addr == ap {
					return nil, errf(line, field, "%s already in the pool (line %d)", ap, o.Line)
				}
			}
			svc.Servers = append(svc.Servers, rs)
		case "service":
			return nil, errf(line, key, "service %q is not closed before this one", svc.Name)
		default:
			return nil, errf(line, field, "unknown field (want vip, protocol, dataplane, scheduler, persistence, udp-timeout, tcp-timeout, tcp-fin-timeout, check, server)")
		}
	}
	if svc != nil {
		return nil, errf(svc.Line, "service "+svc.Name, "not closed: missing '}'")
	}
	seen := map[string]*Service{}
	for i := range d.Services {
		s := &d.Services[i]
		k := s.Protocol + " " + s.VIP.String()
		if o := seen[k]; o != nil {
			return nil, errf(s.Line, "service "+s.Name+": vip", "%s %s is also service %q's (line %d)", s.Protocol, s.VIP, o.Name, o.Line)
		}
		seen[k] = s
		if s.Dataplane == "xdp" && d.Interface == "" {
			return nil, errf(s.Line, "service "+s.Name+": dataplane", "xdp needs the director's 'interface NAME' (the link to attach to)")
		}
	}
	return d, nil
}

// xdpSchedulers are those internal/dataplane/xdp has in the kernel (its
// HasScheduler); kept here so the configuration needs no BPF packages.
var xdpSchedulers = map[string]bool{"rr": true, "wrr": true, "lc": true, "wlc": true, "sed": true, "nq": true, "sh": true, "mh": true}

func validate(s *Service, file string) error {
	errf := func(field, format string, a ...any) error {
		return &Error{File: file, Line: s.Line, Field: "service " + s.Name + ": " + field, Msg: fmt.Sprintf(format, a...)}
	}
	if !s.VIP.IsValid() {
		return errf("vip", "missing")
	}
	if s.Dataplane == "l7" && s.Protocol != "tcp" {
		return errf("dataplane", "l7 needs protocol tcp")
	}
	if s.Dataplane == "xdp" {
		if !xdpSchedulers[s.Scheduler] {
			return errf("scheduler", "%s is not in the XDP dataplane (it has rr, wrr, lc, wlc, sed, nq, sh, mh)", s.Scheduler)
		}
		if s.Persistence > 0 {
			return errf("persistence", "not with dataplane xdp: use scheduler sh or mh to keep a client on its server")
		}
		if len(s.Servers) > 64 {
			return errf("server", "%d servers: dataplane xdp takes at most 64 per service", len(s.Servers))
		}
		for _, r := range s.Servers {
			if r.Addr.Port() != s.VIP.Port() {
				return &Error{File: file, Line: r.Line, Field: "service " + s.Name + ": server", Msg: fmt.Sprintf("%s: with dataplane xdp (direct routing) a server listens on the VIP's port %d; only MACs are rewritten", r.Addr, s.VIP.Port())}
			}
		}
	}
	if s.Scheduler == "mwlc" && s.Dataplane != "l7" {
		return errf("scheduler", "mwlc needs dataplane l7 (it schedules by the requested file's size)")
	}
	if s.Protocol == "udp" && (s.Check.Type == "http") {
		return errf("check", "an http check on a udp service")
	}
	return nil
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
			return c, fmt.Errorf("unknown option %q", k)
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
