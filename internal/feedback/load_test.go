package feedback

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Each vector is worked out by hand from paper 003's definitions:
//
//	(1) Total_load = Ethernet_Utilization + Sys_Utilization
//	(3) Ethernet_Utilization = (dIn + dOut) * 8 / (dSysUpTime/100 * ifSpeed) * 100
//	(4) Sys_Utilization = memSwapLoad + laLoad + dskLoad
//	(5) memSwapLoad = (memTotalSwap - memAvailSwap) / memTotalSwap * 100
//	(6) memRealLoad = (memTotalReal - memAvailReal) / memTotalReal * 100
//	(7) laLoad = laLoad_x * 100          (UCD's laLoadInt)
//	(8) dskLoad = dskUsed / dskTotal * 100
func TestComputeVectors(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	type vec struct {
		name       string
		prev, cur  Sample
		o          Options
		eth, swap  float64
		real, la   float64
		cpu, dsk   float64
		sys, total float64
		bwFrom     string
	}
	vs := []vec{{
		// 100 Mbit/s link, 2 s (200 ticks): in 10,000,000 + out 2,500,000
		// octets = 12,500,000 * 8 = 100,000,000 bits; / (2 s * 1e8 bit/s)
		// = 0.5 -> 50 %. Swap (2,000,000-1,500,000)/2,000,000 = 25 %;
		// real (4,000,000-1,000,000)/4,000,000 = 75 %; laLoad 0.37*100 =
		// 37; disk 4,000,000/10,000,000 = 40 %. Sys = 25+37+40 = 102 (eq.
		// 4 has no memRealLoad); total = 50+102 = 152.
		name: "paper terms at 100 Mbit/s",
		prev: Sample{At: t0, SysUpTime: 1000, IfIndex: 2, Counter64: true, InOctets: 5_000_000, OutOctets: 7_000_000, IfSpeed: 100_000_000},
		cur: Sample{At: t0.Add(2 * time.Second), SysUpTime: 1200, IfIndex: 2, Counter64: true, InOctets: 15_000_000, OutOctets: 9_500_000, IfSpeed: 100_000_000,
			MemTotalSwap: 2_000_000, MemAvailSwap: 1_500_000, MemTotalReal: 4_000_000, MemAvailReal: 1_000_000,
			LaLoadInt: 37, DskTotal: 10_000_000, DskUsed: 4_000_000},
		eth: 50, swap: 25, real: 75, la: 37, cpu: 0, dsk: 40, sys: 102, total: 152, bwFrom: "ifSpeed",
	}, {
		// The same with memRealLoad added to eq. 4 (SPEC S4's option):
		// sys = 102 + 75 = 177, total = 227.
		name: "memRealLoad included",
		prev: Sample{At: t0, SysUpTime: 1000, IfIndex: 2, Counter64: true, InOctets: 5_000_000, OutOctets: 7_000_000, IfSpeed: 100_000_000},
		cur: Sample{At: t0.Add(2 * time.Second), SysUpTime: 1200, IfIndex: 2, Counter64: true, InOctets: 15_000_000, OutOctets: 9_500_000, IfSpeed: 100_000_000,
			MemTotalSwap: 2_000_000, MemAvailSwap: 1_500_000, MemTotalReal: 4_000_000, MemAvailReal: 1_000_000,
			LaLoadInt: 37, DskTotal: 10_000_000, DskUsed: 4_000_000},
		o:   Options{IncludeMemReal: true},
		eth: 50, swap: 25, real: 75, la: 37, dsk: 40, sys: 177, total: 227, bwFrom: "ifSpeed",
	}, {
		// 64-bit counter wraps: in goes from 2^64-1000 to 3000, i.e. 4000
		// octets; 1 s (100 ticks). ifSpeed is saturated (4294967295), so
		// ifHighSpeed 10,000 Mbit/s = 1e10 bit/s: 32,000 bits / (1 s *
		// 1e10) * 100 = 3.2e-4 %. No swap configured: memSwapLoad 0.
		name: "64-bit wrap and ifHighSpeed",
		prev: Sample{At: t0, SysUpTime: 500, IfIndex: 3, Counter64: true, InOctets: math.MaxUint64 - 999, OutOctets: 42},
		cur:  Sample{At: t0.Add(time.Second), SysUpTime: 600, IfIndex: 3, Counter64: true, InOctets: 3000, OutOctets: 42, IfSpeed: 4294967295, IfHighSpeed: 10_000},
		eth:  3.2e-4, bwFrom: "ifHighSpeed",
	}, {
		// 32-bit counter and sysUpTime both wrap: in 4,294,967,000 -> 704
		// is 296 + 704 = 1000 octets; sysUpTime 4,294,967,200 -> 104 is 96
		// + 104 = 200 ticks = 2 s. Override 8000 bit/s: 8000 bits / (2 s *
		// 8000) * 100 = 50 %.
		name: "32-bit wraps and override",
		prev: Sample{At: t0, SysUpTime: 4_294_967_200, IfIndex: 1, InOctets: 4_294_967_000},
		cur:  Sample{At: t0.Add(2 * time.Second), SysUpTime: 104, IfIndex: 1, InOctets: 704, IfSpeed: 4294967295},
		o:    Options{BandwidthOverride: 8000},
		eth:  50, bwFrom: "override",
	}, {
		// CPU from ssCpuRaw: busy +300 user +100 system = 400, idle +500
		// wait +100 = 600: 400/1000 = 40 %; it replaces laLoad (90) in eq.
		// 4: sys = 0 + 40 + 0 = 40; no traffic, total 40.
		name: "cpuraw",
		prev: Sample{At: t0, SysUpTime: 0, IfIndex: 1, IfSpeed: 1000, HaveCPU: true,
			CPU: CPUTicks{User: 100, System: 50, Idle: 800, Wait: 50}},
		cur: Sample{At: t0.Add(time.Second), SysUpTime: 100, IfIndex: 1, IfSpeed: 1000, HaveCPU: true, LaLoadInt: 90,
			CPU: CPUTicks{User: 400, System: 150, Idle: 1300, Wait: 150}},
		o:  Options{CPU: CPURaw},
		la: 90, cpu: 40, sys: 40, total: 40, bwFrom: "ifSpeed",
	}, {
		// Counter32 CPU ticks wrap too: idle 4,294,967,196 -> 4 is 104
		// ticks, user 0 -> 26: 26/(26+104) = 20 %.
		name: "cpuraw wrap",
		prev: Sample{SysUpTime: 0, IfIndex: 1, IfSpeed: 1000, HaveCPU: true, CPU: CPUTicks{Idle: 4_294_967_196}},
		cur:  Sample{SysUpTime: 100, IfIndex: 1, IfSpeed: 1000, HaveCPU: true, CPU: CPUTicks{User: 26, Idle: 4}},
		o:    Options{CPU: CPURaw},
		cpu:  20, sys: 20, total: 20, bwFrom: "ifSpeed",
	}}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for _, v := range vs {
		tm, err := Compute(v.prev, v.cur, v.o)
		if err != nil {
			t.Errorf("%s: %v", v.name, err)
			continue
		}
		got := []float64{tm.EthernetUtil, tm.MemSwapLoad, tm.MemRealLoad, tm.LaLoad, tm.CPUBusy, tm.DskLoad, tm.SysUtil, tm.TotalLoad}
		want := []float64{v.eth, v.swap, v.real, v.la, v.cpu, v.dsk, v.sys, v.total}
		names := []string{"eth", "swap", "real", "la", "cpu", "dsk", "sys", "total"}
		if v.total == 0 {
			want[7] = v.eth + v.sys
		}
		for i := range got {
			if !near(got[i], want[i]) {
				t.Errorf("%s: %s = %v, want %v", v.name, names[i], got[i], want[i])
			}
		}
		if tm.BandwidthFrom != v.bwFrom {
			t.Errorf("%s: bandwidth from %s, want %s", v.name, tm.BandwidthFrom, v.bwFrom)
		}
	}
}

