package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/safefile"
)

// SNMPDPath is net-snmp's agent (Debian: snmpd).
const SNMPDPath = "/usr/sbin/snmpd"

// SNMPConfig is what StartSNMPD gives a host's snmpd.
type SNMPConfig struct {
	Port      int          // UDP port on the host's address; default 161
	Community string       // v2c read-only community; empty: SNMPCommunity(Dir), unless V3User is set
	AllowFrom netip.Prefix // who may read; default the bed's subnet
	// V3User, V3Auth, V3Priv add an SNMPv3 authPriv user (SHA/AES) when
	// V3User is set; passphrases of 8+ characters.
	V3User, V3Auth, V3Priv string
	// SpeedBits overrides eth0's ifSpeed (bit/s): a veth reports none.
	// Zero: the host's shaped rate if it has one, else 1 Gbit/s.
	SpeedBits uint64
	// Dir holds snmpd.conf, its state and log; it must exist.
	Dir string
}

// SNMPCommunityFile is the file under a bed's data directory holding the
// community StartSNMPD generates (mode 0600): give it to the poller as
// `community file:DIR/snmp.community` (community-file in the station's
// configuration).
const SNMPCommunityFile = "snmp.community"

// SNMPCommunity is the v2c community in dir/snmp.community, made first (16
// random bytes in hex, 0600, in a 0700 directory) if there is none. There
// is no fixed default: "public" is the community every scanner tries.
func SNMPCommunity(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("no directory for the SNMP community")
	}
	p := filepath.Join(dir, SNMPCommunityFile)
	b, err := safefile.ReadSecret(p)
	if err == nil {
		c := strings.TrimSpace(string(b))
		if c == "" {
			return "", fmt.Errorf("%s is empty", p)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	c := hex.EncodeToString(r[:])
	if err := safefile.WriteSecret(p, []byte(c+"\n")); err != nil {
		return "", err
	}
	return c, nil
}

// SNMPD is a running snmpd in one host's namespace.
type SNMPD struct {
	Host string
	Addr string // host address:port
	// Community is the v2c community it admits (generated when the
	// config gave none and no v3 user).
	Community string
	Log       string
	stop      context.CancelFunc
	done      chan struct{} // closed once the process is reaped
}

// rateBits reads a tc rate (100mbit, 1gbit, 512kbit) as bit/s.
func rateBits(r string) uint64 {
	s := strings.ToLower(r)
	for _, u := range []struct {
		suf string
		m   uint64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if v, ok := strings.CutSuffix(s, u.suf); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				return n * u.m
			}
			return 0
		}
	}
	return 0
}

// snmpdConf is snmpd.conf for c (defaults filled in) with eth0 at ifindex
// idx: the community (if any) admitted from c.AllowFrom only, the v3 user
// with authPriv only.
func snmpdConf(c SNMPConfig, idx int) (string, error) {
	if c.Community == "" && c.V3User == "" {
		return "", errors.New("snmpd: neither a v2c community nor a v3 user")
	}
	var conf strings.Builder
	if c.Community != "" {
		fmt.Fprintf(&conf, "rocommunity %s %s\n", c.Community, c.AllowFrom)
	}
	if c.V3User != "" {
		if len(c.V3Auth) < 8 || len(c.V3Priv) < 8 {
			return "", errors.New("snmpd: v3 passphrases need 8+ characters")
		}
		fmt.Fprintf(&conf, "createUser %s SHA %q AES %q\nrouser %s priv\n", c.V3User, c.V3Auth, c.V3Priv, c.V3User)
	}
	fmt.Fprintf(&conf, "dontLogTCPWrappersConnects yes\ndisk / 10%%\nload 12 10 5\noverride .1.3.6.1.2.1.2.2.1.5.%d unsigned %d\n", idx, c.SpeedBits)
	return conf.String(), nil
}

// StartSNMPD runs net-snmp's snmpd in host h's namespace on its address,
// with eth0's ifSpeed overridden (veths report none), state and log in
// c.Dir, and no MIB files to load. It returns once snmpd logged its start
// (at most 10 s). Stop it with Stop; Down also kills it with the rest of
// the namespace.
func (b *Bed) StartSNMPD(ctx context.Context, h string, c SNMPConfig) (*SNMPD, error) {
	if _, err := os.Stat(SNMPDPath); err != nil {
		return nil, fmt.Errorf("snmpd: %w (Debian: apt-get install snmpd)", err)
	}
	host, err := b.Host(h)
	if err != nil {
		return nil, err
	}
	if c.Port == 0 {
		c.Port = 161
	}
	if c.Community == "" && c.V3User == "" {
		if c.Community, err = SNMPCommunity(c.Dir); err != nil {
			return nil, fmt.Errorf("snmpd on %s: %w", h, err)
		}
	}
	if !c.AllowFrom.IsValid() {
		c.AllowFrom = b.Subnet.Masked()
	}
	if c.SpeedBits == 0 {
		c.SpeedBits = rateBits(host.Rate)
	}
	if c.SpeedBits == 0 {
		c.SpeedBits = 1e9
	}
	if c.SpeedBits > 4294967295 {
		c.SpeedBits = 4294967295 // Gauge32: ifSpeed saturates; readers use their override
	}
	// eth0's index inside the namespace: the override names it.
	out, err := exec.Command("ip", "netns", "exec", b.Netns(h), "cat", "/sys/class/net/eth0/ifindex").Output()
	if err != nil {
		return nil, fmt.Errorf("snmpd on %s: eth0's ifindex: %v", h, err)
	}
	idx, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("snmpd on %s: eth0's ifindex %q: %v", h, out, err)
	}
	conf, err := snmpdConf(c, idx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.Dir, "snmpd-"+h)
	if err := os.MkdirAll(filepath.Join(dir, "persist"), 0o700); err != nil {
		return nil, err
	}
	cf := filepath.Join(dir, "snmpd.conf")
	if err := safefile.WriteSecret(cf, []byte(conf)); err != nil {
		return nil, err
	}
	logf := filepath.Join(dir, "log")
	os.Remove(logf)
	addr := fmt.Sprintf("%s:%d", host.Addr, c.Port)
	cctx, cancel := context.WithCancel(ctx)
	cmd, err := b.Command(cctx, h, SNMPDPath, "-f", "-Lf", logf, "-C", "-c", cf, "-I", "-smux", "-p", filepath.Join(dir, "pid"), "udp:"+addr)
	if err != nil {
		cancel()
		return nil, err
	}
	cmd.WaitDelay = 3 * time.Second
	cmd.Env = append(os.Environ(), "SNMP_PERSISTENT_DIR="+filepath.Join(dir, "persist"), "MIBS=", "MIBDIRS="+dir)
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("snmpd on %s: %w", h, err)
	}
	s := &SNMPD{Host: h, Addr: addr, Community: c.Community, Log: logf, stop: cancel, done: make(chan struct{})}
	var werr error
	go func() { werr = cmd.Wait(); close(s.done) }()
	for i := 0; i < 100; i++ { // 10 s
		if b, _ := os.ReadFile(logf); strings.Contains(string(b), "NET-SNMP version") {
			return s, nil
		}
		select {
		case <-s.done:
			cancel()
			b, _ := os.ReadFile(logf)
			return nil, fmt.Errorf("snmpd on %s exited: %v: %.500s", h, werr, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.Stop()
	return nil, fmt.Errorf("snmpd on %s did not start within 10 s (log %s)", h, logf)
}

// Stop ends the snmpd.
func (s *SNMPD) Stop() {
	s.stop()
	<-s.done
}
