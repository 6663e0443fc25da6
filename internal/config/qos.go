package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
)

// QoS classes (internal/qos, docs/qos.md) for the l7 dataplane:
//
//	qos gold {
//	    priority 10                   # higher is served first; a request takes the first class that matches
//	    network 10.0.0.0/8            # client networks (any of them)
//	    prefix /shop                  # URL path prefixes
//	    regex ^/api/v[0-9]+/          # RE2 on the URL path (no spaces, ';' or '#': use \x20, \x3b, \x23)
//	    path /img/ /logo.png          # a directory (all under it) or a file
//	    domain www.example.org        # virtual domains (Host)
//	    user alice bob                # the HTTP basic auth user name (the site checks the password)
//	    header X-Tier: gold           # a header with exactly this value
//	    rate 100 burst=20             # requests per second, token bucket
//	    concurrency 20                # requests in flight to the nodes
//	    overload queue deadline=1s retry-after=1 queue=1024   # or: overload reject retry-after=1
//	}
//	qos bulk { priority 1; prefix /downloads; overload reject retry-after=5 }
//
// Every match given must hold. `qos default { ... }` sets the limits of
// the requests no class matches (it has no match). In a service:
//
//	qos gold bulk                 # the classes that apply (default: all; qos off: none)
//	qos-inflight 256              # the requests in flight to the pool at most
//	qos-per-server 32             # or: this many per server with weight > 0 (the default)
//	qos-reserve 1                 # per server: the last slots of the limit only the top class may take
//
// A service has admission control when the file defines a class.

// DefaultQoSPerServer is a service's limit of requests in flight per
// server when classes are defined and qos-inflight is not set.
const DefaultQoSPerServer = 32

// MaxQoSLimit bounds qos-inflight, qos-per-server and qos-reserve.
const MaxQoSLimit = 1 << 20

// CheckQoSLimit checks the value of one of a service's admission limits:
// key is qos-inflight or qos-per-server (1..MaxQoSLimit) or qos-reserve
// (0..MaxQoSLimit). The station's cluster configuration checks its
// fields of the same names with it, so both say the same.
func CheckQoSLimit(key string, n int) error {
	if key == "qos-reserve" {
		if n < 0 || n > MaxQoSLimit {
			return fmt.Errorf("want 0..%d requests per server", MaxQoSLimit)
		}
		return nil
	}
	if n < 1 || n > MaxQoSLimit {
		return fmt.Errorf("want 1..%d requests", MaxQoSLimit)
	}
	return nil
}

// CheckQoSLimits checks a service's admission limits against each other
// (0: not given). On a refusal key is the statement at fault, for a
// caller that places errors by field (the station's YAML path).
func CheckQoSLimits(inflight, perServer, reserve int) (key string, err error) {
	switch {
	case inflight > 0 && perServer > 0:
		// One would be ignored: qos-inflight wins in QoSLimit.
		return "qos-per-server", fmt.Errorf("qos-per-server %d and qos-inflight %d: give one (a limit per server, or a fixed one for the pool)", perServer, inflight)
	case inflight > 0 && reserve >= inflight:
		return "qos-reserve", fmt.Errorf("qos-reserve %d: want fewer than qos-inflight (%d): the lower classes need a slot", reserve, inflight)
	case inflight == 0 && reserve >= cmp.Or(perServer, DefaultQoSPerServer):
		return "qos-reserve", fmt.Errorf("qos-reserve %d: want fewer than qos-per-server (%d): the lower classes need a slot", reserve, cmp.Or(perServer, DefaultQoSPerServer))
	}
	return "", nil
}

// qosBlock is a qos block being read.
type qosBlock struct {
	spec *qos.Spec
	keep bool // false: a duplicate, parsed for its errors then dropped
}

// startQoS reads `qos NAME {` (and any statements after the brace on the
// same line); it returns the open block, or nil if the line closed it.
func startQoS(d *Director, text string, line int, errf func(fld, format string, a ...any)) *qosBlock {
	head, rest, brace := strings.Cut(text, "{")
	f := strings.Fields(head)
	if !brace || len(f) != 2 {
		errf("qos", "want: qos NAME { ... }")
		if !brace {
			return nil
		}
	}
	name := strings.Join(f[1:], "_")
	s := qos.NewSpec(name)
	s.Line = line
	b := &qosBlock{spec: &s, keep: true}
	if !qos.ValidName(name) {
		errf("qos", "%q: a class name is 1..32 letters, digits, '-', '_', '.'", name)
		b.keep = false
	}
	for _, o := range d.QoS {
		if o.Name == name {
			errf("qos", "class %q already defined on line %d", name, o.Line)
			b.keep = false
		}
	}
	if qosStatements(b, rest, errf) {
		finishQoS(d, b)
		return nil
	}
	return b
}