func TestComputeErrors(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ok := Sample{At: t0, SysUpTime: 100, IfIndex: 1, IfSpeed: 1000}
	later := ok
	later.At, later.SysUpTime = t0.Add(time.Second), 200
	cases := []struct {
		name      string
		prev, cur Sample
		o         Options
		want      string
		isReset   bool
	}{
		{"no time", ok, ok, Options{}, "did not advance", false},
		{"no speed", Sample{IfIndex: 1}, Sample{IfIndex: 1, SysUpTime: 1}, Options{}, "no link speed", false},
		{"saturated, no high speed", Sample{IfIndex: 1}, Sample{IfIndex: 1, SysUpTime: 1, IfSpeed: 4294967295}, Options{}, "no link speed", false},
		// 1 s of wall time but sysUpTime jumped 4,294,967,196 ticks: the
		// agent restarted.
		{"agent restart", later, Sample{At: t0.Add(2 * time.Second), SysUpTime: 100, IfIndex: 1, IfSpeed: 1000}, Options{}, "reset", true},
		{"interface changed", ok, Sample{At: later.At, SysUpTime: 200, IfIndex: 2, IfSpeed: 1000}, Options{}, "reset", true},
		{"cpuraw without counters", ok, later, Options{CPU: CPURaw}, "no ssCpuRaw", false},
		{"cpuraw no ticks", Sample{SysUpTime: 1, IfSpeed: 1, HaveCPU: true}, Sample{SysUpTime: 2, IfSpeed: 1, HaveCPU: true}, Options{CPU: CPURaw}, "no CPU ticks", false},
		{"unknown cpu source", ok, later, Options{CPU: "hrProcessorLoad"}, "unknown cpu source", false},
	}
	for _, c := range cases {
		_, err := Compute(c.prev, c.cur, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrReset) != c.isReset {
			t.Errorf("%s: error %v, want one containing %q (reset %v)", c.name, err, c.want, c.isReset)
		}
	}
}

