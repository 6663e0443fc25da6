package feedback

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFixture lays out the /proc and /sys files LocalSample reads.
func writeFixture(t *testing.T, dir, uptime, netdev, meminfo, loadavg, stat string) (proc, sys string) {
	t.Helper()
	proc, sys = filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
	files := map[string]string{
		filepath.Join(proc, "uptime"):                         uptime,
		filepath.Join(proc, "net", "dev"):                     netdev,
		filepath.Join(proc, "meminfo"):                        meminfo,
		filepath.Join(proc, "loadavg"):                        loadavg,
		filepath.Join(proc, "stat"):                           stat,
		filepath.Join(sys, "class", "net", "eth0", "ifindex"): "3\n",
		filepath.Join(sys, "class", "net", "eth0", "speed"):   "100\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc, sys
}

const netdevFmt = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 999 9 0 0 0 0 0 0 999 9 0 0 0 0 0 0
  eth0: %s 100 0 0 0 0 0 0 %s 50 0 0 0 0 0 0
`

func TestLocalSampleFixture(t *testing.T) {
	dir := t.TempDir()
	mem := "MemTotal:        4000000 kB\nMemFree:          500000 kB\nMemAvailable:    1000000 kB\nSwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n"
	stat1 := "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\nintr 1\n"
	stat2 := "cpu  400 0 150 1300 150 0 0 0 0 0\ncpu0 400 0 150 1300 150 0 0 0 0 0\nintr 2\n"
	proc, sys := writeFixture(t, filepath.Join(dir, "1"), "10.00 5.00\n", strings.Replace(strings.Replace(netdevFmt, "%s", "5000000", 1), "%s", "7000000", 1),
		mem, "0.37 0.20 0.10 1/100 4242\n", stat1)
	c := LocalConfig{Node: "n1", Interface: "eth0", ProcRoot: proc, SysRoot: sys, DiskPath: dir}
	s1, err := LocalSample(c)
	if err != nil {
		t.Fatal(err)
	}
	proc2, sys2 := writeFixture(t, filepath.Join(dir, "2"), "12.00 5.00\n", strings.Replace(strings.Replace(netdevFmt, "%s", "15000000", 1), "%s", "9500000", 1),
		mem, "0.37 0.20 0.10 1/100 4242\n", stat2)
	c.ProcRoot, c.SysRoot = proc2, sys2
	s2, err := LocalSample(c)
	if err != nil {
		t.Fatal(err)
	}
	// uptime 10.00 s = 1000 ticks; eth0 is ifindex 3 at 100 Mbit/s.
	if s1.SysUpTime != 1000 || s2.SysUpTime != 1200 || s1.IfIndex != 3 || s1.IfSpeed != 100_000_000 || s1.IfHighSpeed != 100 {
		t.Fatalf("sample %+v", s1)
	}
	if s1.MemTotalReal != 4_000_000 || s1.MemAvailReal != 1_000_000 || s1.MemTotalSwap != 2_000_000 || s1.MemAvailSwap != 1_500_000 || s1.LaLoadInt != 37 {
		t.Fatalf("sample %+v", s1)
	}
	if s1.DskTotal == 0 || s1.DskUsed > s1.DskTotal {
		t.Fatalf("disk %d/%d", s1.DskUsed, s1.DskTotal)
	}
	// The same figures as TestComputeVectors' first vector: eth 50 %,
	// swap 25, laLoad 37; CPU 400 busy of 1000 ticks = 40 %.
	tm, err := Compute(s1, s2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tm.EthernetUtil != 50 || tm.MemSwapLoad != 25 || tm.MemRealLoad != 75 || tm.LaLoad != 37 {
		t.Errorf("terms %+v", tm)
	}
	if tm, _ := Compute(s1, s2, Options{CPU: CPURaw}); tm.CPUBusy != 40 {
		t.Errorf("cpu busy %v, want 40", tm.CPUBusy)
	}
	for _, bad := range []string{"", "../x", "a/b"} {
		if _, err := LocalSample(LocalConfig{Interface: bad, ProcRoot: proc, SysRoot: sys}); err == nil {
			t.Errorf("interface %q accepted", bad)
		}
	}
	if _, err := LocalSample(LocalConfig{Interface: "eth9", ProcRoot: proc, SysRoot: sys}); err == nil || !strings.Contains(err.Error(), `no interface "eth9"`) {
		t.Errorf("missing interface: %v", err)
	}
}

// TestLocalSampleHost reads this host's real /proc twice around some
// loopback traffic, and one controller serves it as it serves SNMP samples.
func TestLocalSampleHost(t *testing.T) {
	c := LocalConfig{Node: "self", Interface: "lo"}
	s1, err := LocalSample(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 86, 4), Port: 16164})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 86, 1)}, l.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for i := 0; i < 100; i++ {
		u.Write(make([]byte, 1000))
	}
	time.Sleep(1100 * time.Millisecond)
	s2, err := LocalSample(c)
	if err != nil {
		t.Fatal(err)
	}
	if d := s2.SysUpTime - s1.SysUpTime; d < 100 || d > 500 {
		t.Errorf("uptime advanced %d ticks over 1.1 s", d)
	}
	if s2.InOctets < s1.InOctets+100_000 || s2.OutOctets < s1.OutOctets+100_000 {
		t.Errorf("lo octets %d->%d / %d->%d: want +100 kB", s1.InOctets, s2.InOctets, s1.OutOctets, s2.OutOctets)
	}
	tm, err := Compute(s1, s2, Options{BandwidthOverride: 1e9, CPU: CPURaw})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host terms: %+v", tm)
	if tm.EthernetUtil <= 0 || tm.CPUBusy < 0 || tm.CPUBusy > 100 || tm.TotalLoad <= 0 {
		t.Errorf("implausible %+v", tm)
	}
	clk := newFakeClock()
	ctl, _ := NewController(ControllerConfig{Options: Options{BandwidthOverride: 1e9}}, clk)
	ctl.Step([]Reading{{Node: "self", Sample: s1}})
	clk.Advance(1100 * time.Millisecond)
	d := ctl.Step([]Reading{{Node: "self", Sample: s2}})[0]
	if d.Terms == nil {
		t.Errorf("controller on local samples: %v", d)
	}
	t.Log(d)
}

func TestLoadEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.86.5:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(LoadHandler(LocalConfig{Node: "n1", Interface: "lo"}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := FetchSample(ctx, srv.Client(), srv.URL+"/load")
	if err != nil {
		t.Fatal(err)
	}
	if s.Node != "n1" || s.IfIndex != 1 || s.MemTotalReal == 0 || !s.HaveCPU {
		t.Errorf("fetched %+v", s)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 10000)))
	}))
	defer bad.Close()
	if _, err := FetchSample(ctx, bad.Client(), bad.URL); err == nil {
		t.Error("oversized answer accepted")
	}
}

func FuzzProcParsers(f *testing.F) {
	f.Add([]byte("cpu  1 2 3 4 5 6 7 8 9 10\n  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\nMemTotal: 10 kB\nMemAvailable: 5 kB\n"), "eth0")
	f.Add([]byte("0.5 0.2 0.1 1/2 3\n"), "lo")
	f.Fuzz(func(t *testing.T, b []byte, ifname string) {
		parseUptime(b)
		parseNetDev(b, ifname)
		var s Sample
		if parseMeminfo(b, &s) == nil && (s.MemAvailReal > s.MemTotalReal || s.MemAvailSwap > s.MemTotalSwap) {
			t.Fatalf("available above total: %+v", s)
		}
		parseLoadavg(b, 5)
		parseProcStat(b)
	})
}
