package feedback

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/gosnmp/gosnmp"
)

const snmpdPath = "/usr/sbin/snmpd"

// startSnmpd runs a real net-snmp snmpd on 127.0.86.2:port (this helper's
// loopback range) with a v2c community and a v3 authPriv user, and stops it
// when the test ends, whatever happens.
func startSnmpd(t *testing.T, port int) string {
	t.Helper()
	lab.Need(t, lab.Tool(snmpdPath))
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.86.2:%d", port)
	conf := filepath.Join(dir, "snmpd.conf")
	// FIELD-NOTES' minimal config plus a v3 user (SHA/AES, authPriv only)
	// and an override like the test bed needs for veths.
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`rocommunity h6public 127.0.86.0/24
createUser h6user SHA "h6authpass123" AES "h6privpass123"
rouser h6user priv
disk / 10%%
load 12 10 5
override .1.3.6.1.2.1.2.2.1.5.1 unsigned 100000000
`)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, snmpdPath, "-f", "-Lf", filepath.Join(dir, "log"), "-C", "-c", conf,
		"-I", "-smux", "-p", filepath.Join(dir, "pid"), "udp:"+addr)
	cmd.WaitDelay = 3 * time.Second
	// The address is on the command line; state (the v3 user's keys) goes
	// to the test's directory, never /var/lib/snmp; no MIB files to load.
	cmd.Env = append(os.Environ(), "SNMP_PERSISTENT_DIR="+filepath.Join(dir, "persist"), "MIBS=", "MIBDIRS="+dir)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start snmpd: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("snmpd log:\n%s", b)
		}
	})
	// Ready when it answers a v2c get (bounded: 50 tries, 5 s).
	p, err := NewPoller(PollerConfig{Timeout: 100 * time.Millisecond, Retries: -1},
		[]Target{{Node: "probe", Addr: addr, Community: "h6public", IfIndex: 1, LocalAddr: "127.0.86.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 50; i++ {
		if r := p.Poll(context.Background()); r[0].Err == nil {
			return addr
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("snmpd on %s did not answer within 5 s", addr)
	return ""
}

func TestPollerRealSnmpd(t *testing.T) {
	addr := startSnmpd(t, 16161)
	targets := []Target{
		{Node: "v2c", Addr: addr, LocalAddr: "127.0.86.1", Community: "h6public", IfName: "lo"},
		{Node: "v3", Addr: addr, LocalAddr: "127.0.86.1", Version: "3", User: "h6user", AuthProto: "SHA", AuthPass: "h6authpass123",
			PrivProto: "AES", PrivPass: "h6privpass123", IfIndex: 1, LoadMinutes: 5},
		{Node: "v3-wrong-pass", Addr: addr, LocalAddr: "127.0.86.1", Version: "3", User: "h6user", AuthPass: "wrongwrong", PrivPass: "h6privpass123", IfIndex: 1},
		{Node: "v2c-wrong-community", Addr: addr, LocalAddr: "127.0.86.1", Community: "nope", IfIndex: 1},
		{Node: "silent", Addr: "127.0.86.3:16169", LocalAddr: "127.0.86.1", Community: "h6public", IfIndex: 1},
	}
	p, err := NewPoller(PollerConfig{Interval: time.Second, Timeout: 300 * time.Millisecond, Retries: 0, Concurrency: 2}, targets)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Traffic on lo between the polls so that the counters move.
	traffic := func() {
		// A listener, so that no ICMP port-unreachable fails the writes.
		l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 86, 2), Port: 16162})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 86, 1)}, &net.UDPAddr{IP: net.IPv4(127, 0, 86, 2), Port: 16162})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 1000)
		for i := 0; i < 1000; i++ {
			if _, err := c.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	local := func() Reading {
		s, err := LocalSample(LocalConfig{Node: "self", Interface: "lo"})
		return Reading{Node: "self", Sample: s, Err: err}
	}
	// net-snmp fills its CPU counters 5 s after it starts.
	time.Sleep(5 * time.Second)
	start := time.Now()
	r1 := p.Poll(context.Background())
	l1 := local()
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a round took %v: the timeouts do not bound it", el)
	}
	traffic()
	// snmpd caches interface counters for about 3 s and its memory and
	// CPU figures for 5 s: wait past both.
	time.Sleep(5500 * time.Millisecond)
	r2 := p.Poll(context.Background())
	l2 := local()
	// One controller serves both paths: node "v2c" over SNMP and this host
	// through the agent path, side by side.
	clk := newFakeClock()
	ctl, err := NewController(ControllerConfig{Options: Options{BandwidthOverride: 1e9, CPU: CPURaw}}, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctl.Step([]Reading{r1[0], l1})
	clk.Advance(5500 * time.Millisecond)
	for _, d := range ctl.Step([]Reading{r2[0], l2}) {
		t.Logf("mixed: %v", d)
		if d.Terms == nil {
			t.Errorf("no terms in a controller shared by the SNMP and agent paths: %v", d)
		}
	}
	for i, tg := range targets {
		a, b := r1[i], r2[i]
		if a.Node != tg.Node || b.Node != tg.Node {
			t.Fatalf("reading %d is for %q/%q, want %q", i, a.Node, b.Node, tg.Node)
		}
		if strings.HasPrefix(tg.Node, "v3-") || strings.HasPrefix(tg.Node, "v2c-") || tg.Node == "silent" {
			if a.Err == nil || b.Err == nil {
				t.Errorf("%s: want errors, got %v / %v", tg.Node, a.Err, b.Err)
			} else {
				t.Logf("%s: %v", tg.Node, b.Err)
			}
			continue
		}
		if a.Err != nil || b.Err != nil {
			t.Fatalf("%s: %v / %v", tg.Node, a.Err, b.Err)
		}
		s1, s2 := a.Sample, b.Sample
		t.Logf("%s: first %+v", tg.Node, s1)
		t.Logf("%s: second %+v", tg.Node, s2)
		dt := time.Duration(s2.SysUpTime-s1.SysUpTime) * 10 * time.Millisecond
		if dt < 5*time.Second || dt > 8*time.Second {
			t.Errorf("%s: sysUpTime advanced %v over a 5.5 s sleep", tg.Node, dt)
		}
		if s1.IfIndex != 1 || !s2.Counter64 {
			t.Errorf("%s: interface %d, 64-bit %v: want lo (1) with ifHC counters", tg.Node, s1.IfIndex, s2.Counter64)
		}
		if s2.InOctets < s1.InOctets+1_000_000 || s2.OutOctets < s1.OutOctets+1_000_000 {
			t.Errorf("%s: lo octets %d->%d in, %d->%d out: want at least 1 MB more (we sent 1 MB)", tg.Node, s1.InOctets, s2.InOctets, s1.OutOctets, s2.OutOctets)
		}
		if s2.IfSpeed != 100_000_000 {
			t.Errorf("%s: ifSpeed %d, want the override 100000000", tg.Node, s2.IfSpeed)
		}
		if s2.MemTotalReal == 0 || s2.MemAvailReal > s2.MemTotalReal || s2.DskTotal == 0 || s2.DskUsed > s2.DskTotal || !s2.HaveCPU {
			t.Errorf("%s: implausible memory/disk/cpu: %+v", tg.Node, s2)
		}
		if !s1.HaveCPU {
			t.Errorf("%s: no CPU counters 5 s after snmpd started", tg.Node)
		}
		tm, err := Compute(s1, s2, Options{CPU: CPURaw})
		if err != nil {
			t.Fatalf("%s: %v", tg.Node, err)
		}
		t.Logf("%s: terms %+v", tg.Node, tm)
		if tm.EthernetUtil <= 0 || tm.CPUBusy < 0 || tm.CPUBusy > 100 || tm.TotalLoad <= 0 {
			t.Errorf("%s: implausible terms %+v", tg.Node, tm)
		}
	}
}

