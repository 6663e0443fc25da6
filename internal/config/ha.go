package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The ha block makes the director one of a group (internal/ha, docs/ha.md):
//
//	ha {
//	    group web                     # the VIP set's name; required
//	    name d1                       # this director in the group (default: the host name)
//	    mode active-standby           # active-standby | active-active
//	    priority 100                  # 1..255: the highest in-sync director takes the VIPs back
//	    etcd http://10.0.0.5:2379     # the station's etcd client URLs (one or more); required
//	    etcd-ca /etc/corral/ca.pem    # client TLS for etcd: all three or none
//	    etcd-cert /etc/corral/d1.pem
//	    etcd-key /etc/corral/d1.key
//	    sync 10.0.0.11:7700           # where peers' connection streams come (the director's link); required
//	    key-file /etc/corral/ha.key   # the group's shared secret, 16+ bytes, mode 0600; required
//	    lease-ttl 2s                  # the election lease: whole seconds, 1s..60s
//	}

// haKey stands for the ha block in parse's and validate's bookkeeping of
// statements with errors (a service cannot have this name: names have no
// NUL).
const haKey = "\x00ha"

// HA defaults.
const (
	DefaultHAMode     = "active-standby"
	DefaultHAPriority = 100
	DefaultLeaseTTL   = 2 * time.Second
)

// HAModes are the values of `mode`.
var HAModes = []string{"active-standby", "active-active"}

// NewHA is an ha block with every field at its default.
func NewHA() *HA {
	return &HA{Mode: DefaultHAMode, Priority: DefaultHAPriority, LeaseTTL: DefaultLeaseTTL}
}

// validName is a group's or director's name: it becomes part of etcd keys
// (/corral/ha/GROUP/members/NAME), so no slashes or spaces.
func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// checkEtcdURL says what is wrong with one etcd client URL, or "".
func checkEtcdURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
		return fmt.Sprintf("%q: want a client URL like http://10.0.0.5:2379 or https://10.0.0.5:2379", v)
	}
	return ""
}

// checkLeaseTTL says what is wrong with a lease TTL, or "": etcd leases
// are granted in whole seconds.
func checkLeaseTTL(d time.Duration) string {
	if d < time.Second || d > 60*time.Second || d%time.Second != 0 {
		return "want whole seconds, 1s..60s"
	}
	return ""
}

// parseHA reads one statement of the ha block into h; errf reports a
// mistake in it (with the line and field).
func parseHA(h *HA, key string, args []string, errf func(format string, a ...any)) {
	one := func() (string, bool) {
		if len(args) != 1 {
			errf("want exactly one value, got %d", len(args))
			return "", false
		}
		return args[0], true
	}
	switch key {
	case "etcd":
		if len(args) == 0 {
			errf("want one or more client URLs (http://HOST:PORT)")
			return
		}
		for _, v := range args {
			if msg := checkEtcdURL(v); msg != "" {
				errf("%s", msg)
				return
			}
		}
		h.Etcd = append([]string(nil), args...)
	case "group", "name", "mode", "priority", "etcd-ca", "etcd-cert", "etcd-key", "sync", "key-file", "lease-ttl":
		v, ok := one()
		if !ok {
			return
		}
		switch key {
		case "group", "name":
			if !validName(v) {
				errf("%q: want 1..63 letters, digits, '-', '_' or '.' (it is part of etcd keys)", v)
				return
			}
			if key == "group" {
				h.Group = v
			} else {
				h.Name = v
			}
		case "mode":
			if v != "active-standby" && v != "active-active" {
				errf("%q: want %s", v, orList(HAModes))
				return
			}
			h.Mode = v
		case "priority":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 255 {
				errf("%q: want 1..255", v)
				return
			}
			h.Priority = n
		case "etcd-ca", "etcd-cert", "etcd-key", "key-file":
			if !strings.HasPrefix(v, "/") {
				errf("%q: want an absolute path (the director may run from any directory)", v)
				return
			}
			switch key {
			case "etcd-ca":
				h.EtcdCA = v
			case "etcd-cert":
				h.EtcdCert = v
			case "etcd-key":
				h.EtcdKey = v
			case "key-file":
				h.KeyFile = v
			}
		case "sync":
			ap, err := netip.ParseAddrPort(v)
			if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
				errf("%q: want the address:port on the director's link where peers connect (like 10.0.0.11:7700)", v)
				return
			}
			h.Sync = v
		case "lease-ttl":
			d, err := time.ParseDuration(v)
			if err != nil {
				errf("%q is not a duration (like 2s)", v)
				return
			}
			if msg := checkLeaseTTL(d); msg != "" {
				errf("%q: %s", v, msg)
				return
			}
			h.LeaseTTL = d
		}
	default:
		errf("unknown field (want group, name, mode, priority, etcd, etcd-ca, etcd-cert, etcd-key, sync, key-file, lease-ttl)")
	}
}

