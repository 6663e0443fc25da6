package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The feedback block turns each real server's measured load (paper 003,
// internal/feedback, docs/feedback.md) into its weight, for the services
// that say `weights feedback`:
//
//	feedback {
//	    source snmp                   # snmp (each server's snmpd) | agent (each node's admin /load)
//	    interval 2s                   # poll period, 100ms..1m
//	    community file:/PATH          # snmp v2c: the community, or file:/PATH holding it (no default)
//	    v3 user=NAME auth=SHA:/PATH priv=AES:/PATH  # snmp v3 authPriv instead of v2c; passphrases in files
//	    port 161                      # snmp: snmpd's port on each server's address
//	    agent-port 9080               # agent: the node's admin port on each server's address
//	    ifname eth0                   # snmp: the interface measured (ifName); agent: the node's own choice
//	    bandwidth 100mbit             # link speed for equation 3 when the agent reports none (veths)
//	    cpu laload                    # laload (paper, equation 7) | cpuraw (busy share between polls)
//	    load-minutes 1                # x of laLoad_x: 1, 5 or 15
//	    floor 1                       # lowest weight the controller gives (and decays to)
//	    max 100                       # highest weight
//	    target 1                      # aggregate load steered to (1: LVS's 1 - load)
//	    dead-band 0.05
//	    smoothing 1                   # (0,1]; 1: off
//	    timeout 1s                    # per request
//	    source-addr 10.0.0.1          # address to poll from (agents often admit only the management net)
//	}
//
// and in a service:
//
//	weights feedback                  # config (default) | feedback

// feedbackKey stands for the feedback block in parse's bookkeeping of
// statements with errors (no service name has a NUL).
const feedbackKey = "\x00feedback"

// Feedback is the director's feedback block.
type Feedback struct {
	Line       int
	Source     string // snmp or agent
	Interval   time.Duration
	Version    string // snmp: 2c or 3
	Community  string // v2c community (read from CommunityFile when set)
	CommFile   string // file:/PATH of community
	User       string // v3
	AuthProto  string // v3: SHA, SHA224, SHA256, SHA384, SHA512, MD5
	AuthFile   string // v3: file holding the auth passphrase
	PrivProto  string // v3: AES, AES192, AES256, AES192C, AES256C, DES
	PrivFile   string // v3: file holding the priv passphrase
	Port       int    // snmpd's port
	AgentPort  int    // the node's admin port (/load)
	IfName     string // snmp: interface measured
	Bandwidth  uint64 // bit/s; 0: the agent's ifSpeed
	CPU        string // laload or cpuraw
	LoadMin    int    // 1, 5 or 15
	Floor, Max int
	Target     float64
	DeadBand   float64
	Smoothing  float64
	Timeout    time.Duration
	SourceAddr string // "" : the kernel's choice
}

// Feedback defaults (the controller's own defaults are in internal/feedback).
const (
	DefaultFeedbackInterval = 2 * time.Second
	DefaultSNMPPort         = 161
	DefaultAgentPort        = 9080 // node.DefaultAdminPort
)

// WeightsFrom are the values of a service's `weights`.
var WeightsFrom = []string{"config", "feedback"}

// feedbackSchedulers are the schedulers that read weights beyond zero or
// not: feedback with rr, lc or sh would poll for nothing.
var feedbackSchedulers = []string{"wrr", "wlc", "sed", "nq", "mh", "mwlc"}

// NewFeedback is a feedback block with every field at its default.
func NewFeedback() *Feedback {
	return &Feedback{Source: "snmp", Interval: DefaultFeedbackInterval, Version: "2c",
		Port: DefaultSNMPPort, AgentPort: DefaultAgentPort, IfName: "eth0", CPU: "laload", LoadMin: 1,
		Floor: 1, Max: 100, Target: 1, DeadBand: 0.05, Smoothing: 1, Timeout: time.Second}
}

// ParseBandwidth reads a link speed: a number with bit, kbit, mbit or gbit
// (tc's spelling), or a plain number of bit/s.
func ParseBandwidth(v string) (uint64, error) {
	s := strings.ToLower(v)
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		m      uint64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<63)/mult {
		return 0, fmt.Errorf("%q: want a link speed like 100mbit, 1gbit or 10000000 (bit/s)", v)
	}
	return n * mult, nil
}