func TestNewPollerErrors(t *testing.T) {
	for _, c := range []struct {
		tg   Target
		want string
	}{
		{Target{Addr: "x", IfIndex: 1}, "no node name"},
		{Target{Node: "a", Addr: "x", Community: "c"}, "interface index or name"},
		{Target{Node: "a", Addr: "x:0", IfIndex: 1}, "bad port"},
		{Target{Node: "a", Addr: "x", IfIndex: 1, Version: "1"}, "want 2c or 3"},
		{Target{Node: "a", Addr: "x", IfIndex: 1, Version: "3", User: "u", AuthPass: "12345678"}, "authPriv only"},
		{Target{Node: "a", Addr: "x", IfIndex: 1, Version: "3", User: "u", AuthPass: "1234", PrivPass: "12345678"}, "at least 8"},
		{Target{Node: "a", Addr: "x", IfIndex: 1, Version: "3", User: "u", AuthPass: "12345678", PrivPass: "12345678", PrivProto: "3DES"}, "priv protocol"},
		{Target{Node: "a", Addr: "x", IfIndex: 1, LoadMinutes: 10, Community: "c"}, "load minutes"},
	} {
		if _, err := NewPoller(PollerConfig{}, []Target{c.tg}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.tg, err, c.want)
		}
	}
	if _, err := NewPoller(PollerConfig{}, []Target{{Node: "a", Addr: "x", IfIndex: 1}, {Node: "a", Addr: "y", IfIndex: 1}}); err == nil {
		t.Error("duplicate node accepted")
	}
}

