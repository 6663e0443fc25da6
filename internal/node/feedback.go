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
)

// loadReport is what the admin /load answers: the node's own figures
// (Load, as before) and, in the same object, the feedback sample the
// director's agent source reads (feedback.FetchSample ignores the rest).
type loadReport struct {
	Load
	feedback.Sample
	SampleError string `json:"sample_error,omitempty"`
	// CPUFrom says where the sample's CPU ticks come from: "host"
	// (/proc/stat) or "cgroup" (the node's own cgroup v2 cpu.stat against
	// its cpu.max; see cgroupCPU).
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
		if busy, idle, ok := s.cgroupCPU("/sys/fs/cgroup", "/proc/self/cgroup", smp.SysUpTime); ok {
			rep.CPU = feedback.CPUTicks{User: busy, Idle: idle}
			rep.CPUFrom = "cgroup"
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

// cgroupCPU reads the node's CPU use from its cgroup v2 when the cgroup has
// a cpu.max limit, as ticks (1/100 s) for the sample's CPU counters: busy
// is cpu.stat's usage_usec, idle is the allowance (uptime x quota/period)
// minus busy. Nodes on one machine share /proc/stat and /proc/loadavg, so
// the host's figures cannot tell a throttled node from an idle one; its
// own cgroup can. idle is kept monotonic (a burst above the quota within
// one period would step it back), so the CPU term reads 100 % busy then.
func (s *Server) cgroupCPU(root, selfCgroup string, uptime uint32) (busy, idle uint64, ok bool) {
	b, err := os.ReadFile(selfCgroup)
	if err != nil {
		return 0, 0, false
	}
	var path string
	for _, l := range strings.Split(string(b), "\n") {
		if p, found := strings.CutPrefix(l, "0::"); found {
			path = p
		}
	}
	if path == "" || strings.Contains(path, "..") {
		return 0, 0, false
	}
	dir := root + path
	mx, err := os.ReadFile(dir + "/cpu.max")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(mx))
	if len(f) != 2 || f[0] == "max" {
		return 0, 0, false
	}
	quota, e1 := strconv.ParseUint(f[0], 10, 64)
	period, e2 := strconv.ParseUint(f[1], 10, 64)
	if e1 != nil || e2 != nil || quota == 0 || period == 0 {
		return 0, 0, false
	}
	st, err := os.ReadFile(dir + "/cpu.stat")
	if err != nil {
		return 0, 0, false
	}
	var usec uint64
	found := false
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			usec, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			found = err == nil
		}
	}
	if !found {
		return 0, 0, false
	}
	busy = usec / 10000
	allow := uint64(uptime) * quota / period
	s.cgMu.Lock()
	defer s.cgMu.Unlock()
	idle = s.cgIdle
	if allow > busy && allow-busy > idle {
		idle = allow - busy
	}
	s.cgIdle = idle
	return busy, idle, true
}
