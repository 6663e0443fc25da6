package node

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupCPU: the node's own cgroup v2 figures become CPU ticks when the
// cgroup has a cpu.max limit; idle never steps back.
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
	// A tenth of a CPU: 10 s of uptime allow 100 ticks; 0.5 s used is 50.
	write(filepath.Join(dir, "cpu.max"), "10000 100000\n")
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 500000\n")
	busy, idle, ok := s.cgroupCPU(root, self, 1000)
	if !ok || busy != 50 || idle != 50 {
		t.Fatalf("busy %d idle %d ok %v; want 50, 50", busy, idle, ok)
	}
	// One more second: 10 ticks allowed, 10 used: all busy.
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 600000\n")
	if busy, idle, _ = s.cgroupCPU(root, self, 1100); busy != 60 || idle != 50 {
		t.Fatalf("busy %d idle %d; want 60, 50", busy, idle)
	}
	// A burst above the quota: idle holds instead of stepping back.
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 800000\n")
	if busy, idle, _ = s.cgroupCPU(root, self, 1110); busy != 80 || idle != 50 {
		t.Fatalf("burst: busy %d idle %d; want 80, 50", busy, idle)
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
	if _, _, ok := s2.cgroupCPU(root, self, 1000); ok {
		t.Fatal("v1 without a quota: want host figures")
	}
	write(filepath.Join(root, "cpu/h7/node2/cpu.cfs_quota_us"), "10000\n")
	if busy, idle, ok = s2.cgroupCPU(root, self, 1000); !ok || busy != 50 || idle != 50 {
		t.Fatalf("v1: busy %d idle %d ok %v; want 50, 50", busy, idle, ok)
	}
	write(self, "0::/../etc\n")
	if _, _, ok := s.cgroupCPU(root, self, 1200); ok {
		t.Fatal("a path with .. accepted")
	}
}
