// Package testbed builds a lab of hosts on one machine, as the papers' 100
// Mbit/s PC clusters: each host a network namespace with one veth into a
// shared bridge, its link shaped in both directions with tc htb. Commands run
// in a host with nsenter --net (keeping the machine's mount namespace, so a
// FUSE mount made in a host is visible outside). Everything a bed creates is
// named after it and recorded in /run/corral-testbed/NAME.json, so Down
// removes it all — also after a failed Up.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StateDir holds each bed's description.
const StateDir = "/run/corral-testbed"

// Host is one machine of the lab.
type Host struct {
	Name string     `json:"name"`
	Addr netip.Addr `json:"addr"`
	// Rate shapes the host's link both ways ("100mbit", "1gbit"; "" for
	// none).
	Rate string `json:"rate,omitempty"`
	// TopRate, with Rate, splits the shaped link into two priority bands
	// (htb, docs/qos.md "The class on the wire"): packets marked DSCP EF
	// (the node's top QoS class) get a band guaranteed TopRate at htb
	// priority 0, everything else the rest at priority 1; each may borrow
	// up to Rate, the two together never more. "": one band, as before.
	TopRate string `json:"top_rate,omitempty"`
}

// Spec describes a bed.
type Spec struct {
	// Name prefixes every namespace, link and file (at most 8 characters:
	// interface names are short).
	Name   string       `json:"name"`
	Subnet netip.Prefix `json:"subnet"`
	Hosts  []Host       `json:"hosts"`
}

