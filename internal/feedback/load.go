// Package feedback turns a node's load into a scheduler weight: paper 003's
// load terms (equations 1-8, from SNMP MIB-II and UCD-SNMP values or the
// same figures read from /proc), LVS feedbackd's weight rule with clamps and
// damping (Controller), and an SNMP poller (Poller) built on gosnmp.
package feedback

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// saturatedIfSpeed is what ifSpeed (a Gauge32) reports for links faster than
// 4.29 Gbit/s or with no known speed (a veth): RFC 2863 says use ifHighSpeed.
const saturatedIfSpeed = 4294967295

// CPUTicks are the UCD ssCpuRaw* counters (or /proc/stat's fields), in
// ticks. Only differences between two samples mean anything.
type CPUTicks struct {
	User      uint64 `json:"user"`
	Nice      uint64 `json:"nice"`
	System    uint64 `json:"system"` // kernel time without interrupts (ssCpuRawSystem on Linux)
	Idle      uint64 `json:"idle"`
	Wait      uint64 `json:"wait"`
	Interrupt uint64 `json:"interrupt"`
	SoftIRQ   uint64 `json:"softirq"`
	Steal     uint64 `json:"steal"`
}

// Sample is one reading of a node's counters and gauges, in the units the
// MIBs use, whether it came from snmpd or from /proc (LocalSample). The JSON
// form is what a node's load endpoint serves (DecodeSample reads it).
type Sample struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"` // when the reading was taken, by the reader's clock

	SysUpTime uint32 `json:"sysUpTime"` // TimeTicks, 1/100 s since the agent started

	IfIndex     int    `json:"ifIndex"`
	InOctets    uint64 `json:"inOctets"`    // ifHCInOctets (or ifInOctets if !Counter64)
	OutOctets   uint64 `json:"outOctets"`   // ifHCOutOctets (or ifOutOctets)
	Counter64   bool   `json:"counter64"`   // octet counters are 64-bit (wrap at 2^64, else 2^32)
	IfSpeed     uint64 `json:"ifSpeed"`     // bit/s; 4294967295 means "see ifHighSpeed"
	IfHighSpeed uint64 `json:"ifHighSpeed"` // Mbit/s; 0 if unknown

	MemTotalSwap uint64 `json:"memTotalSwap"` // kB
	MemAvailSwap uint64 `json:"memAvailSwap"` // kB
	MemTotalReal uint64 `json:"memTotalReal"` // kB
	MemAvailReal uint64 `json:"memAvailReal"` // kB

	LaLoadInt uint64 `json:"laLoadInt"` // laLoad_x * 100 (UCD laLoadInt), x = 1, 5 or 15 minutes

	HaveCPU bool     `json:"haveCPU"` // CPU holds ssCpuRaw* counters
	CPU     CPUTicks `json:"cpu"`

	DskTotal uint64 `json:"dskTotal"` // kB
	DskUsed  uint64 `json:"dskUsed"`  // kB
}

// CPU sources for the CPU term of equation 4.
const (
	// CPULaLoad is the paper's term: laLoad = laLoad_x * 100 (equation 7).
	CPULaLoad = "laload"
	// CPURaw replaces laLoad by the busy share of CPU time between the two
	// samples, in percent, from the ssCpuRaw* counters: the load average is
	// a 1-minute exponential average, too slow to follow a load step.
	CPURaw = "cpuraw"
)

// Options say how to read two samples.
type Options struct {
	// BandwidthOverride, if nonzero, is the link speed in bit/s, used instead
	// of ifSpeed/ifHighSpeed (a veth or a shaped link reports no useful one).
	BandwidthOverride uint64
	// CPU is CPULaLoad (default, the paper's equation 7) or CPURaw.
	CPU string
	// IncludeMemReal adds memRealLoad (equation 6) to Sys_Utilization: the
	// paper computes it but leaves it out of equation 4; SPEC S4 allows it.
	IncludeMemReal bool
}

