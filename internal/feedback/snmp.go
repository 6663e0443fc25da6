package feedback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosnmp/gosnmp"
)

// Numeric OIDs (Debian ships no MIB files). MIB-II / IF-MIB first, then
// UCD-SNMP-MIB (net-snmp's enterprise 2021).
const (
	oidSysUpTime   = ".1.3.6.1.2.1.1.3.0"
	oidIfName      = ".1.3.6.1.2.1.31.1.1.1.1" // table, walked to find an index by name
	oidIfInOctets  = ".1.3.6.1.2.1.2.2.1.10."  // + ifIndex, Counter32
	oidIfOutOctets = ".1.3.6.1.2.1.2.2.1.16."
	oidIfSpeed     = ".1.3.6.1.2.1.2.2.1.5."
	oidIfHCIn      = ".1.3.6.1.2.1.31.1.1.1.6." // Counter64
	oidIfHCOut     = ".1.3.6.1.2.1.31.1.1.1.10."
	oidIfHighSpeed = ".1.3.6.1.2.1.31.1.1.1.15."
	oidMemTotalSw  = ".1.3.6.1.4.1.2021.4.3.0"
	oidMemAvailSw  = ".1.3.6.1.4.1.2021.4.4.0"
	oidMemTotalRl  = ".1.3.6.1.4.1.2021.4.5.0"
	oidMemAvailRl  = ".1.3.6.1.4.1.2021.4.6.0"
	oidLaLoadInt   = ".1.3.6.1.4.1.2021.10.1.5." // + 1, 2, 3 for 1, 5, 15 minutes
	oidSsCPURaw    = ".1.3.6.1.4.1.2021.11."     // + 50.0 user ... 64.0 steal
	oidDskTable    = ".1.3.6.1.4.1.2021.9.1."    // + column . disk index
)

// ssCpuRaw* columns of UCD-SNMP-MIB's systemStats.
const (
	cpuRawUser      = 50
	cpuRawNice      = 51
	cpuRawSystem    = 52 // on Linux /proc/stat's system field alone (ssCpuRawKernel, 55, reads 0 there)
	cpuRawIdle      = 53
	cpuRawWait      = 54
	cpuRawInterrupt = 56
	cpuRawSoftIRQ   = 61
	cpuRawSteal     = 64
)

// dskTable columns: dskTotal/dskUsed are 32-bit kB; the High/Low pairs
// carry the 64-bit values for disks over 2 TB.
const (
	dskTotal     = 6
	dskUsed      = 8
	dskTotalLow  = 11
	dskTotalHigh = 12
	dskUsedLow   = 15
	dskUsedHigh  = 16
)

// Target is one node's SNMP agent and what to read from it.
type Target struct {
	Node string // the real server's name in the pool
	Addr string // host or host:port of its snmpd (port 161 by default)
	// LocalAddr, if set, is the source address (host or host:port) to poll
	// from: agents usually admit only the management network.
	LocalAddr string

	Version   string // "2c" (default) or "3"
	Community string // v2c community; required (no default)

	// SNMPv3 authPriv (the only v3 level accepted: load figures are not
	// secret, but an unauthenticated answer could steer the weights).
	User      string
	AuthProto string // SHA (default), SHA224, SHA256, SHA384, SHA512 or MD5
	AuthPass  string
	PrivProto string // AES (default, AES-128), AES192, AES256, AES192C, AES256C or DES
	PrivPass  string

	IfIndex     int    // interface to measure; or
	IfName      string // its ifName, looked up once (IfIndex wins if both are set)
	LoadMinutes int    // x of laLoad_x: 1 (default), 5 or 15
	DiskIndex   int    // dskTable row (`disk` lines in snmpd.conf, from 1); default 1
}

// PollerConfig bounds a poller's work.
type PollerConfig struct {
	Interval    time.Duration // between rounds in Run; default 2 s
	Timeout     time.Duration // per request; default 1 s, and at most Interval/(Retries+1)
	Retries     int           // per request; default 1
	Concurrency int           // targets polled at once; default 8
}

