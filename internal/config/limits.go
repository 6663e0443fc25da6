package config

import (
	"fmt"
	"strconv"
	"time"
)

// The l4 dataplane's flow limits: each TCP connection holds two sockets and
// a goroutine, each UDP flow a socket and a goroutine, so a flood of new
// sources, or of idle connections, must meet a cap.
//
//	max-conns 10000               # l4: TCP connections / UDP flows of the service at most
//	max-conns-per-source 1000     # l4: of one client address at most

// DefaultMaxConns is an l4 service's cap on live flows (TCP connections and
// UDP flows): of the order of HAProxy's maxconn, and 20,000 descriptors at
// most per TCP service.
const DefaultMaxConns = 10000

// DefaultMaxConnsPerSource is the cap on one client address's live flows:
// a tenth of the service, so that one source (or one NAT) cannot take it
// all.
const DefaultMaxConnsPerSource = 1000

// MaxConnsLimit bounds max-conns and max-conns-per-source.
const MaxConnsLimit = 1 << 20

// ConnLimits is a service's effective l4 caps: the configured ones, or the
// defaults for those not set (0); the per-source default never exceeds the
// service's cap.
func (s *Service) ConnLimits() (perService, perSource int) {
	perService = s.MaxConns
	if perService <= 0 {
		perService = DefaultMaxConns
	}
	perSource = s.MaxConnsPerSource
	if perSource <= 0 {
		perSource = min(DefaultMaxConnsPerSource, perService)
	}
	return perService, perSource
}

// L4Timeouts is a service's idle timeouts as the l4 dataplane applies them,
// with the XDP dataplane's rules: none set at all means IPVS's defaults
// (900 s, 120 s, 300 s), and each is whole seconds, at least one.
func (s *Service) L4Timeouts() (tcp, tcpFin, udp time.Duration) {
	if s.TCPTimeout == 0 && s.TCPFinTimeout == 0 && s.UDPTimeout == 0 {
		return 900 * time.Second, 120 * time.Second, 300 * time.Second
	}
	sec := func(t time.Duration) time.Duration {
		return max(time.Second, (t+time.Second-1)/time.Second*time.Second)
	}
	return sec(s.TCPTimeout), sec(s.TCPFinTimeout), sec(s.UDPTimeout)
}

// CheckConnLimit checks the value of max-conns or max-conns-per-source
// (1..MaxConnsLimit); the station's cluster configuration checks its
// fields of the same names with it, so both say the same.
func CheckConnLimit(n int) error {
	if n < 1 || n > MaxConnsLimit {
		return fmt.Errorf("want 1..%d connections", MaxConnsLimit)
	}
	return nil
}

// CheckConnLimits checks the two caps against each other (0: not given).
func CheckConnLimits(perService, perSource int) error {
	if perService > 0 && perSource > perService {
		return fmt.Errorf("max-conns-per-source %d: want at most max-conns (%d)", perSource, perService)
	}
	if perService == 0 && perSource > DefaultMaxConns {
		return fmt.Errorf("max-conns-per-source %d: want at most max-conns (%d by default)", perSource, DefaultMaxConns)
	}
	return nil
}

// parseServiceLimits reads max-conns and max-conns-per-source; false if
// key is neither.
func parseServiceLimits(svc *Service, key string, args []string, line int, errf func(format string, a ...any)) bool {
	if key != "max-conns" && key != "max-conns-per-source" {
		return false
	}
	if len(args) != 1 {
		errf("want exactly one value, got %d", len(args))
		return true
	}
	n, err := strconv.Atoi(args[0])
	if err == nil {
		err = CheckConnLimit(n)
	} else {
		err = CheckConnLimit(0) // its "want" says what a number would be
	}
	if err != nil {
		errf("%q: %v", args[0], err)
		return true
	}
	if key == "max-conns" {
		svc.MaxConns = n
	} else {
		svc.MaxConnsPerSource = n
	}
	if svc.LimitsLine == 0 {
		svc.LimitsLine = line
	}
	return true
}

// validateLimits checks the services' l4 caps.
func validateLimits(d *Director) []placed {
	var out []placed
	for i := range d.Services {
		s := &d.Services[i]
		line := s.LimitsLine
		if line == 0 {
			line = s.Line
		}
		errf := func(key, format string, a ...any) {
			out = append(out, placed{&Error{File: d.File, Line: line, Field: "service " + s.Name + ": " + key, Msg: fmt.Sprintf(format, a...)}, s.Name, key})
		}
		for _, f := range []struct {
			key string
			n   int
		}{{"max-conns", s.MaxConns}, {"max-conns-per-source", s.MaxConnsPerSource}} {
			if f.n != 0 {
				if err := CheckConnLimit(f.n); err != nil {
					errf(f.key, "%d: %v", f.n, err)
				}
			}
		}
		if err := CheckConnLimits(s.MaxConns, s.MaxConnsPerSource); err != nil {
			errf("max-conns-per-source", "%v", err)
		}
		if s.LimitsLine != 0 && s.Dataplane != "l4" {
			key := "max-conns"
			if s.MaxConns == 0 {
				key = "max-conns-per-source"
			}
			errf(key, "only the l4 dataplane has it (this service is %s)", s.Dataplane)
		}
	}
	return out
}