// qosStatements reads one line of a qos block (statements separated by
// ';'); true when the line closes the block.
func qosStatements(b *qosBlock, text string, errf func(fld, format string, a ...any)) bool {
	for _, st := range strings.Split(text, ";") {
		// The closing brace is a word of its own: a regex may end in one.
		f := strings.Fields(st)
		closed := len(f) > 0 && f[len(f)-1] == "}"
		if closed {
			f = f[:len(f)-1]
		}
		if len(f) > 0 {
			parseQoS(b.spec, f[0], f[1:], func(format string, a ...any) {
				errf("qos "+b.spec.Name+": "+f[0], format, a...)
			})
		}
		if closed {
			return true
		}
	}
	return false
}

func finishQoS(d *Director, b *qosBlock) {
	if b.keep {
		d.QoS = append(d.QoS, *b.spec)
	}
}

// parseQoS reads one statement of a qos block into s.
func parseQoS(s *qos.Spec, key string, args []string, errf func(format string, a ...any)) {
	one := func() (string, bool) {
		if len(args) != 1 {
			errf("want exactly one value, got %d", len(args))
			return "", false
		}
		return args[0], true
	}
	some := func() bool {
		if len(args) == 0 {
			errf("want one or more values")
			return false
		}
		return true
	}
	switch key {
	case "priority":
		v, ok := one()
		if !ok {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < -1000000 || n > 1000000 {
			errf("%q: want an integer, -1000000..1000000", v)
			return
		}
		s.Priority = n
	case "network":
		if !some() {
			return
		}
		var ps []netip.Prefix
		for _, v := range args {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				a, aerr := netip.ParseAddr(v)
				if aerr != nil {
					errf("%q: want a network (10.0.0.0/8) or an address", v)
					return
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			ps = append(ps, p.Masked())
		}
		s.Networks = append(s.Networks, ps...)
	case "prefix", "path":
		if !some() {
			return
		}
		for _, v := range args {
			if !strings.HasPrefix(v, "/") {
				errf("%q: must start with /", v)
				return
			}
		}
		if key == "prefix" {
			s.Prefixes = append(s.Prefixes, args...)
		} else {
			s.Paths = append(s.Paths, args...)
		}
	case "domain", "user":
		if !some() {
			return
		}
		if key == "domain" {
			s.Domains = append(s.Domains, args...)
		} else {
			s.Users = append(s.Users, args...)
		}
	case "regex":
		v, ok := one()
		if !ok {
			return
		}
		t := *s
		t.Regex = v
		if err := qos.CheckSpec(&t); err != nil {
			errf("%q: not an RE2 expression", v)
			return
		}
		s.Regex = v
	case "header":
		v := strings.Join(args, " ")
		k, val, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(strings.TrimSpace(k), " \t") {
			errf("%q: want Name: value", v)
			return
		}
		s.Header = strings.TrimSpace(k) + ": " + strings.TrimSpace(val)
	case "rate":
		if len(args) < 1 || len(args) > 2 {
			errf("want: rate N [burst=N]")
			return
		}
		r, err := strconv.ParseFloat(args[0], 64)
		if err != nil || !(r >= qos.MinRate && r <= 1e9) {
			errf("%q: want requests per second, %v..1e9", args[0], qos.MinRate)
			return
		}
		burst := 0
		if len(args) == 2 {
			v, ok := strings.CutPrefix(args[1], "burst=")
			n, err := strconv.Atoi(v)
			if !ok || err != nil || n < 1 || n > 1<<20 {
				errf("%q: want burst=N, 1..1048576", args[1])
				return
			}
			burst = n
		}
		s.Rate, s.Burst = r, burst
	case "concurrency":
		v, ok := one()
		if !ok {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<30 {
			errf("%q: want 1..1073741824 requests in flight", v)
			return
		}
		s.Concurrency = n
	case "overload":
		if len(args) == 0 || (args[0] != qos.Queue && args[0] != qos.Reject) {
			errf("want: overload queue|reject [deadline=D] [retry-after=S] [queue=N]")
			return
		}
		t := *s
		t.Overload = args[0]
		for _, kv := range args[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "deadline":
				if t.Overload == qos.Reject {
					err = fmt.Errorf("only with overload queue")
				} else if t.Deadline, err = time.ParseDuration(v); err == nil && (t.Deadline <= 0 || t.Deadline > time.Minute) {
					err = fmt.Errorf("want more than 0, at most 1m")
				}
			case "retry-after":
				if t.RetryAfter, err = strconv.Atoi(v); err == nil && (t.RetryAfter < 0 || t.RetryAfter > 86400) {
					err = fmt.Errorf("want 0..86400 seconds")
				}
			case "queue":
				if t.Overload == qos.Reject {
					err = fmt.Errorf("only with overload queue")
				} else if t.QueueMax, err = strconv.Atoi(v); err == nil && (t.QueueMax < 1 || t.QueueMax > qos.MaxQueue) {
					err = fmt.Errorf("want 1..%d", qos.MaxQueue)
				}
			default:
				errf("unknown option %q (want deadline, retry-after, queue)", kv)
				return
			}
			if err != nil {
				errf("%s %q: %v", k, v, err)
				return
			}
		}
		*s = t
	default:
		errf("unknown field (want priority, network, prefix, regex, path, domain, user, header, rate, concurrency, overload)")
	}
}

// parseServiceQoS reads a service's qos statements; false if key is not one.
func parseServiceQoS(svc *Service, key string, args []string, line int, errf func(format string, a ...any)) bool {
	switch key {
	case "qos":
		if len(args) == 0 {
			errf("want: qos CLASS... or qos off")
			return true
		}
		if len(args) == 1 && args[0] == "off" {
			svc.QoS, svc.QoSOff, svc.QoSLine = nil, true, line
			return true
		}
		for _, a := range args {
			if !qos.ValidName(a) {
				errf("%q is not a class name", a)
				return true
			}
		}
		svc.QoS, svc.QoSOff, svc.QoSLine = slices.Clone(args), false, line
	case "qos-inflight", "qos-per-server", "qos-reserve":
		if len(args) != 1 {
			errf("want exactly one value, got %d", len(args))
			return true
		}
		n, err := strconv.Atoi(args[0])
		if err == nil {
			err = CheckQoSLimit(key, n)
		} else {
			err = CheckQoSLimit(key, -1) // its "want" says what a number would be
		}
		if err != nil {
			errf("%q: %v", args[0], err)
			return true
		}
		switch key {
		case "qos-inflight":
			svc.QoSInflight = n
		case "qos-per-server":
			svc.QoSPerServer = n
		default:
			svc.QoSReserve = n
		}
		if svc.QoSLine == 0 {
			svc.QoSLine = line
		}
	default:
		return false
	}
	return true
}

// validateQoS checks the classes and the services' use of them.
func validateQoS(d *Director) []placed {
	var out []placed
	for i := range d.QoS {
		s := &d.QoS[i]
		if err := qos.CheckSpec(s); err != nil {
			out = append(out, placed{&Error{File: d.File, Line: s.Line, Field: "qos " + s.Name, Msg: err.Error()}, "\x00qos", s.Name})
		}
		if s.Name == qos.DefaultName && s.HasMatch() {
			out = append(out, placed{&Error{File: d.File, Line: s.Line, Field: "qos " + s.Name,
				Msg: "the default class takes the requests no class matches: it has no match"}, "\x00qos", s.Name})
		}
	}
	for i := range d.Services {
		s := &d.Services[i]
		if len(s.QoS) == 0 && s.QoSInflight == 0 && s.QoSPerServer == 0 && s.QoSReserve == 0 || s.QoSOff {
			continue // (a configuration built in code, as the station's view, has no lines)
		}
		errf := func(format string, a ...any) {
			out = append(out, placed{&Error{File: d.File, Line: s.QoSLine, Field: "service " + s.Name + ": qos", Msg: fmt.Sprintf(format, a...)}, s.Name, "qos"})
		}
		if s.Dataplane != "l7" {
			errf("only the l7 dataplane has request classes")
			continue
		}
		if len(d.QoS) == 0 {
			errf("no qos classes are defined (qos NAME { ... })")
			continue
		}
		if _, err := CheckQoSLimits(s.QoSInflight, s.QoSPerServer, s.QoSReserve); err != nil {
			errf("%v", err)
		}
		for _, n := range s.QoS {
			if !slices.ContainsFunc(d.QoS, func(c qos.Spec) bool { return c.Name == n }) && n != qos.DefaultName {
				errf("class %q is not defined", n)
			}
		}
	}
	return out
}

// QoSClasses are the classes that apply to service s, or nil if it has
// no admission control.
func (d *Director) QoSClasses(s *Service) []qos.Spec {
	if len(d.QoS) == 0 || s.Dataplane != "l7" || s.QoSOff {
		return nil
	}
	if len(s.QoS) == 0 {
		return d.QoS
	}
	var out []qos.Spec
	for _, c := range d.QoS {
		if slices.Contains(s.QoS, c.Name) || c.Name == qos.DefaultName {
			out = append(out, c)
		}
	}
	return out
}

// QoSLimit is service s's limit of requests in flight to its pool.
func (s *Service) QoSLimit() int {
	if s.QoSInflight > 0 {
		return s.QoSInflight
	}
	per := s.QoSPerServer
	if per == 0 {
		per = DefaultQoSPerServer
	}
	n := 0
	for _, r := range s.Servers {
		if r.Weight > 0 {
			n++
		}
	}
	return max(1, n) * per
}

// QoSReserveSlots is the slots of service s's limit only its top class may
// take: qos-reserve per server with weight > 0 (the admission keeps at
// least one for the rest).
func (s *Service) QoSReserveSlots() int {
	n := 0
	for _, r := range s.Servers {
		if r.Weight > 0 {
			n++
		}
	}
	return max(1, n) * s.QoSReserve
}

// formatQoS writes the classes, every field explicit.
func formatQoS(b *strings.Builder, specs []qos.Spec) {
	for _, s := range specs {
		fmt.Fprintf(b, "\nqos %s {\n    priority %d\n", s.Name, s.Priority)
		if len(s.Networks) > 0 {
			var f []string
			for _, p := range s.Networks {
				f = append(f, p.String())
			}
			fmt.Fprintf(b, "    network %s\n", strings.Join(f, " "))
		}
		for _, l := range []struct {
			k  string
			vs []string
		}{{"prefix", s.Prefixes}, {"path", s.Paths}, {"domain", s.Domains}, {"user", s.Users}} {
			if len(l.vs) > 0 {
				fmt.Fprintf(b, "    %s %s\n", l.k, strings.Join(l.vs, " "))
			}
		}
		if s.Regex != "" {
			fmt.Fprintf(b, "    regex %s\n", s.Regex)
		}
		if s.Header != "" {
			fmt.Fprintf(b, "    header %s\n", s.Header)
		}
		if s.Rate > 0 {
			fmt.Fprintf(b, "    rate %s", strconv.FormatFloat(s.Rate, 'g', -1, 64))
			if s.Burst > 0 {
				fmt.Fprintf(b, " burst=%d", s.Burst)
			}
			b.WriteString("\n")
		}
		if s.Concurrency > 0 {
			fmt.Fprintf(b, "    concurrency %d\n", s.Concurrency)
		}
		if s.Overload == qos.Reject {
			fmt.Fprintf(b, "    overload reject retry-after=%d\n", s.RetryAfter)
		} else {
			fmt.Fprintf(b, "    overload queue deadline=%v retry-after=%d", s.Deadline, s.RetryAfter)
			if s.QueueMax > 0 {
				fmt.Fprintf(b, " queue=%d", s.QueueMax)
			}
			b.WriteString("\n")
		}
		b.WriteString("}\n")
	}
}

// formatServiceQoS writes a service's qos statements.
func formatServiceQoS(b *strings.Builder, s *Service) {
	if s.QoSOff {
		b.WriteString("    qos off\n")
	}
	if len(s.QoS) > 0 {
		fmt.Fprintf(b, "    qos %s\n", strings.Join(s.QoS, " "))
	}
	if s.QoSInflight > 0 {
		fmt.Fprintf(b, "    qos-inflight %d\n", s.QoSInflight)
	}
	if s.QoSPerServer > 0 {
		fmt.Fprintf(b, "    qos-per-server %d\n", s.QoSPerServer)
	}
	if s.QoSReserve > 0 {
		fmt.Fprintf(b, "    qos-reserve %d\n", s.QoSReserve)
	}
}