// parseFeedback reads one statement of the feedback block into f.
func parseFeedback(f *Feedback, key string, args []string, errf func(format string, a ...any)) {
	if key == "v3" {
		parseV3(f, args, errf)
		return
	}
	if len(args) != 1 {
		errf("want exactly one value, got %d", len(args))
		return
	}
	v := args[0]
	num := func(lo, hi int) (int, bool) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			errf("%q: want %d..%d", v, lo, hi)
			return 0, false
		}
		return n, true
	}
	frac := func(lo, hi float64, loOpen bool) (float64, bool) {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x > hi || x < lo || (loOpen && x == lo) {
			l := "["
			if loOpen {
				l = "("
			}
			errf("%q: want a number in %s%g, %g]", v, l, lo, hi)
			return 0, false
		}
		return x, true
	}
	dur := func(lo, hi time.Duration) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		if err != nil || d < lo || d > hi {
			errf("%q: want a duration, %v..%v", v, lo, hi)
			return 0, false
		}
		return d, true
	}
	switch key {
	case "source":
		if v != "snmp" && v != "agent" {
			errf("%q: want snmp or agent", v)
			return
		}
		f.Source = v
	case "interval":
		if d, ok := dur(100*time.Millisecond, time.Minute); ok {
			f.Interval = d
		}
	case "timeout":
		if d, ok := dur(10*time.Millisecond, 30*time.Second); ok {
			f.Timeout = d
		}
	case "community":
		if p, ok := strings.CutPrefix(v, "file:"); ok {
			if !strings.HasPrefix(p, "/") {
				errf("%q: want file:/ABSOLUTE/PATH", v)
				return
			}
			f.CommFile, f.Community = p, ""
		} else {
			f.Community, f.CommFile = v, ""
		}
		f.Version = "2c"
	case "port", "agent-port":
		if n, ok := num(1, 65535); ok {
			if key == "port" {
				f.Port = n
			} else {
				f.AgentPort = n
			}
		}
	case "ifname":
		if len(v) > 64 {
			errf("%q: too long for an interface name", v)
			return
		}
		f.IfName = v
	case "bandwidth":
		bw, err := ParseBandwidth(v)
		if err != nil {
			errf("%v", err)
			return
		}
		f.Bandwidth = bw
	case "cpu":
		if v != "laload" && v != "cpuraw" {
			errf("%q: want laload or cpuraw", v)
			return
		}
		f.CPU = v
	case "load-minutes":
		if v != "1" && v != "5" && v != "15" {
			errf("%q: want 1, 5 or 15", v)
			return
		}
		f.LoadMin, _ = strconv.Atoi(v)
	case "floor", "max":
		if n, ok := num(1, 65535); ok {
			if key == "floor" {
				f.Floor = n
			} else {
				f.Max = n
			}
		}
	case "target":
		if x, ok := frac(0, 10, true); ok {
			f.Target = x
		}
	case "dead-band":
		if x, ok := frac(0, 1, false); ok {
			f.DeadBand = x
		}
	case "smoothing":
		if x, ok := frac(0, 1, true); ok {
			f.Smoothing = x
		}
	case "source-addr":
		a, err := netip.ParseAddr(v)
		if err != nil {
			errf("%q is not an address", v)
			return
		}
		f.SourceAddr = a.String()
	default:
		errf("unknown field (want source, interval, community, v3, port, agent-port, ifname, bandwidth, cpu, load-minutes, floor, max, target, dead-band, smoothing, timeout, source-addr)")
	}
}

var (
	authProtos = []string{"SHA", "SHA224", "SHA256", "SHA384", "SHA512", "MD5"}
	privProtos = []string{"AES", "AES192", "AES256", "AES192C", "AES256C", "DES"}
)