// FuzzSNMPResponse: an agent's answer is untrusted bytes. Whatever gosnmp
// decodes goes through pduValues and sampleFrom without panicking, and a
// sample that comes out has consistent totals.
func FuzzSNMPResponse(f *testing.F) {
	g := &gosnmp.GoSNMP{Version: gosnmp.Version2c, Community: "public"}
	pkt, err := g.SnmpEncodePacket(gosnmp.GetResponse, []gosnmp.SnmpPDU{
		{Name: oidSysUpTime, Type: gosnmp.TimeTicks, Value: uint32(100)},
		{Name: oidIfHCIn + "1", Type: gosnmp.Counter64, Value: uint64(5)},
		{Name: oidIfHCOut + "1", Type: gosnmp.Counter64, Value: uint64(7)},
		{Name: oidLaLoadInt + "1", Type: gosnmp.Integer, Value: 37},
		{Name: oidMemTotalRl, Type: gosnmp.Integer, Value: 10},
		{Name: oidMemAvailRl, Type: gosnmp.Integer, Value: 20},
	}, 0, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pkt)
	f.Fuzz(func(t *testing.T, b []byte) {
		g := &gosnmp.GoSNMP{Version: gosnmp.Version2c, Community: "public", Logger: gosnmp.NewLogger(nil)}
		p, err := g.SnmpDecodePacket(b)
		if err != nil || p == nil {
			return
		}
		vals, err := pduValues(p.Variables)
		if err != nil {
			return
		}
		s, err := sampleFrom("n", time.Time{}, 1, 1, 1, vals)
		if err != nil {
			return
		}
		if s.MemAvailReal > s.MemTotalReal || s.MemAvailSwap > s.MemTotalSwap || s.DskUsed > s.DskTotal {
			t.Fatalf("inconsistent sample %+v", s)
		}
	})
}

// TestPollerBounds: six agents that never answer (a socket that reads and
// drops), a 200 ms timeout without retries and two at a time: a round takes
// three waves of one timeout each, and Run stops with its context.
func TestPollerBounds(t *testing.T) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 86, 6), Port: 16166})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	var targets []Target
	for i := 0; i < 6; i++ {
		targets = append(targets, Target{Node: fmt.Sprintf("n%d", i), Addr: "127.0.86.6:16166", LocalAddr: "127.0.86.1", Community: "c", IfIndex: 1})
	}
	p, err := NewPoller(PollerConfig{Interval: time.Second, Timeout: 200 * time.Millisecond, Retries: -1, Concurrency: 2}, targets)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	rs := p.Poll(context.Background())
	el := time.Since(start)
	for _, r := range rs {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "timeout") {
			t.Errorf("%s: %v, want a timeout", r.Node, r.Err)
		}
	}
	if el < 550*time.Millisecond || el > 2*time.Second {
		t.Errorf("round took %v, want about 600 ms (3 waves of 200 ms)", el)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	rounds := 0
	p.Run(ctx, func(rs []Reading) { rounds++ })
	if rounds < 1 || rounds > 3 {
		t.Errorf("%d rounds in 1.5 s at a 1 s interval", rounds)
	}
}

// TestPollerNoDefaultCommunity: a v2c target without a community is an
// error that says so, not a poll with "public", the community every
// scanner tries first.
func TestPollerNoDefaultCommunity(t *testing.T) {
	_, err := NewPoller(PollerConfig{}, []Target{{Node: "n1", Addr: "127.0.86.2:16161", IfIndex: 1}})
	if err == nil {
		t.Fatal("a v2c target without a community was accepted (it polled with \"public\")")
	}
	if !strings.Contains(err.Error(), "no v2c community configured") || !strings.Contains(err.Error(), `"n1"`) {
		t.Errorf("error %q does not name the target and the missing community", err)
	}
}