func TestDecodeSample(t *testing.T) {
	s := Sample{Node: "n1", SysUpTime: 7, IfIndex: 2, InOctets: 1 << 40, Counter64: true, IfSpeed: 1e9,
		MemTotalReal: 10, MemAvailReal: 5, LaLoadInt: 12, HaveCPU: true, CPU: CPUTicks{User: 3}, DskTotal: 9, DskUsed: 1}
	b, _ := json.Marshal(s)
	got, err := DecodeSample(b)
	if err != nil || got != s {
		t.Fatalf("round trip: %v %+v", err, got)
	}
	for _, bad := range []string{`{`, `{"memTotalReal":1,"memAvailReal":2}`, `{"dskTotal":1,"dskUsed":2}`, `{"ifIndex":"x"}`,
		`{"node":"` + strings.Repeat("x", 300) + `"}`, strings.Repeat(" ", 5000)} {
		if _, err := DecodeSample([]byte(bad)); err == nil {
			t.Errorf("%.40q accepted", bad)
		}
	}
}

func FuzzDecodeSample(f *testing.F) {
	f.Add([]byte(`{"node":"n","sysUpTime":100,"ifIndex":1,"inOctets":5,"ifSpeed":1000}`))
	f.Add([]byte(`{"memTotalSwap":1,"memAvailSwap":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSample(b)
		if err != nil {
			return
		}
		// Whatever decodes must go through Compute without panicking and
		// give finite terms or an error.
		p := s
		p.SysUpTime--
		p.At = time.Time{}
		tm, err := Compute(p, s, Options{CPU: CPURaw})
		if err == nil && (math.IsNaN(tm.TotalLoad) || math.IsInf(tm.TotalLoad, 0)) {
			t.Fatalf("non-finite load %v from %q", tm.TotalLoad, b)
		}
	})
}
