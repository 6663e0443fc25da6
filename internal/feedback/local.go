package feedback

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LocalConfig says what LocalSample reads on this host: the agent path, for
// sites without SNMP, giving the same figures snmpd would.
type LocalConfig struct {
	Node        string // name to put in the sample
	Interface   string // interface to measure (its ifHCIn/OutOctets), e.g. eth0
	LoadMinutes int    // x of laLoad_x: 1 (default), 5 or 15
	DiskPath    string // file system for dskLoad; default /
	ProcRoot    string // default /proc (tests point it elsewhere)
	SysRoot     string // default /sys
}

// maxProcFile bounds what is read from one /proc or /sys file.
const maxProcFile = 1 << 20

func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcFile))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, nil
}

// LocalSample reads this host's figures from /proc, /sys and statfs in the
// units and meaning of the SNMP objects Compute expects: sysUpTime from
// /proc/uptime, 64-bit octet counters from /proc/net/dev, the link speed from
// /sys/class/net/IF/speed, memory from /proc/meminfo (memAvailReal is
// MemAvailable), laLoadInt from /proc/loadavg, CPU ticks from /proc/stat and
// the disk from statfs.
func LocalSample(c LocalConfig) (Sample, error) {
	proc, sys := c.ProcRoot, c.SysRoot
	if proc == "" {
		proc = "/proc"
	}
	if sys == "" {
		sys = "/sys"
	}
	s := Sample{Node: c.Node, At: time.Now(), Counter64: true}
	if c.Interface == "" || strings.ContainsAny(c.Interface, "/\x00") || c.Interface == "." || c.Interface == ".." {
		return s, fmt.Errorf("feedback: local load: bad interface name %q", c.Interface)
	}
	b, err := readProc(filepath.Join(proc, "uptime"))
	if err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if s.SysUpTime, err = parseUptime(b); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/uptime: %w", proc, err)
	}
	if b, err = readProc(filepath.Join(proc, "net", "dev")); err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if s.InOctets, s.OutOctets, err = parseNetDev(b, c.Interface); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/net/dev: %w", proc, err)
	}
	ifdir := filepath.Join(sys, "class", "net", c.Interface)
	if b, err = readProc(filepath.Join(ifdir, "ifindex")); err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if s.IfIndex, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/ifindex: %q", ifdir, b)
	}
	// speed is Mbit/s; lo, veths and down links give an error or -1: no
	// speed, so Compute asks for an override as it does for snmpd.
	if b, err = readProc(filepath.Join(ifdir, "speed")); err == nil {
		if mb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && mb > 0 {
			s.IfHighSpeed = uint64(mb)
			s.IfSpeed = min(uint64(mb)*1_000_000, saturatedIfSpeed)
		}
	}
	if b, err = readProc(filepath.Join(proc, "meminfo")); err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if err = parseMeminfo(b, &s); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/meminfo: %w", proc, err)
	}
	if b, err = readProc(filepath.Join(proc, "loadavg")); err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if s.LaLoadInt, err = parseLoadavg(b, c.LoadMinutes); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/loadavg: %w", proc, err)
	}
	if b, err = readProc(filepath.Join(proc, "stat")); err != nil {
		return s, fmt.Errorf("feedback: local load: %w", err)
	}
	if s.CPU, err = parseProcStat(b); err != nil {
		return s, fmt.Errorf("feedback: local load: %s/stat: %w", proc, err)
	}
	s.HaveCPU = true
	disk := c.DiskPath
	if disk == "" {
		disk = "/"
	}
	var st unix.Statfs_t
	if err := unix.Statfs(disk, &st); err != nil {
		return s, fmt.Errorf("feedback: local load: statfs %s: %w", disk, err)
	}
	// As UCD's dskTable: total and used (total - free) in kB.
	bs := uint64(st.Bsize)
	s.DskTotal = st.Blocks * bs / 1024
	s.DskUsed = (st.Blocks - min(st.Bfree, st.Blocks)) * bs / 1024
	return s, nil
}