// validateHA checks the ha block as a whole and against the services.
func validateHA(d *Director) []placed {
	h := d.HA
	if h == nil {
		return nil
	}
	var out []placed
	errf := func(line int, key, format string, a ...any) {
		out = append(out, placed{&Error{File: d.File, Line: line, Field: "ha: " + key, Msg: fmt.Sprintf(format, a...)}, haKey, key})
	}
	if h.Group == "" {
		errf(h.Line, "group", "missing: name the VIP set the directors share (group web)")
	} else if !validName(h.Group) {
		errf(h.Line, "group", "%q: want 1..63 letters, digits, '-', '_' or '.'", h.Group)
	}
	if h.Name != "" && !validName(h.Name) {
		errf(h.Line, "name", "%q: want 1..63 letters, digits, '-', '_' or '.'", h.Name)
	}
	if h.Mode != "active-standby" && h.Mode != "active-active" {
		errf(h.Line, "mode", "%q: want %s", h.Mode, orList(HAModes))
	}
	if h.Priority < 1 || h.Priority > 255 {
		errf(h.Line, "priority", "%d: want 1..255", h.Priority)
	}
	if len(h.Etcd) == 0 {
		errf(h.Line, "etcd", "missing: the station's etcd client URLs (etcd http://10.0.0.5:2379)")
	}
	for _, u := range h.Etcd {
		if msg := checkEtcdURL(u); msg != "" {
			errf(h.Line, "etcd", "%s", msg)
		}
	}
	if n := btoi(h.EtcdCA != "") + btoi(h.EtcdCert != "") + btoi(h.EtcdKey != ""); n != 0 && n != 3 {
		errf(h.Line, "etcd-ca", "etcd-ca, etcd-cert and etcd-key go together: give all three (client TLS) or none")
	}
	if h.Sync == "" {
		errf(h.Line, "sync", "missing: the address:port peers stream connections to (sync 10.0.0.11:7700)")
	}
	if h.KeyFile == "" {
		errf(h.Line, "key-file", "missing: the group's shared secret (key-file /etc/corral/ha.key, 16+ bytes, mode 0600)")
	}
	if msg := checkLeaseTTL(h.LeaseTTL); msg != "" {
		errf(h.Line, "lease-ttl", "%v: %s", h.LeaseTTL, msg)
	}
	if d.Interface == "" {
		errf(h.Line, "interface", "ha needs the director's 'interface NAME': the XDP program there answers ARP for the VIPs and forwards")
	}
	for _, s := range d.Services {
		if s.Dataplane != "xdp" {
			out = append(out, placed{&Error{File: d.File, Line: s.Line, Field: "ha",
				Msg: fmt.Sprintf("service %s uses dataplane %s; the connection table that HA syncs lives in the XDP program: use dataplane xdp", s.Name, s.Dataplane)},
				s.Name, "dataplane"})
		}
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// formatHA writes the ha block, every field explicit but name and the
// TLS files when unset.
func formatHA(b *strings.Builder, h *HA) {
	b.WriteString("\nha {\n")
	fmt.Fprintf(b, "    group %s\n", h.Group)
	if h.Name != "" {
		fmt.Fprintf(b, "    name %s\n", h.Name)
	}
	fmt.Fprintf(b, "    mode %s\n    priority %d\n", h.Mode, h.Priority)
	if len(h.Etcd) > 0 {
		fmt.Fprintf(b, "    etcd %s\n", strings.Join(h.Etcd, " "))
	}
	if h.EtcdCA != "" {
		fmt.Fprintf(b, "    etcd-ca %s\n", h.EtcdCA)
	}
	if h.EtcdCert != "" {
		fmt.Fprintf(b, "    etcd-cert %s\n", h.EtcdCert)
	}
	if h.EtcdKey != "" {
		fmt.Fprintf(b, "    etcd-key %s\n", h.EtcdKey)
	}
	if h.Sync != "" {
		fmt.Fprintf(b, "    sync %s\n", h.Sync)
	}
	if h.KeyFile != "" {
		fmt.Fprintf(b, "    key-file %s\n", h.KeyFile)
	}
	fmt.Fprintf(b, "    lease-ttl %v\n}\n", h.LeaseTTL)
}

// SameHA reports whether two ha blocks configure the same thing (their
// lines aside): a reload may not change the block.
func SameHA(a, b *HA) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	x, y := *a, *b
	x.Line, y.Line = 0, 0
	return x.Group == y.Group && x.Name == y.Name && x.Mode == y.Mode && x.Priority == y.Priority &&
		strings.Join(x.Etcd, " ") == strings.Join(y.Etcd, " ") && x.EtcdCA == y.EtcdCA && x.EtcdCert == y.EtcdCert &&
		x.EtcdKey == y.EtcdKey && x.Sync == y.Sync && x.KeyFile == y.KeyFile && x.LeaseTTL == y.LeaseTTL
}
