// Package sched holds the director's connection schedulers with the Linux
// Virtual Server's semantics (net/netfilter/ipvs/ip_vs_*.c), plus MWLC from
// paper 000 (Chang & Chen, CSSNS, eq. 1-2). They are pure and deterministic:
// the servers' state and the new flow go in, an index comes out; rr and wrr
// carry their position in the scheduler value itself, as LVS keeps it in
// sched_data. The same vectors (testdata/vectors.json) are meant to run
// against the XDP dataplane's in-kernel schedulers.
//
// Common rules, as in LVS: a server of weight 0 takes no new connections
// (drain); ties go to the server listed first; Pick returns -1 when no server
// can take the flow.
package sched

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Server is one real server as a scheduler sees it.
type Server struct {
	Key      string // stable identity (address:port); sh and mh hash it
	Weight   int
	Active   int   // established connections
	Inactive int   // connections in other states
	Pending  int64 // mwlc: bytes still to send on its live connections
}

// Flow is what is known of a new connection or request.
type Flow struct {
	Src     netip.Addr
	SrcPort uint16
	Size    int64 // mwlc: bytes this request will send (0 if unknown)
}

// Scheduler picks a server for a new flow.
type Scheduler interface {
	Name() string
	Pick(servers []Server, f Flow) int
}

// Names lists the schedulers New knows, with what each does.
var Names = map[string]string{
	"rr":   "round robin",
	"wrr":  "weighted round robin",
	"lc":   "least connections (active*256 + inactive)",
	"wlc":  "weighted least connections",
	"sed":  "shortest expected delay ((active+1)/weight)",
	"nq":   "never queue (an idle server first, else sed)",
	"sh":   "source hashing (a client always gets the same server)",
	"mh":   "Maglev consistent hashing",
	"mwlc": "modified weighted least connections: least bytes still to send per weight (paper 000)",
}