// Terms are every term of equations 1-8 for one node between two samples,
// in percent as the paper writes them, and the raw differences behind them.
type Terms struct {
	DeltaInOctets  uint64  `json:"deltaInOctets"`  // ifInOctets(x+t) - ifInOctets(x), modulo the counter width
	DeltaOutOctets uint64  `json:"deltaOutOctets"` // ifOutOctets(x+t) - ifOutOctets(x)
	DeltaTicks     uint32  `json:"deltaTicks"`     // sysUpTime(x+t) - sysUpTime(x), 1/100 s
	Bandwidth      uint64  `json:"bandwidth"`      // bit/s, the ifSpeed of equation 3
	BandwidthFrom  string  `json:"bandwidthFrom"`  // ifSpeed, ifHighSpeed or override
	EthernetUtil   float64 `json:"ethernetUtilization"`
	MemSwapLoad    float64 `json:"memSwapLoad"`            // equation 5
	MemRealLoad    float64 `json:"memRealLoad"`            // equation 6
	LaLoad         float64 `json:"laLoad"`                 // equation 7
	CPUBusy        float64 `json:"cpuBusy"`                // CPURaw only: busy percent over the interval
	CPUFrom        string  `json:"cpuFrom"`                // which CPU term went into equation 4
	DskLoad        float64 `json:"dskLoad"`                // equation 8
	SysUtil        float64 `json:"sysUtilization"`         // equation 4
	TotalLoad      float64 `json:"totalLoad"`              // equation 1
	MemRealInSys   bool    `json:"memRealInSys,omitempty"` // Options.IncludeMemReal
}

// ErrReset means the two samples do not belong to one run of the agent (it
// restarted, or its clock went back): start again from the newer sample.
var ErrReset = errors.New("feedback: counters reset between samples")

// ErrStale means the agent has not refreshed a figure since the older
// sample (net-snmp refreshes its CPU counters every 5 s): keep the older
// sample and try again with a later one.
var ErrStale = errors.New("feedback: agent figures not refreshed yet")

// Compute applies equations 1-8 to two samples of one node (prev older than
// cur). It is a pure function of its arguments.
func Compute(prev, cur Sample, o Options) (Terms, error) {
	var t Terms
	// TimeTicks is 32 bits: unsigned subtraction is the difference modulo
	// 2^32, right across a wrap (every 497 days).
	t.DeltaTicks = cur.SysUpTime - prev.SysUpTime
	if t.DeltaTicks == 0 {
		return t, fmt.Errorf("node %q: sysUpTime did not advance (%d): no time base yet: %w", cur.Node, cur.SysUpTime, ErrStale)
	}
	// An agent restart makes sysUpTime small again, which modulo 2^32 looks
	// like a huge step: compare with the reader's clock (with a generous
	// margin for the agent's and our clocks disagreeing).
	if !prev.At.IsZero() && !cur.At.IsZero() {
		wall := cur.At.Sub(prev.At)
		ticks := time.Duration(t.DeltaTicks) * 10 * time.Millisecond
		if wall < 0 || ticks > 2*wall+5*time.Second {
			return t, fmt.Errorf("node %q: sysUpTime %d -> %d over %v: %w", cur.Node, prev.SysUpTime, cur.SysUpTime, wall, ErrReset)
		}
	}
	if prev.IfIndex != cur.IfIndex || prev.Counter64 != cur.Counter64 {
		return t, fmt.Errorf("node %q: interface %d/%v -> %d/%v: %w", cur.Node, prev.IfIndex, prev.Counter64, cur.IfIndex, cur.Counter64, ErrReset)
	}
	t.DeltaInOctets = counterDelta(prev.InOctets, cur.InOctets, cur.Counter64)
	t.DeltaOutOctets = counterDelta(prev.OutOctets, cur.OutOctets, cur.Counter64)

	switch {
	case o.BandwidthOverride > 0:
		t.Bandwidth, t.BandwidthFrom = o.BandwidthOverride, "override"
	case cur.IfSpeed > 0 && cur.IfSpeed < saturatedIfSpeed:
		t.Bandwidth, t.BandwidthFrom = cur.IfSpeed, "ifSpeed"
	case cur.IfHighSpeed > 0:
		t.Bandwidth, t.BandwidthFrom = cur.IfHighSpeed*1_000_000, "ifHighSpeed"
	default:
		return t, fmt.Errorf("feedback: node %q interface %d: no link speed (ifSpeed %d, ifHighSpeed %d): set a bandwidth override", cur.Node, cur.IfIndex, cur.IfSpeed, cur.IfHighSpeed)
	}

	// Equation 3 with sysUpTime in 1/100 s: the interval is DeltaTicks/100
	// seconds, so utilisation = bits / (seconds * bandwidth) * 100. (The
	// paper prints the denominator as dSysUpTime * ifSpeed * 10, which does
	// not match its own units; docs/feedback.md shows the algebra.)
	bits := (float64(t.DeltaInOctets) + float64(t.DeltaOutOctets)) * 8
	seconds := float64(t.DeltaTicks) / 100
	t.EthernetUtil = bits / (seconds * float64(t.Bandwidth)) * 100

	t.MemSwapLoad = ratioLoad(cur.MemTotalSwap, cur.MemAvailSwap) // equation 5
	t.MemRealLoad = ratioLoad(cur.MemTotalReal, cur.MemAvailReal) // equation 6
	t.LaLoad = float64(cur.LaLoadInt)                             // equation 7: laLoadInt is laLoad_x*100 already
	if cur.DskTotal > 0 {
		t.DskLoad = float64(min(cur.DskUsed, cur.DskTotal)) / float64(cur.DskTotal) * 100 // equation 8
	}

	cpu := t.LaLoad
	t.CPUFrom = CPULaLoad
	switch o.CPU {
	case "", CPULaLoad:
	case CPURaw:
		if !prev.HaveCPU || !cur.HaveCPU {
			return t, fmt.Errorf("feedback: node %q: cpu source %q but the samples carry no ssCpuRaw counters", cur.Node, CPURaw)
		}
		b, err := cpuBusy(prev.CPU, cur.CPU)
		if err != nil {
			return t, fmt.Errorf("feedback: node %q: %w", cur.Node, err)
		}
		t.CPUBusy, cpu, t.CPUFrom = b, b, CPURaw
	default:
		return t, fmt.Errorf("feedback: unknown cpu source %q (want %s or %s)", o.CPU, CPULaLoad, CPURaw)
	}
	t.SysUtil = t.MemSwapLoad + cpu + t.DskLoad // equation 4
	if o.IncludeMemReal {
		t.SysUtil += t.MemRealLoad
		t.MemRealInSys = true
	}
	t.TotalLoad = t.EthernetUtil + t.SysUtil // equation 1
	return t, nil
}

