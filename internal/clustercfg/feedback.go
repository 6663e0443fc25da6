package clustercfg

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

// The feedback section is the director's feedback { } block
// (internal/config/feedback.go) in the cluster configuration: the station
// runs the monitor (internal/mgmt/feedback.go) and hands the weights to
// the directors, so a joined director's view never carries the block (it
// would poll the servers a second time).

// feedbackSchedulers are the schedulers that read weights (as
// internal/config's list: feedback with rr, lc or sh polls for nothing).
var feedbackSchedulers = []string{"wrr", "wlc", "sed", "nq", "mh", "mwlc"}

var (
	fbAuthProtos = []string{"SHA", "SHA224", "SHA256", "SHA384", "SHA512", "MD5"}
	fbPrivProtos = []string{"AES", "AES192", "AES256", "AES192C", "AES256C", "DES"}
)

// feedback checks the section and the services that use it.
func (k *checker) feedback() {
	c := k.c
	if f := c.Feedback; f != nil {
		p := "feedback"
		k.enum(p+".source", f.Source, enums["Feedback.source"]...)
		k.enum(p+".snmp-version", f.SNMPVersion, enums["Feedback.snmp-version"]...)
		k.enum(p+".cpu", f.CPU, enums["Feedback.cpu"]...)
		k.enum(p+".v3-auth-proto", f.V3AuthProto, enums["Feedback.v3-auth-proto"]...)
		k.enum(p+".v3-priv-proto", f.V3PrivProto, enums["Feedback.v3-priv-proto"]...)
		dur := func(field, v string, lo, hi time.Duration) {
			if v == "" {
				return
			}
			if d, err := time.ParseDuration(v); err != nil || d < lo || d > hi {
				k.bad(p+"."+field, "%q: want a duration, %v..%v", clip(v), lo, hi)
			}
		}
		dur("interval", f.Interval, 100*time.Millisecond, time.Minute)
		dur("timeout", f.Timeout, 10*time.Millisecond, 30*time.Second)
		if f.Target < 0 || f.Target > 10 {
			k.bad(p+".target", "%g: want a number in (0, 10]", f.Target)
		}
		if f.Smoothing < 0 || f.Smoothing > 1 {
			k.bad(p+".smoothing", "%g: want a number in (0, 1]", f.Smoothing)
		}
		if f.DeadBand != nil && (*f.DeadBand < 0 || *f.DeadBand > 1) {
			k.bad(p+".dead-band", "%g: want a number in [0, 1]", *f.DeadBand)
		}
		for _, w := range []struct {
			field string
			v     int
		}{{"floor", f.Floor}, {"max", f.Max}} {
			if w.v < 0 || w.v > 65535 {
				k.bad(p+"."+w.field, "%d: want a weight 1..65535", w.v)
			}
		}
		if fl, mx := or(f.Floor, 1), or(f.Max, 100); fl > mx && f.Floor <= 65535 && f.Max <= 65535 {
			k.bad(p+".floor", "floor %d above max %d", fl, mx)
		}
		k.port(p+".port", f.Port, true)
		k.port(p+".agent-port", f.AgentPort, true)
		if f.LoadMinutes != 0 && f.LoadMinutes != 1 && f.LoadMinutes != 5 && f.LoadMinutes != 15 {
			k.bad(p+".load-minutes", "%d: want 1, 5 or 15", f.LoadMinutes)
		}
		if len(f.IfName) > 64 {
			k.bad(p+".ifname", "%q: too long for an interface name", clip(f.IfName))
		}
		if f.Bandwidth != "" {
			if _, err := config.ParseBandwidth(f.Bandwidth); err != nil {
				k.bad(p+".bandwidth", "%v", err)
			}
		}
		if f.SourceAddr != "" {
			if _, err := netip.ParseAddr(f.SourceAddr); err != nil {
				k.bad(p+".source-addr", "%q is not an address", clip(f.SourceAddr))
			}
		}
		for _, fp := range []struct{ field, v string }{{"community-file", f.CommunityFile}, {"v3-auth-file", f.V3AuthFile}, {"v3-priv-file", f.V3PrivFile}} {
			k.absPath(p+"."+fp.field, fp.v)
		}
		if f.Community != "" && f.CommunityFile != "" {
			k.bad(p+".community-file", "community and community-file exclude each other")
		}
		v3 := f.V3User != "" || f.V3AuthProto != "" || f.V3AuthFile != "" || f.V3PrivProto != "" || f.V3PrivFile != ""
		switch {
		case f.SNMPVersion == "3" && (f.V3User == "" || f.V3AuthProto == "" || f.V3AuthFile == "" || f.V3PrivProto == "" || f.V3PrivFile == ""):
			k.bad(p+".snmp-version", "3 needs v3-user, v3-auth-proto, v3-auth-file, v3-priv-proto and v3-priv-file (authPriv only)")
		case f.SNMPVersion != "3" && v3:
			k.bad(p+".snmp-version", "the v3 fields are set: say snmp-version: 3")
		case f.SNMPVersion == "3" && (f.Community != "" || f.CommunityFile != ""):
			k.bad(p+".community", "a community is v2c's: not with snmp-version 3")
		}
		if len(f.V3User) > 32 {
			k.bad(p+".v3-user", "%q: want 1..32 characters", clip(f.V3User))
		}
	}
	for i, s := range c.Services {
		p := fmt.Sprintf("services[%d].weights", i)
		if !k.enum(p, s.Weights, enums["Service.weights"]...) || s.Weights != "feedback" {
			continue
		}
		if c.Feedback == nil {
			k.bad(p, "feedback needs the feedback section (how the station polls the servers)")
		}
		if sc := or(s.Scheduler, "wlc"); !slices.Contains(feedbackSchedulers, sc) {
			k.bad(p, "feedback with scheduler %s, which ignores weights: use %s", sc, orList(feedbackSchedulers))
		}
	}
}