func (c PollerConfig) defaults() PollerConfig {
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.Retries < 0 {
		c.Retries = 0
	} else if c.Retries == 0 {
		c.Retries = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	// A round must end before the next one starts.
	if lim := c.Interval / time.Duration(c.Retries+1); c.Timeout > lim {
		c.Timeout = lim
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	return c
}

// Poller reads every target's agent each round, a bounded number at a time.
// Each target has its own gosnmp session (gosnmp is not safe to share
// between goroutines) used by one poll at a time.
type Poller struct {
	cfg     PollerConfig
	targets []*snmpTarget
}

type snmpTarget struct {
	t       Target
	mu      sync.Mutex // one poll at a time per session
	sess    *gosnmp.GoSNMP
	ifIndex int
}

// NewPoller checks the targets and returns a poller; nothing is sent yet.
func NewPoller(cfg PollerConfig, targets []Target) (*Poller, error) {
	p := &Poller{cfg: cfg.defaults()}
	seen := map[string]bool{}
	for i, t := range targets {
		if t.Node == "" {
			return nil, fmt.Errorf("feedback: snmp target %d (%s): no node name", i, t.Addr)
		}
		if seen[t.Node] {
			return nil, fmt.Errorf("feedback: snmp target %q listed twice", t.Node)
		}
		seen[t.Node] = true
		if _, err := newSession(t, p.cfg); err != nil {
			return nil, err
		}
		if t.IfIndex <= 0 && t.IfName == "" {
			return nil, fmt.Errorf("feedback: snmp target %q: set an interface index or name", t.Node)
		}
		switch t.LoadMinutes {
		case 0, 1, 5, 15:
		default:
			return nil, fmt.Errorf("feedback: snmp target %q: load minutes %d (want 1, 5 or 15)", t.Node, t.LoadMinutes)
		}
		p.targets = append(p.targets, &snmpTarget{t: t, ifIndex: t.IfIndex})
	}
	return p, nil
}

// newSession builds (but does not connect) the gosnmp session for t.
func newSession(t Target, cfg PollerConfig) (*gosnmp.GoSNMP, error) {
	host, port := t.Addr, uint16(161)
	if h, ps, err := net.SplitHostPort(t.Addr); err == nil {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("feedback: snmp target %q: bad port in %q", t.Node, t.Addr)
		}
		host, port = h, uint16(n)
	}
	if host == "" {
		return nil, fmt.Errorf("feedback: snmp target %q: no address", t.Node)
	}
	s := &gosnmp.GoSNMP{
		Target:  host,
		Port:    port,
		Timeout: cfg.Timeout,
		Retries: cfg.Retries,
		MaxOids: gosnmp.MaxOids,
		// Answers are a few hundred bytes; this bounds what one read takes.
		MaxRepetitions: 32,
	}
	if t.LocalAddr != "" {
		s.LocalAddr = t.LocalAddr
		if _, _, err := net.SplitHostPort(t.LocalAddr); err != nil {
			s.LocalAddr = net.JoinHostPort(t.LocalAddr, "0")
		}
	}
	switch strings.ToLower(t.Version) {
	case "", "2c", "v2c":
		s.Version = gosnmp.Version2c
		// No default: "public" is the community every scanner tries.
		if t.Community == "" {
			return nil, fmt.Errorf("feedback: snmp target %q: no v2c community configured (there is no default): give the feedback block a community or community file:/PATH, or use v3", t.Node)
		}
		s.Community = t.Community
	case "3", "v3":
		if t.User == "" || t.AuthPass == "" || t.PrivPass == "" {
			return nil, fmt.Errorf("feedback: snmp target %q: SNMPv3 needs user, auth and priv passphrases (authPriv only)", t.Node)
		}
		if len(t.AuthPass) < 8 || len(t.PrivPass) < 8 {
			return nil, fmt.Errorf("feedback: snmp target %q: SNMPv3 passphrases must be at least 8 characters", t.Node)
		}
		ap, err := authProto(t.AuthProto)
		if err != nil {
			return nil, fmt.Errorf("feedback: snmp target %q: %w", t.Node, err)
		}
		pp, err := privProto(t.PrivProto)
		if err != nil {
			return nil, fmt.Errorf("feedback: snmp target %q: %w", t.Node, err)
		}
		s.Version = gosnmp.Version3
		s.SecurityModel = gosnmp.UserSecurityModel
		s.MsgFlags = gosnmp.AuthPriv
		s.SecurityParameters = &gosnmp.UsmSecurityParameters{
			UserName:                 t.User,
			AuthenticationProtocol:   ap,
			AuthenticationPassphrase: t.AuthPass,
			PrivacyProtocol:          pp,
			PrivacyPassphrase:        t.PrivPass,
		}
	default:
		return nil, fmt.Errorf("feedback: snmp target %q: version %q (want 2c or 3)", t.Node, t.Version)
	}
	return s, nil
}

func authProto(s string) (gosnmp.SnmpV3AuthProtocol, error) {
	switch strings.ToUpper(s) {
	case "", "SHA", "SHA1":
		return gosnmp.SHA, nil
	case "SHA224":
		return gosnmp.SHA224, nil
	case "SHA256":
		return gosnmp.SHA256, nil
	case "SHA384":
		return gosnmp.SHA384, nil
	case "SHA512":
		return gosnmp.SHA512, nil
	case "MD5":
		return gosnmp.MD5, nil
	}
	return 0, fmt.Errorf("auth protocol %q (want SHA, SHA224, SHA256, SHA384, SHA512 or MD5)", s)
}

func privProto(s string) (gosnmp.SnmpV3PrivProtocol, error) {
	switch strings.ToUpper(s) {
	case "", "AES", "AES128":
		return gosnmp.AES, nil
	case "AES192":
		return gosnmp.AES192, nil
	case "AES256":
		return gosnmp.AES256, nil
	case "AES192C":
		return gosnmp.AES192C, nil
	case "AES256C":
		return gosnmp.AES256C, nil
	case "DES":
		return gosnmp.DES, nil
	}
	return 0, fmt.Errorf("priv protocol %q (want AES, AES192, AES256, AES192C, AES256C or DES)", s)
}

// Poll reads every target once, at most Concurrency at a time, and returns
// one Reading per target in the targets' order.
func (p *Poller) Poll(ctx context.Context) []Reading {
	out := make([]Reading, len(p.targets))
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, st := range p.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] = Reading{Node: st.t.Node, Err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			s, err := st.poll(ctx, p.cfg)
			out[i] = Reading{Node: st.t.Node, Sample: s, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// Run polls every Interval until ctx ends, handing each round to fn.
func (p *Poller) Run(ctx context.Context, fn func([]Reading)) {
	tk := time.NewTicker(p.cfg.Interval)
	defer tk.Stop()
	for {
		fn(p.Poll(ctx))
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Close closes every session.
func (p *Poller) Close() {
	for _, st := range p.targets {
		st.mu.Lock()
		if st.sess != nil {
			st.sess.Conn.Close()
			st.sess = nil
		}
		st.mu.Unlock()
	}
}

func (st *snmpTarget) poll(ctx context.Context, cfg PollerConfig) (Sample, error) {
	if !st.mu.TryLock() {
		return Sample{}, fmt.Errorf("snmp %s: previous poll still running", st.t.Addr)
	}
	defer st.mu.Unlock()
	if st.sess == nil {
		s, err := newSession(st.t, cfg)
		if err != nil {
			return Sample{}, err
		}
		if err := s.Connect(); err != nil {
			return Sample{}, fmt.Errorf("snmp %s: %w", st.t.Addr, err)
		}
		st.sess = s
	}
	st.sess.Context = ctx
	s, err := st.read()
	if err != nil {
		// A fresh session next time: a v3 engine time or a socket may be
		// what went wrong.
		st.sess.Conn.Close()
		st.sess = nil
		return Sample{}, fmt.Errorf("snmp %s (node %s): %w", st.t.Addr, st.t.Node, err)
	}
	return s, nil
}

func (st *snmpTarget) read() (Sample, error) {
	t := st.t
	if st.ifIndex <= 0 {
		idx, err := findIfIndex(st.sess, t.IfName)
		if err != nil {
			return Sample{}, err
		}
		st.ifIndex = idx
	}
	la := map[int]int{0: 1, 1: 1, 5: 2, 15: 3}[t.LoadMinutes]
	disk := t.DiskIndex
	if disk <= 0 {
		disk = 1
	}
	n := strconv.Itoa(st.ifIndex)
	d := "." + strconv.Itoa(disk)
	cpuCols := []int{cpuRawUser, cpuRawNice, cpuRawSystem, cpuRawIdle, cpuRawWait, cpuRawInterrupt, cpuRawSoftIRQ, cpuRawSteal}
	oids := []string{oidSysUpTime,
		oidIfHCIn + n, oidIfHCOut + n, oidIfInOctets + n, oidIfOutOctets + n, oidIfSpeed + n, oidIfHighSpeed + n,
		oidMemTotalSw, oidMemAvailSw, oidMemTotalRl, oidMemAvailRl, oidLaLoadInt + strconv.Itoa(la)}
	for _, c := range []int{dskTotal, dskUsed, dskTotalLow, dskTotalHigh, dskUsedLow, dskUsedHigh} {
		oids = append(oids, oidDskTable+strconv.Itoa(c)+d)
	}
	for _, c := range cpuCols {
		oids = append(oids, oidSsCPURaw+strconv.Itoa(c)+".0")
	}
	pkt, err := st.sess.Get(oids)
	if err != nil {
		return Sample{}, err
	}
	if pkt.Error != gosnmp.NoError {
		return Sample{}, fmt.Errorf("agent error %v at index %d", pkt.Error, pkt.ErrorIndex)
	}
	vals, err := pduValues(pkt.Variables)
	if err != nil {
		return Sample{}, err
	}
	return sampleFrom(t.Node, time.Now(), st.ifIndex, la, disk, vals)
}

// pduValues maps each answered OID to its value; absent objects are left
// out, wrong-typed ones are an error.
func pduValues(vars []gosnmp.SnmpPDU) (map[string]uint64, error) {
	out := make(map[string]uint64, len(vars))
	for _, v := range vars {
		switch v.Type {
		case gosnmp.NoSuchObject, gosnmp.NoSuchInstance, gosnmp.EndOfMibView, gosnmp.Null:
			continue
		case gosnmp.Counter32, gosnmp.Counter64, gosnmp.Gauge32, gosnmp.TimeTicks, gosnmp.Uinteger32, gosnmp.Integer:
			b := gosnmp.ToBigInt(v.Value)
			if b.Sign() < 0 || !b.IsUint64() {
				return nil, fmt.Errorf("%s: value %v out of range", v.Name, b)
			}
			out[v.Name] = b.Uint64()
		default:
			return nil, fmt.Errorf("%s: unexpected type %v", v.Name, v.Type)
		}
	}
	return out, nil
}

// sampleFrom builds a Sample from the values of one Get. Names missing
// from vals were not answered by the agent.
func sampleFrom(node string, at time.Time, ifIndex, la, disk int, vals map[string]uint64) (Sample, error) {
	s := Sample{Node: node, At: at, IfIndex: ifIndex}
	need := func(oid, what string) (uint64, error) {
		v, ok := vals[oid]
		if !ok {
			return 0, fmt.Errorf("agent has no %s (%s)", what, oid)
		}
		return v, nil
	}
	up, err := need(oidSysUpTime, "sysUpTime")
	if err != nil {
		return s, err
	}
	if up > 0xffffffff {
		return s, fmt.Errorf("sysUpTime %d exceeds TimeTicks", up)
	}
	s.SysUpTime = uint32(up)
	n := strconv.Itoa(ifIndex)
	in, okIn := vals[oidIfHCIn+n]
	out, okOut := vals[oidIfHCOut+n]
	if okIn && okOut {
		s.InOctets, s.OutOctets, s.Counter64 = in, out, true
	} else {
		// No IF-MIB ifXTable: the 32-bit counters wrap quickly (34 s at
		// 1 Gbit/s), still correct if polled faster than that.
		if s.InOctets, err = need(oidIfInOctets+n, "ifInOctets or ifHCInOctets for interface "+n); err != nil {
			return s, err
		}
		if s.OutOctets, err = need(oidIfOutOctets+n, "ifOutOctets or ifHCOutOctets for interface "+n); err != nil {
			return s, err
		}
	}
	s.IfSpeed, s.IfHighSpeed = vals[oidIfSpeed+n], vals[oidIfHighSpeed+n]
	s.MemTotalSwap, s.MemAvailSwap = vals[oidMemTotalSw], vals[oidMemAvailSw]
	s.MemTotalReal, s.MemAvailReal = vals[oidMemTotalRl], vals[oidMemAvailRl]
	s.MemAvailSwap = min(s.MemAvailSwap, s.MemTotalSwap)
	s.MemAvailReal = min(s.MemAvailReal, s.MemTotalReal)
	if s.LaLoadInt, err = need(oidLaLoadInt+strconv.Itoa(la), "laLoadInt (UCD-SNMP-MIB; is this net-snmp?)"); err != nil {
		return s, err
	}
	col := func(c int) string { return oidDskTable + strconv.Itoa(c) + "." + strconv.Itoa(disk) }
	if hi, ok := vals[col(dskTotalHigh)]; ok {
		s.DskTotal = hi<<32 | vals[col(dskTotalLow)]
		s.DskUsed = vals[col(dskUsedHigh)]<<32 | vals[col(dskUsedLow)]
	} else {
		s.DskTotal, s.DskUsed = vals[col(dskTotal)], vals[col(dskUsed)]
	}
	s.DskUsed = min(s.DskUsed, s.DskTotal)
	cpu := func(c int) (uint64, bool) {
		v, ok := vals[oidSsCPURaw+strconv.Itoa(c)+".0"]
		return v, ok
	}
	var ok [4]bool
	s.CPU.User, ok[0] = cpu(cpuRawUser)
	s.CPU.System, ok[1] = cpu(cpuRawSystem)
	s.CPU.Idle, ok[2] = cpu(cpuRawIdle)
	s.CPU.Nice, ok[3] = cpu(cpuRawNice)
	s.CPU.Wait, _ = cpu(cpuRawWait)
	s.CPU.Interrupt, _ = cpu(cpuRawInterrupt)
	s.CPU.SoftIRQ, _ = cpu(cpuRawSoftIRQ)
	s.CPU.Steal, _ = cpu(cpuRawSteal)
	// net-snmp answers zeros until its first CPU refresh (5 s after start).
	s.HaveCPU = ok[0] && ok[1] && ok[2] && ok[3] && s.CPU.User+s.CPU.System+s.CPU.Idle > 0
	return s, nil
}

// findIfIndex walks ifName for name.
func findIfIndex(s *gosnmp.GoSNMP, name string) (int, error) {
	var idx int
	var seen []string
	errFound := errors.New("found")
	count := 0
	err := s.BulkWalk(oidIfName, func(v gosnmp.SnmpPDU) error {
		count++
		if count > 4096 {
			return fmt.Errorf("ifName table longer than 4096 rows")
		}
		b, ok := v.Value.([]byte)
		if !ok {
			return nil
		}
		if string(b) == name {
			i, err := strconv.Atoi(v.Name[strings.LastIndexByte(v.Name, '.')+1:])
			if err != nil {
				return fmt.Errorf("ifName row %s: bad index", v.Name)
			}
			idx = i
			return errFound
		}
		if len(seen) < 16 {
			seen = append(seen, string(b))
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return idx, nil
	}
	if err != nil {
		return 0, fmt.Errorf("looking up interface %q: %w", name, err)
	}
	return 0, fmt.Errorf("no interface named %q (agent has %s)", name, strings.Join(seen, ", "))
}