var nameRe = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)
var hostRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
var rateRe = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$`)

// NewSpec lays out hosts on 10.77.0.0/24 from .10 up, all at rate.
func NewSpec(name string, hosts []string, rate string) Spec {
	return NewSpecOn(name, netip.MustParsePrefix("10.77.0.0/24"), hosts, rate)
}

// NewSpecOn lays out hosts on an IPv4 subnet (a /24, or a /25 for a small
// bed) from its tenth address up: beds that exist at the same time (tests
// of different packages) need different subnets.
func NewSpecOn(name string, subnet netip.Prefix, hosts []string, rate string) Spec {
	s := Spec{Name: name, Subnet: subnet.Masked()}
	base := s.Subnet.Addr().As4()
	for i, h := range hosts {
		a := base
		a[3] = base[3] + byte(10+i)
		s.Hosts = append(s.Hosts, Host{Name: h, Addr: netip.AddrFrom4(a), Rate: rate})
	}
	return s
}

// Validate reports what is wrong with a spec.
func (s Spec) Validate() error {
	if !nameRe.MatchString(s.Name) {
		return fmt.Errorf("test bed name %q: want 1-8 lower-case letters and digits, starting with a letter", s.Name)
	}
	if len(s.Hosts) == 0 || len(s.Hosts) > 200 {
		return fmt.Errorf("want 1..200 hosts, got %d", len(s.Hosts))
	}
	seen := map[string]bool{}
	for _, h := range s.Hosts {
		if !hostRe.MatchString(h.Name) {
			return fmt.Errorf("host name %q: want lower-case letters, digits and '-'", h.Name)
		}
		if seen[h.Name] || seen[h.Addr.String()] {
			return fmt.Errorf("host %s or address %s given twice", h.Name, h.Addr)
		}
		seen[h.Name], seen[h.Addr.String()] = true, true
		if !s.Subnet.Contains(h.Addr) || h.Addr == s.Subnet.Masked().Addr().Next() {
			return fmt.Errorf("host %s: %s is outside %s", h.Name, h.Addr, s.Subnet)
		}
		if h.Rate != "" && !rateRe.MatchString(h.Rate) {
			return fmt.Errorf("host %s: rate %q: want a tc rate like 100mbit or 1gbit", h.Name, h.Rate)
		}
		if h.TopRate != "" {
			top, total := rateBits(h.TopRate), rateBits(h.Rate)
			if !rateRe.MatchString(h.TopRate) || total == 0 || top == 0 || top >= total {
				return fmt.Errorf("host %s: top rate %q: want a whole tc rate (like 10mbit) below the host's rate %q", h.Name, h.TopRate, h.Rate)
			}
		}
	}
	return nil
}

// Bed is a built lab.
type Bed struct{ Spec }

// Netns is the namespace of host h.
func (b *Bed) Netns(h string) string { return b.Name + "-" + h }

func (b *Bed) bridge() string { return b.Name + "-br" }

// Gateway is the machine's own address on the bed (the subnet's first).
func (b *Bed) Gateway() netip.Addr { return b.Subnet.Masked().Addr().Next() }

// veth is the root side of host i's link.
func (b *Bed) veth(i int) string { return fmt.Sprintf("%s-%d", b.Name, i) }

// Host returns the named host.
func (b *Bed) Host(name string) (Host, error) {
	for _, h := range b.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	names := make([]string, len(b.Hosts))
	for i, h := range b.Hosts {
		names[i] = h.Name
	}
	return Host{}, fmt.Errorf("test bed %s has no host %q (hosts: %s)", b.Name, name, strings.Join(names, ", "))
}

// HostAddr is the address of host h.
func (b *Bed) HostAddr(h string) (string, error) {
	x, err := b.Host(h)
	return x.Addr.String(), err
}

// Command runs args in host h's network namespace.
func (b *Bed) Command(ctx context.Context, h string, args ...string) (*exec.Cmd, error) {
	if _, err := b.Host(h); err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + b.Netns(h), "--"}, args...)...), nil
}

// Wrap is the command prefix that runs a program in host h.
func (b *Bed) Wrap(h string) []string {
	return []string{"nsenter", "--net=/run/netns/" + b.Netns(h), "--"}
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CheckRoot says why the test bed cannot be built here, if it cannot.
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the test bed needs root (network namespaces, veth, bridge, tc)")
	}
	for _, p := range []string{"ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("the test bed needs %s (Debian: iproute2, util-linux)", p)
		}
	}
	return nil
}

func statePath(name string) string { return filepath.Join(StateDir, name+".json") }

// Up builds the bed, or completes one partly built; it is idempotent. On
// failure everything made so far is removed.
func Up(s Spec) (*Bed, error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if old, err := Load(s.Name); err == nil && !sameSpec(old.Spec, s) {
		return nil, fmt.Errorf("test bed %s exists with other hosts or rates; run 'corral testbed down --name %s' first", s.Name, s.Name)
	}
	b := &Bed{s}
	// Record first, so that Down finds what a failed Up leaves.
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, err
	}
	data, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(statePath(s.Name), data, 0o644); err != nil {
		return nil, err
	}
	if err := b.build(); err != nil {
		if derr := Down(s.Name); derr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, derr)
		}
		return nil, err
	}
	return b, nil
}

func sameSpec(a, b Spec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

func nsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

func (b *Bed) build() error {
	if !linkExists(b.bridge()) {
		if err := run("ip", "link", "add", b.bridge(), "type", "bridge"); err != nil {
			return err
		}
	}
	bits := b.Subnet.Bits()
	// The machine itself is the subnet's first address: the operator's
	// seat (uploads, checks), outside every shaped link.
	if err := run("ip", "addr", "replace", fmt.Sprintf("%s/%d", b.Gateway(), bits), "dev", b.bridge()); err != nil {
		return err
	}
	if err := run("ip", "link", "set", b.bridge(), "up"); err != nil {
		return err
	}
	for i, h := range b.Hosts {
		ns, veth := b.Netns(h.Name), b.veth(i)
		if !nsExists(ns) {
			if err := run("ip", "netns", "add", ns); err != nil {
				return err
			}
		}
		inNS := func(args ...string) error { return run(append([]string{"ip", "netns", "exec", ns}, args...)...) }
		if !linkExists(veth) {
			// A half-made host: start its link afresh.
			inNS("ip", "link", "del", "eth0")
			if err := run("ip", "link", "add", veth, "type", "veth", "peer", "name", veth+"p"); err != nil {
				return err
			}
			if err := run("ip", "link", "set", veth+"p", "netns", ns); err != nil {
				return err
			}
			if err := inNS("ip", "link", "set", veth+"p", "name", "eth0"); err != nil {
				return err
			}
		}
		steps := [][]string{
			{"ip", "link", "set", veth, "master", b.bridge()},
			{"ip", "link", "set", veth, "up"},
		}
		for _, st := range steps {
			if err := run(st...); err != nil {
				return err
			}
		}
		for _, st := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "addr", "replace", fmt.Sprintf("%s/%d", h.Addr, bits), "dev", "eth0"},
			{"ip", "link", "set", "eth0", "up"},
		} {
			if err := inNS(st...); err != nil {
				return err
			}
		}
		if err := b.shape(i, h); err != nil {
			return err
		}
	}
	return nil
}

// shape limits host i's link both ways: egress of eth0 inside the host
// (what it sends) and egress of its bridge port (what it receives).
func (b *Bed) shape(i int, h Host) error {
	ns := b.Netns(h.Name)
	devs := [][]string{{"ip", "netns", "exec", ns, "tc"}, {"tc"}}
	names := []string{"eth0", b.veth(i)}
	for k, pre := range devs {
		tc := func(args ...string) error { return run(append(append([]string{}, pre...), args...)...) }
		dev := names[k]
		exec.Command(pre[0], append(pre[1:], "qdisc", "del", "dev", dev, "root")...).Run()
		if h.Rate == "" {
			continue
		}
		// htb, not tbf: veths pass 64 KiB GSO packets, which a tbf with
		// a smaller burst would drop.
		if err := tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"); err != nil {
			return err
		}
		if h.TopRate == "" {
			if err := tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", h.Rate, "ceil", h.Rate, "burst", "64k", "cburst", "64k"); err != nil {
				return err
			}
			continue
		}
		// Two bands under one parent at the link's rate: EF (the top
		// QoS class, DSCP 46: TOS 0xb8) to 1:20, guaranteed TopRate and
		// served first (prio 0); the rest to 1:10 (the default).
		be := fmt.Sprintf("%dbit", rateBits(h.Rate)-rateBits(h.TopRate))
		for _, args := range [][]string{
			{"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", h.Rate, "ceil", h.Rate, "burst", "64k", "cburst", "64k"},
			{"class", "add", "dev", dev, "parent", "1:1", "classid", "1:20", "htb", "rate", h.TopRate, "ceil", h.Rate, "burst", "64k", "cburst", "64k", "prio", "0"},
			{"class", "add", "dev", dev, "parent", "1:1", "classid", "1:10", "htb", "rate", be, "ceil", h.Rate, "burst", "64k", "cburst", "64k", "prio", "1"},
			{"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "tos", "0xb8", "0xfc", "flowid", "1:20"},
		} {
			if err := tc(args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// Load reads a bed's description.
func Load(name string) (*Bed, error) {
	data, err := os.ReadFile(statePath(name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no test bed %q is up (no %s)", name, statePath(name))
		}
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %v", statePath(name), err)
	}
	return &Bed{s}, nil
}

// Down removes every process, mount, namespace and link of bed name. It
// is safe to call on a bed that is partly built or already gone.
func Down(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("test bed name %q: invalid", name)
	}
	var errs []error
	// Namespaces of this bed: by the state file and by name prefix, so a
	// lost state file leaves nothing behind either.
	nss := map[string]bool{}
	if b, err := Load(name); err == nil {
		for _, h := range b.Hosts {
			nss[b.Netns(h.Name)] = true
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), name+"-") {
				nss[e.Name()] = true
			}
		}
	}
	unmountUnder(filepath.Join(StateDir, name))
	for ns := range nss {
		killIn(ns)
	}
	for ns := range nss {
		if err := run("ip", "netns", "del", ns); err != nil && nsExists(ns) {
			errs = append(errs, err)
		}
	}
	// Root-side veths and the bridge (veths die with their namespace's
	// peer, but a half-made one may still be here).
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			dev := strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]
			if strings.HasPrefix(dev, name+"-") {
				if err := run("ip", "link", "del", dev); err != nil && linkExists(dev) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := os.Remove(statePath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	os.RemoveAll(filepath.Join(StateDir, name))
	return errors.Join(errs...)
}

// killIn kills every process in namespace ns and waits briefly for them.
func killIn(ns string) {
	for try := 0; try < 50; try++ {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MountDir is a directory for mounts that Down will unmount.
func (b *Bed) MountDir(name string) (string, error) {
	d := filepath.Join(StateDir, b.Name, name)
	return d, os.MkdirAll(d, 0o755)
}

func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// Status describes a bed's hosts as they are now.
type Status struct {
	Host   Host
	Netns  bool // namespace present
	Link   bool // eth0 up
	Shaped string
	Procs  int
}

// State reports each host's namespace, link, shaping and process count.
func (b *Bed) State() []Status {
	var out []Status
	for _, h := range b.Hosts {
		st := Status{Host: h, Netns: nsExists(b.Netns(h.Name))}
		if st.Netns {
			st.Link = exec.Command("ip", "netns", "exec", b.Netns(h.Name), "ip", "link", "show", "dev", "eth0", "up").Run() == nil
			if o, err := exec.Command("ip", "netns", "exec", b.Netns(h.Name), "tc", "class", "show", "dev", "eth0").Output(); err == nil {
				// The root class's rate: with TopRate the bands below it
				// have their own.
				if m := regexp.MustCompile(`class htb \S+ root .*?rate (\S+)`).FindSubmatch(o); m != nil {
					st.Shaped = string(m[1])
				}
			}
			o, _ := exec.Command("ip", "netns", "pids", b.Netns(h.Name)).Output()
			st.Procs = len(strings.Fields(string(o)))
		}
		out = append(out, st)
	}
	return out
}