// counterDelta is cur-prev for a Counter64 (wide) or Counter32 that may have
// wrapped once: unsigned subtraction modulo the counter's width.
func counterDelta(prev, cur uint64, wide bool) uint64 {
	if wide {
		return cur - prev
	}
	return uint64(uint32(cur) - uint32(prev))
}

// ratioLoad is (total-avail)/total*100, 0 when there is no total (no swap).
func ratioLoad(total, avail uint64) float64 {
	if total == 0 {
		return 0
	}
	return float64(total-min(avail, total)) / float64(total) * 100
}

// cpuBusy is the percentage of non-idle, non-iowait ticks between two
// readings. The ssCpuRaw* counters are Counter32: each field's difference is
// taken modulo 2^32 when both readings fit in 32 bits.
func cpuBusy(a, b CPUTicks) (float64, error) {
	d := func(x, y uint64) uint64 {
		if x <= math.MaxUint32 && y <= math.MaxUint32 {
			return uint64(uint32(y) - uint32(x))
		}
		return y - x
	}
	busy := d(a.User, b.User) + d(a.Nice, b.Nice) + d(a.System, b.System) +
		d(a.Interrupt, b.Interrupt) + d(a.SoftIRQ, b.SoftIRQ) + d(a.Steal, b.Steal)
	idle := d(a.Idle, b.Idle) + d(a.Wait, b.Wait)
	if busy+idle == 0 {
		return 0, fmt.Errorf("no CPU ticks elapsed between samples: %w", ErrStale)
	}
	return float64(busy) / float64(busy+idle) * 100, nil
}

// maxSampleJSON bounds what DecodeSample reads from a node.
const maxSampleJSON = 4096

// DecodeSample parses a Sample as a node's load endpoint serves it (JSON),
// rejecting oversized or inconsistent input.
func DecodeSample(b []byte) (Sample, error) {
	var s Sample
	if len(b) > maxSampleJSON {
		return s, fmt.Errorf("feedback: load sample of %d bytes exceeds %d", len(b), maxSampleJSON)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Sample{}, fmt.Errorf("feedback: load sample: %w", err)
	}
	if len(s.Node) > 253 {
		return Sample{}, fmt.Errorf("feedback: load sample: node name of %d bytes", len(s.Node))
	}
	if s.MemAvailSwap > s.MemTotalSwap || s.MemAvailReal > s.MemTotalReal || s.DskUsed > s.DskTotal {
		return Sample{}, fmt.Errorf("feedback: load sample from %q: available or used exceeds total", s.Node)
	}
	return s, nil
}