// New returns a fresh scheduler by name.
func New(name string) (Scheduler, error) {
	switch name {
	case "rr":
		return &RR{Last: -1}, nil
	case "wrr":
		return &WRR{I: -1}, nil
	case "lc":
		return LC{}, nil
	case "wlc":
		return WLC{}, nil
	case "sed":
		return SED{}, nil
	case "nq":
		return NQ{}, nil
	case "sh":
		return &SH{}, nil
	case "mh":
		return &MH{}, nil
	case "mwlc":
		return MWLC{}, nil
	}
	known := make([]string, 0, len(Names))
	for n := range Names {
		known = append(known, n)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("unknown scheduler %q (known: %s)", name, strings.Join(known, ", "))
}

// RR is round robin (ip_vs_rr.c): the next server after the last one chosen
// that has a weight above 0.
type RR struct{ Last int }

func (*RR) Name() string { return "rr" }
func (r *RR) Pick(s []Server, _ Flow) int {
	n := len(s)
	for i := 1; i <= n; i++ {
		j := (r.Last + i) % n
		if j < 0 {
			j += n
		}
		if s[j].Weight > 0 {
			r.Last = j
			return j
		}
	}
	return -1
}

// WRR is weighted round robin as the LVS documentation gives it: walk the
// list; each time it wraps, lower the current weight cw by the weights'
// greatest common divisor (back to the maximum weight below 1); pick the
// first server whose weight is at least cw. Over max/gcd rounds each server
// is picked weight/gcd times, interleaved.
type WRR struct {
	I  int // last position
	CW int // current weight
}

func (*WRR) Name() string { return "wrr" }
func (w *WRR) Pick(s []Server, _ Flow) int {
	n := len(s)
	mw, g := 0, 0
	for _, x := range s {
		if x.Weight > 0 {
			mw = max(mw, x.Weight)
			g = gcd(g, x.Weight)
		}
	}
	if mw == 0 {
		return -1
	}
	if w.CW > mw {
		w.CW = mw // weights fell since the last pick
	}
	for steps := 0; steps <= n*(mw/g+1); steps++ {
		w.I = (w.I + 1) % n
		if w.I == 0 {
			w.CW -= g
			if w.CW <= 0 {
				w.CW = mw
			}
		}
		if s[w.I].Weight >= w.CW && s[w.I].Weight > 0 {
			return w.I
		}
	}
	return -1
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// overhead is LVS's ip_vs_dest_conn_overhead: an active connection costs as
// much as 256 inactive ones.
func overhead(x Server) int64 { return int64(x.Active)<<8 + int64(x.Inactive) }

// LC is least connections (ip_vs_lc.c): the smallest overhead wins.
type LC struct{}

func (LC) Name() string { return "lc" }
func (LC) Pick(s []Server, _ Flow) int {
	best := -1
	for i, x := range s {
		if x.Weight > 0 && (best < 0 || overhead(x) < overhead(s[best])) {
			best = i
		}
	}
	return best
}

// leastRatio picks the server minimising cost/weight, comparing
// cost_best*w_i > cost_i*w_best as LVS does (integers, no division), so the
// first of equals wins.
func leastRatio(s []Server, cost func(Server) int64) int {
	best := -1
	for i, x := range s {
		if x.Weight <= 0 {
			continue
		}
		if best < 0 || cost(s[best])*int64(x.Weight) > cost(x)*int64(s[best].Weight) {
			best = i
		}
	}
	return best
}

// WLC is weighted least connections (ip_vs_wlc.c): overhead/weight.
type WLC struct{}

func (WLC) Name() string                { return "wlc" }
func (WLC) Pick(s []Server, _ Flow) int { return leastRatio(s, overhead) }

// SED is shortest expected delay (ip_vs_sed.c): (active+1)/weight.
type SED struct{}

func sedCost(x Server) int64 { return int64(x.Active) + 1 }

func (SED) Name() string                { return "sed" }
func (SED) Pick(s []Server, _ Flow) int { return leastRatio(s, sedCost) }

// NQ is never queue (ip_vs_nq.c): the first server with no active
// connection, otherwise as SED.
type NQ struct{}

func (NQ) Name() string { return "nq" }
func (NQ) Pick(s []Server, _ Flow) int {
	for i, x := range s {
		if x.Weight > 0 && x.Active == 0 {
			return i
		}
	}
	return leastRatio(s, sedCost)
}

// MWLC is paper 000's modified weighted least connections: the server j
// minimising C_j/W_j, C being the bytes still to send on its live
// connections (eq. 1 simplified to eq. 2; ALL_CONNECTIONS cancels out).
type MWLC struct{}

func (MWLC) Name() string { return "mwlc" }
func (MWLC) Pick(s []Server, _ Flow) int {
	return leastRatio(s, func(x Server) int64 { return x.Pending })
}

// pool remembers the keys and weights a hashing table was built for, so
// that it is rebuilt only when they change; checking costs no allocation,
// as it runs for every new flow.
type pool struct {
	keys    []string
	weights []int
}

func (p *pool) changed(s []Server) bool {
	if len(p.keys) != len(s) {
		return true
	}
	for i, x := range s {
		if p.keys[i] != x.Key || p.weights[i] != x.Weight {
			return true
		}
	}
	return false
}

func (p *pool) remember(s []Server) {
	p.keys, p.weights = p.keys[:0], p.weights[:0]
	for _, x := range s {
		p.keys = append(p.keys, x.Key)
		p.weights = append(p.weights, x.Weight)
	}
}

// hash32 is the kernel's hash_32 (GOLDEN_RATIO_32), as ip_vs_sh uses.
func hash32(v uint32, bits uint) uint32 { return (v * 0x61C88647) >> (32 - bits) }

// foldAddr is ip_vs_sh's address fold: IPv4 as a number, IPv6 as the XOR of
// its four words.
func foldAddr(a netip.Addr) uint32 {
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	}
	b := a.As16()
	var v uint32
	for i := 0; i < 16; i += 4 {
		v ^= uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
	}
	return v
}

const (
	shBits = 8
	// SHSize is the number of sh buckets (ip_vs_sh's 2^8).
	SHSize = 1 << shBits
)

// SH is source hashing (ip_vs_sh.c, the ONE-IP idea): a 256-bucket table
// filled in list order, each server taking as many consecutive buckets as its
// weight (a server of weight 0 still takes one, as in LVS); the bucket is
// hash_32(source address). When the bucket's server has weight 0 the next
// buckets are tried (LVS's sh-fallback), so draining a server moves only its
// clients.
type SH struct {
	built pool
	table [SHSize]int
}

func (*SH) Name() string { return "sh" }

func (h *SH) build(s []Server) {
	h.built.remember(s)
	h.table = SHTable(s)
}

// SHTable is sh's bucket table for a pool: bucket -> server index, -1 for
// an empty pool. The XDP dataplane loads the same table into the kernel.
func SHTable(s []Server) [SHSize]int {
	var t [SHSize]int
	p, count := 0, 0
	for i := range t {
		if len(s) == 0 {
			t[i] = -1
			continue
		}
		t[i] = p
		count++
		if count >= s[p].Weight {
			p = (p + 1) % len(s)
			count = 0
		}
	}
	return t
}

func (h *SH) Pick(s []Server, f Flow) int {
	if h.built.changed(s) {
		h.build(s)
	}
	if len(s) == 0 {
		return -1
	}
	base := hash32(foldAddr(f.Src), shBits)
	for off := uint32(0); off < SHSize; off++ {
		if j := h.table[(base+off)&(SHSize-1)]; s[j].Weight > 0 {
			return j
		}
	}
	return -1
}

// MH is Maglev consistent hashing (Eisenbud et al., NSDI 2016; LVS ip_vs_mh):
// each server walks its own permutation of a prime-sized lookup table
// (offset = h1(key) mod M, skip = h2(key) mod (M-1) + 1), servers taking turns
// in list order — weight/gcd entries per turn — until the table is full. The
// source address hashes to an entry. M is 65537 (Katran's, 2^16+1; every
// director of an HA group must use the same) and only grows past 655
// servers, to stay at least 100 times the servers: it must not change with
// the pool, or every key would move. Removing one of N servers
// then moves about 1/N of the sources. Hashes are FNV-1a (LVS uses keyed siphash; the
// table differs, the properties do not).
type MH struct {
	built pool
	table []int
}

var primes = []int{65537, 131071, 262139}

// TableSize is the lookup table size MH uses for n servers.
func TableSize(n int) int {
	for _, p := range primes {
		if p >= 100*n {
			return p
		}
	}
	return primes[len(primes)-1]
}

// fnv64 is FNV-1a over salt then s, inline: mh hashes every new flow.
func fnv64(salt, s string) uint64 {
	h := uint64(14695981039346656037)
	for _, part := range [2]string{salt, s} {
		for i := 0; i < len(part); i++ {
			h = (h ^ uint64(part[i])) * 1099511628211
		}
	}
	return h
}

func (*MH) Name() string { return "mh" }

func (m *MH) build(s []Server) {
	m.built.remember(s)
	m.table = MHTable(s)
}

// MHTable is mh's lookup table for a pool: entry -> server index; nil when
// no server has a weight. The XDP dataplane loads the same table into the
// kernel.
func MHTable(s []Server) []int {
	g := 0
	for _, x := range s {
		if x.Weight > 0 {
			g = gcd(g, x.Weight)
		}
	}
	if g == 0 {
		return nil
	}
	M := TableSize(len(s))
	table := make([]int, M)
	for i := range table {
		table[i] = -1
	}
	next := make([]uint64, len(s))
	skip := make([]uint64, len(s))
	for i, x := range s {
		next[i] = fnv64("offset:", x.Key) % uint64(M)
		skip[i] = fnv64("skip:", x.Key)%uint64(M-1) + 1
	}
	for filled := 0; filled < M; {
		for i, x := range s {
			for t := 0; t < x.Weight/g && filled < M; t++ {
				c := next[i]
				for table[c] >= 0 {
					c = (c + skip[i]) % uint64(M)
				}
				next[i] = (c + skip[i]) % uint64(M)
				table[c] = i
				filled++
			}
		}
	}
	return table
}

func (m *MH) Pick(s []Server, f Flow) int {
	if m.built.changed(s) {
		m.build(s)
	}
	if len(m.table) == 0 {
		return -1
	}
	b := f.Src.As16()
	return m.table[fnv64("", string(b[:]))%uint64(len(m.table))]
}
