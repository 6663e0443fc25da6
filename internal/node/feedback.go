package node

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/corral-cluster/corral/internal/feedback"
	"golang.org/x/sys/unix"
)

// loadReport is what the admin /load answers: the node's own figures
// (Load, as before) and, in the same object, the feedback sample the
// director's agent source reads (feedback.FetchSample ignores the rest).
type loadReport struct {
	Load
	feedback.Sample
	SampleError string `json:"sample_error,omitempty"`
	// CPUFrom says where the sample's CPU counters come from: "host"
	// (/proc/stat, in ticks) or "cgroup" (the node's own cgroup usage
	// against its quota, in µs; see cgroupCPU). Only the ratio of busy to
	// busy+idle enters equation 4, so the unit does not matter there.
	CPUFrom string `json:"cpuFrom,omitempty"`
}

// serveLoad answers GET /load.
func (s *Server) serveLoad(w http.ResponseWriter, r *http.Request) {
	rep := loadReport{Load: s.load()}
	smp, err := feedback.LocalSample(feedback.LocalConfig{Node: s.name, Interface: s.loadInterface()})
	if err != nil {
		// The old fields stay useful; the director's FetchSample then
		// sees no sysUpTime and the controller decays the weight.
		rep.SampleError = err.Error()
	} else {
		rep.Sample, rep.CPUFrom = smp, "host"
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil {
			if busy, idle, ok := s.cgroupCPU("/sys/fs/cgroup", "/proc/self/cgroup", uint64(ts.Nano()/1000)); ok {
				rep.CPU = feedback.CPUTicks{User: busy, Idle: idle}
				rep.CPUFrom = "cgroup"
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// loadInterface is the interface whose octets enter equation 3: the
// configured one, else the one holding the service address, else the
// first up, non-loopback one, else lo.
func (s *Server) loadInterface() string {
	if s.cfg.LoadInterface != "" {
		return s.cfg.LoadInterface
	}
	var want netip.Addr
	if ap, err := netip.ParseAddrPort(s.name); err == nil {
		want = ap.Addr().Unmap()
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "lo"
	}
	first := ""
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && want.IsValid() && !want.IsUnspecified() && p.Addr().Unmap() == want {
				return ifc.Name
			}
		}
		if first == "" && ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 {
			first = ifc.Name
		}
	}
	if first == "" {
		return "lo"
	}
	return first
}

// cgroupCPU reads the node's CPU use from its own cgroup when the cgroup
// limits it (v2 cpu.max, or v1 cpu.cfs_quota_us), in µs for the sample's
// CPU counters: busy is the cgroup's usage, idle the allowance (uptimeUsec
// x quota/period) minus busy. Nodes on one machine share /proc/stat and
// /proc/loadavg, so the host's figures cannot tell a throttled node from an
// idle one; its own cgroup can. Why µs and not SNMP's 1/100 s ticks: a node
// at 5 % of a CPU uses 1.25 ticks in a 250 ms poll, so in ticks a poll read
// 0, 40, 80 or 100 % busy, and that noise moved the weights more than the
// load did. idle is kept monotonic (a burst above the quota within one
// period would step it back), so the CPU term reads 100 % busy then.
func (s *Server) cgroupCPU(root, selfCgroup string, uptimeUsec uint64) (busy, idle uint64, ok bool) {
	quota, period, usec, ok := cgroupLimit(root, selfCgroup)
	if !ok {
		return 0, 0, false
	}
	busy = usec
	allow := uptimeUsec / period * quota
	allow += uptimeUsec % period * quota / period
	s.cgMu.Lock()
	defer s.cgMu.Unlock()
	idle = s.cgIdle
	if allow > busy && allow-busy > idle {
		idle = allow - busy
	}
	s.cgIdle = idle
	return busy, idle, true
}

// cgroupLimit finds the calling process's CPU quota and usage (in µs):
// cgroup v2 first (0::PATH, cpu.max, cpu.stat usage_usec), else v1 (the
// cpu and cpuacct hierarchies: cpu.cfs_quota_us, cpu.cfs_period_us,
// cpuacct.usage in ns). ok is false without a limit.
func cgroupLimit(root, selfCgroup string) (quota, period, usec uint64, ok bool) {
	b, err := os.ReadFile(selfCgroup)
	if err != nil {
		return 0, 0, 0, false
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	num := func(v string) (uint64, bool) {
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	var cpuDir, acctDir string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || strings.Contains(f[2], "..") {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			dir := root + f[2]
			if mx := strings.Fields(read(dir + "/cpu.max")); len(mx) == 2 && mx[0] != "max" {
				q, ok1 := num(mx[0])
				p, ok2 := num(mx[1])
				for _, sl := range strings.Split(read(dir+"/cpu.stat"), "\n") {
					if v, found := strings.CutPrefix(sl, "usage_usec "); found {
						if u, ok3 := num(v); ok1 && ok2 && ok3 && q > 0 && p > 0 {
							return q, p, u, true
						}
					}
				}
			}
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			switch c {
			case "cpu":
				cpuDir = root + "/" + f[1] + f[2]
			case "cpuacct":
				acctDir = root + "/" + f[1] + f[2]
			}
		}
	}
	if cpuDir == "" || acctDir == "" {
		return 0, 0, 0, false
	}
	qs := read(cpuDir + "/cpu.cfs_quota_us")
	if qs == "" || strings.HasPrefix(qs, "-") {
		return 0, 0, 0, false
	}
	q, ok1 := num(qs)
	p, ok2 := num(read(cpuDir + "/cpu.cfs_period_us"))
	ns, ok3 := num(read(acctDir + "/cpuacct.usage"))
	if !ok1 || !ok2 || !ok3 || q == 0 || p == 0 {
		return 0, 0, 0, false
	}
	return q, p, ns / 1000, true
}
