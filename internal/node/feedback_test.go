package node

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/corral-cluster/corral/internal/feedback"
)

// TestCgroupCPU: the node's own cgroup v2 figures become CPU counters (µs)
// when the cgroup has a cpu.max limit; idle never steps back.
func TestCgroupCPU(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self")
	dir := filepath.Join(root, "h7", "node1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(self, "0::/h7/node1\n")
	write(filepath.Join(dir, "cpu.max"), "max 100000\n")
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 5000000\nuser_usec 1\n")
	s := &Server{}
	if _, _, ok := s.cgroupCPU(root, self, 1000); ok {
		t.Fatal("no limit: want host figures")
	}
	// A tenth of a CPU: 10 s of uptime allow 1 s; 0.5 s used.
	write(filepath.Join(dir, "cpu.max"), "10000 100000\n")
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 500000\n")
	busy, idle, ok := s.cgroupCPU(root, self, 10_000_000)
	if !ok || busy != 500000 || idle != 500000 {
		t.Fatalf("busy %d idle %d ok %v; want 500000, 500000", busy, idle, ok)
	}
	// One more second: 0.1 s allowed, 0.1 s used: all busy.
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 600000\n")
	if busy, idle, _ = s.cgroupCPU(root, self, 11_000_000); busy != 600000 || idle != 500000 {
		t.Fatalf("busy %d idle %d; want 600000, 500000", busy, idle)
	}
	// A burst above the quota: idle holds instead of stepping back.
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 800000\n")
	if busy, idle, _ = s.cgroupCPU(root, self, 11_100_000); busy != 800000 || idle != 500000 {
		t.Fatalf("burst: busy %d idle %d; want 800000, 500000", busy, idle)
	}
	// cgroup v1: the cpu and cpuacct hierarchies.
	for _, d := range []string{"cpu/h7/node2", "cpuacct/h7/node2"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	write(self, "3:cpuacct:/h7/node2\n2:cpu:/h7/node2\n0::/\n")
	write(filepath.Join(root, "cpu/h7/node2/cpu.cfs_quota_us"), "-1\n")
	write(filepath.Join(root, "cpu/h7/node2/cpu.cfs_period_us"), "100000\n")
	write(filepath.Join(root, "cpuacct/h7/node2/cpuacct.usage"), "500000000\n")
	s2 := &Server{}
	if _, _, ok := s2.cgroupCPU(root, self, 10_000_000); ok {
		t.Fatal("v1 without a quota: want host figures")
	}
	write(filepath.Join(root, "cpu/h7/node2/cpu.cfs_quota_us"), "10000\n")
	if busy, idle, ok = s2.cgroupCPU(root, self, 10_000_000); !ok || busy != 500000 || idle != 500000 {
		t.Fatalf("v1: busy %d idle %d ok %v; want 500000, 500000", busy, idle, ok)
	}
	write(self, "0::/../etc\n")
	if _, _, ok := s.cgroupCPU(root, self, 12_000_000); ok {
		t.Fatal("a path with .. accepted")
	}
}

// TestCgroupCPUFine: a node at 2 % of a CPU, half busy over a 250 ms poll,
// reads half busy. In 1/100 s ticks (the code before) it used 0.25 of a
// tick per poll and read 0 % or 100 %, and that noise moved the weights.
func TestCgroupCPUFine(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self")
	dir := filepath.Join(root, "n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(self, []byte("0::/n\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("2000 100000\n"), 0o644)
	s := &Server{}
	var prevB, prevI uint64
	used, now := uint64(0), uint64(100_000_000)
	for i := 0; i < 8; i++ {
		os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(fmt.Sprintf("usage_usec %d\n", used)), 0o644)
		b, idle, ok := s.cgroupCPU(root, self, now)
		if !ok {
			t.Fatal("no figures")
		}
		if i > 1 {
			cur, err := feedback.Compute(sampleWith(prevB, prevI, 0), sampleWith(b, idle, 25), feedback.Options{CPU: feedback.CPURaw, BandwidthOverride: 1e9})
			if err != nil {
				t.Fatal(err)
			}
			if cur.CPUBusy < 45 || cur.CPUBusy > 55 {
				t.Fatalf("poll %d: %.1f %% busy; want 50 %%", i, cur.CPUBusy)
			}
		}
		prevB, prevI = b, idle
		used += 2500 // half of the 5 ms a 2 % quota allows in 250 ms
		now += 250_000
	}
}

// sampleWith is a sample carrying only CPU counters and sysUpTime.
func sampleWith(busy, idle uint64, up uint32) feedback.Sample {
	return feedback.Sample{SysUpTime: 1000 + up, HaveCPU: true, CPU: feedback.CPUTicks{User: busy, Idle: idle}, IfSpeed: 1e9}
}