// parseUptime turns /proc/uptime's seconds into TimeTicks (1/100 s),
// modulo 2^32 as sysUpTime wraps.
func parseUptime(b []byte) (uint32, error) {
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, fmt.Errorf("empty")
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil || sec < 0 || math.IsInf(sec, 0) || sec > 1e15 {
		return 0, fmt.Errorf("uptime %q", f[0])
	}
	return uint32(uint64(sec * 100)), nil
}

// parseNetDev finds ifname's receive and transmit byte counters.
func parseNetDev(b []byte, ifname string) (in, out uint64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != ifname {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			return 0, 0, fmt.Errorf("interface %s: %d fields, want 16", ifname, len(f))
		}
		if in, err = strconv.ParseUint(f[0], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("interface %s: receive bytes %q", ifname, f[0])
		}
		if out, err = strconv.ParseUint(f[8], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("interface %s: transmit bytes %q", ifname, f[8])
		}
		return in, out, nil
	}
	return 0, 0, fmt.Errorf("no interface %q", ifname)
}

// parseMeminfo fills the memory fields (kB) from /proc/meminfo.
func parseMeminfo(b []byte, s *Sample) error {
	v := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree":
			f := strings.Fields(rest)
			if len(f) < 1 {
				return fmt.Errorf("%s: no value", k)
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q", k, f[0])
			}
			v[k] = n
		}
	}
	if _, ok := v["MemTotal"]; !ok {
		return fmt.Errorf("no MemTotal")
	}
	avail, ok := v["MemAvailable"]
	if !ok {
		avail = v["MemFree"] // kernels before 3.14
	}
	s.MemTotalReal, s.MemAvailReal = v["MemTotal"], min(avail, v["MemTotal"])
	s.MemTotalSwap, s.MemAvailSwap = v["SwapTotal"], min(v["SwapFree"], v["SwapTotal"])
	return nil
}

// parseLoadavg gives laLoad_x * 100 for x = 1, 5 or 15 minutes.
func parseLoadavg(b []byte, minutes int) (uint64, error) {
	i := map[int]int{0: 0, 1: 0, 5: 1, 15: 2}
	idx, ok := i[minutes]
	if !ok {
		return 0, fmt.Errorf("load minutes %d (want 1, 5 or 15)", minutes)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("%q: want three load averages", b)
	}
	x, err := strconv.ParseFloat(f[idx], 64)
	if err != nil || x < 0 || x > 1e9 {
		return 0, fmt.Errorf("load average %q", f[idx])
	}
	return uint64(math.Round(x * 100)), nil
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat.
func parseProcStat(b []byte) (CPUTicks, error) {
	var t CPUTicks
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return t, fmt.Errorf("cpu line has %d fields, want at least 9", len(f))
		}
		var n [8]uint64
		for i := range n {
			x, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return t, fmt.Errorf("cpu field %d: %q", i+1, f[i+1])
			}
			n[i] = x
		}
		// user nice system idle iowait irq softirq steal
		return CPUTicks{User: n[0], Nice: n[1], System: n[2], Idle: n[3], Wait: n[4], Interrupt: n[5], SoftIRQ: n[6], Steal: n[7]}, nil
	}
	return t, fmt.Errorf("no cpu line")
}

// LoadHandler serves LocalSample(c) as JSON: the node's load endpoint.
func LoadHandler(c LocalConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := LocalSample(c)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s)
	})
}

// FetchSample gets a node's load endpoint (LoadHandler) and decodes it,
// reading at most what DecodeSample accepts.
func FetchSample(ctx context.Context, client *http.Client, url string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("feedback: load endpoint %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("feedback: load endpoint: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxSampleJSON+1))
	if err != nil {
		return Sample{}, fmt.Errorf("feedback: load endpoint %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("feedback: load endpoint %s: %s: %.200s", url, resp.Status, b)
	}
	s, err := DecodeSample(b)
	if err != nil {
		return Sample{}, fmt.Errorf("%w (from %s)", err, url)
	}
	// Our clock, not the node's, times the sample (as for SNMP).
	s.At = time.Now()
	return s, nil
}