// parseV3: v3 user=NAME auth=PROTO:/FILE priv=PROTO:/FILE (authPriv only:
// the poller refuses weaker levels).
func parseV3(f *Feedback, args []string, errf func(format string, a ...any)) {
	var g Feedback
	for _, kv := range args {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			errf("%q: want key=value (user=NAME auth=SHA:/FILE priv=AES:/FILE)", kv)
			return
		}
		switch k {
		case "user":
			if v == "" || len(v) > 32 {
				errf("user %q: want 1..32 characters", v)
				return
			}
			g.User = v
		case "auth", "priv":
			proto, file, ok := strings.Cut(v, ":")
			list := authProtos
			if k == "priv" {
				list = privProtos
			}
			if !ok || !slices.Contains(list, strings.ToUpper(proto)) || !strings.HasPrefix(file, "/") {
				errf("%s %q: want PROTO:/FILE with PROTO one of %s (the passphrase is read from the file)", k, v, orList(list))
				return
			}
			if k == "auth" {
				g.AuthProto, g.AuthFile = strings.ToUpper(proto), file
			} else {
				g.PrivProto, g.PrivFile = strings.ToUpper(proto), file
			}
		default:
			errf("unknown option %q (want user, auth, priv)", k)
			return
		}
	}
	if g.User == "" || g.AuthFile == "" || g.PrivFile == "" {
		errf("want user=NAME auth=PROTO:/FILE priv=PROTO:/FILE (authPriv only)")
		return
	}
	f.Version, f.User, f.AuthProto, f.AuthFile, f.PrivProto, f.PrivFile = "3", g.User, g.AuthProto, g.AuthFile, g.PrivProto, g.PrivFile
}

// parseWeights reads a service's `weights` statement.
func parseWeights(s *Service, args []string, errf func(format string, a ...any)) {
	if len(args) != 1 || !slices.Contains(WeightsFrom, args[0]) {
		errf("want weights %s", strings.Join(WeightsFrom, "|"))
		return
	}
	s.Weights = args[0]
}

// validateFeedback checks the block and the services that use it.
func validateFeedback(d *Director) []placed {
	var out []placed
	f := d.Feedback
	if f != nil && f.Floor > f.Max {
		out = append(out, placed{&Error{File: d.File, Line: f.Line, Field: "feedback: floor",
			Msg: fmt.Sprintf("floor %d above max %d", f.Floor, f.Max)}, feedbackKey, "floor"})
	}
	for _, s := range d.Services {
		if s.Weights != "feedback" {
			continue
		}
		if f == nil {
			out = append(out, placed{&Error{File: d.File, Line: s.Line, Field: "service " + s.Name + ": weights",
				Msg: "feedback needs the director's feedback { } block (how to poll the servers)"}, s.Name, "weights"})
		}
		if !slices.Contains(feedbackSchedulers, s.Scheduler) {
			out = append(out, placed{&Error{File: d.File, Line: s.Line, Field: "service " + s.Name + ": weights",
				Msg: fmt.Sprintf("feedback with scheduler %s, which ignores weights: use %s", s.Scheduler, orList(feedbackSchedulers))}, s.Name, "scheduler"})
		}
	}
	return out
}

// formatFeedback writes the block, every field explicit.
func formatFeedback(b *strings.Builder, f *Feedback) {
	b.WriteString("\nfeedback {\n")
	fmt.Fprintf(b, "    source %s\n    interval %v\n", f.Source, f.Interval)
	switch {
	case f.Version == "3":
		fmt.Fprintf(b, "    v3 user=%s auth=%s:%s priv=%s:%s\n", f.User, f.AuthProto, f.AuthFile, f.PrivProto, f.PrivFile)
	case f.CommFile != "":
		fmt.Fprintf(b, "    community file:%s\n", f.CommFile)
	case f.Community != "":
		fmt.Fprintf(b, "    community %s\n", f.Community)
	}
	fmt.Fprintf(b, "    port %d\n    agent-port %d\n    ifname %s\n", f.Port, f.AgentPort, f.IfName)
	if f.Bandwidth > 0 {
		fmt.Fprintf(b, "    bandwidth %d\n", f.Bandwidth)
	}
	fmt.Fprintf(b, "    cpu %s\n    load-minutes %d\n    floor %d\n    max %d\n", f.CPU, f.LoadMin, f.Floor, f.Max)
	fmt.Fprintf(b, "    target %g\n    dead-band %g\n    smoothing %g\n    timeout %v\n", f.Target, f.DeadBand, f.Smoothing, f.Timeout)
	if f.SourceAddr != "" {
		fmt.Fprintf(b, "    source-addr %s\n", f.SourceAddr)
	}
	b.WriteString("}\n")
}