// FeedbackView is the feedback section as the director's block
// (config.Feedback, every default filled in): what the station's monitor
// runs with. nil when c has no feedback section. c is validated.
func FeedbackView(c *Config) (*config.Feedback, error) {
	f := c.Feedback
	if f == nil {
		return nil, nil
	}
	o := config.NewFeedback()
	o.Source = or(f.Source, o.Source)
	var err error
	if o.Interval, err = dur(f.Interval, o.Interval); err != nil {
		return nil, fmt.Errorf("feedback.interval: %w", err)
	}
	if o.Timeout, err = dur(f.Timeout, o.Timeout); err != nil {
		return nil, fmt.Errorf("feedback.timeout: %w", err)
	}
	o.Target = or(f.Target, o.Target)
	o.Floor, o.Max = or(f.Floor, o.Floor), or(f.Max, o.Max)
	o.Smoothing = or(f.Smoothing, o.Smoothing)
	if f.DeadBand != nil {
		o.DeadBand = *f.DeadBand
	}
	o.Port, o.AgentPort = or(f.Port, o.Port), or(f.AgentPort, o.AgentPort)
	o.IfName, o.CPU, o.LoadMin = or(f.IfName, o.IfName), or(f.CPU, o.CPU), or(f.LoadMinutes, o.LoadMin)
	if f.Bandwidth != "" {
		if o.Bandwidth, err = config.ParseBandwidth(f.Bandwidth); err != nil {
			return nil, fmt.Errorf("feedback.bandwidth: %w", err)
		}
	}
	o.SourceAddr = f.SourceAddr
	if f.SNMPVersion == "3" {
		o.Version = "3" // Community stays at its default, unused, as in the director's block
		o.User, o.AuthProto, o.AuthFile = f.V3User, strings.ToUpper(f.V3AuthProto), f.V3AuthFile
		o.PrivProto, o.PrivFile = strings.ToUpper(f.V3PrivProto), f.V3PrivFile
	} else if f.CommunityFile != "" {
		o.CommFile, o.Community = f.CommunityFile, ""
	} else {
		o.Community = or(f.Community, o.Community)
	}
	return o, nil
}

// FeedbackServer is one server the station's monitor polls.
type FeedbackServer struct {
	Addr string // ip:port, as the directors' pools have it
	// Load is the node's admin address (ip:port) for the agent source
	// when the server is on a node whose admin is set; "": the server's
	// IP at the section's agent-port.
	Load string
}

// FeedbackPools are the services with weights feedback and the servers
// each resolves to: its explicit servers or its cluster's nodes, as the
// directors' views have them, less those at weight 0 (configured so, or
// on a node in drained): a feedback weight would override their 0, and a
// drain must win. c is validated.
func FeedbackPools(c *Config, drained []string) (map[string][]FeedbackServer, error) {
	out := map[string][]FeedbackServer{}
	var errs []error
	for i := range c.Services {
		s := &c.Services[i]
		if s.Weights != "feedback" {
			continue
		}
		o, err := serviceView(c, s, drained)
		if err != nil {
			errs = append(errs, fmt.Errorf("services[%d] (%s): %w", i, s.Name, err))
			continue
		}
		servers := []FeedbackServer{}
		for _, r := range o.Servers {
			if r.Weight == 0 {
				continue
			}
			fs := FeedbackServer{Addr: r.Addr.String()}
			if n := serverNode(c, fs.Addr); n != "" {
				for _, nd := range c.Nodes {
					if nd.Name == n {
						fs.Load = nd.Admin
					}
				}
			}
			servers = append(servers, fs)
		}
		out[s.Name] = servers
	}
	return out, errors.Join(errs...)
}

// importFeedback is director.conf's feedback block as the section, the
// fields at their defaults left out (nil: no block).
func importFeedback(f *config.Feedback) *Feedback {
	if f == nil {
		return nil
	}
	def := config.NewFeedback()
	o := &Feedback{}
	str := func(v, dflt string) string {
		if v == dflt {
			return ""
		}
		return v
	}
	num := func(v, dflt int) int {
		if v == dflt {
			return 0
		}
		return v
	}
	o.Source = str(f.Source, def.Source)
	if f.Interval != def.Interval {
		o.Interval = f.Interval.String()
	}
	if f.Timeout != def.Timeout {
		o.Timeout = f.Timeout.String()
	}
	if f.Target != def.Target {
		o.Target = f.Target
	}
	if f.Smoothing != def.Smoothing {
		o.Smoothing = f.Smoothing
	}
	if f.DeadBand != def.DeadBand {
		db := f.DeadBand
		o.DeadBand = &db
	}
	o.Floor, o.Max = num(f.Floor, def.Floor), num(f.Max, def.Max)
	o.Port, o.AgentPort = num(f.Port, def.Port), num(f.AgentPort, def.AgentPort)
	o.IfName, o.CPU = str(f.IfName, def.IfName), str(f.CPU, def.CPU)
	o.LoadMinutes = num(f.LoadMin, def.LoadMin)
	if f.Bandwidth != 0 {
		o.Bandwidth = fmt.Sprint(f.Bandwidth)
	}
	o.SourceAddr = f.SourceAddr
	switch {
	case f.Version == "3":
		o.SNMPVersion, o.V3User = "3", f.User
		o.V3AuthProto, o.V3AuthFile, o.V3PrivProto, o.V3PrivFile = f.AuthProto, f.AuthFile, f.PrivProto, f.PrivFile
	case f.CommFile != "":
		o.CommunityFile = f.CommFile
	default:
		o.Community = str(f.Community, def.Community)
	}
	return o
}
