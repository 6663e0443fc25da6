package sched

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the Go schedulers")

func srv(key string, w, active, inactive int) Server {
	return Server{Key: key, Weight: w, Active: active, Inactive: inactive}
}

func pickN(t *testing.T, name string, s []Server, n int) []int {
	t.Helper()
	sc, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = sc.Pick(s, Flow{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})})
	}
	return out
}

func TestTable(t *testing.T) {
	a, b, c := "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"
	cases := []struct {
		name  string
		sched string
		s     []Server
		n     int
		want  []int
	}{
		{"rr cycles", "rr", []Server{srv(a, 1, 0, 0), srv(b, 1, 0, 0), srv(c, 1, 0, 0)}, 5, []int{0, 1, 2, 0, 1}},
		{"rr skips weight 0", "rr", []Server{srv(a, 1, 0, 0), srv(b, 0, 0, 0), srv(c, 1, 0, 0)}, 4, []int{0, 2, 0, 2}},
		{"rr none", "rr", []Server{srv(a, 0, 0, 0)}, 2, []int{-1, -1}},
		// LVS documentation's example: weights 4,3,2 give AABABCABC.
		{"wrr 4:3:2", "wrr", []Server{srv(a, 4, 0, 0), srv(b, 3, 0, 0), srv(c, 2, 0, 0)}, 9, []int{0, 0, 1, 0, 1, 2, 0, 1, 2}},
		{"wrr gcd", "wrr", []Server{srv(a, 2, 0, 0), srv(b, 4, 0, 0)}, 3, []int{1, 0, 1}},
		{"wrr drain", "wrr", []Server{srv(a, 0, 0, 0), srv(b, 1, 0, 0)}, 2, []int{1, 1}},
		// lc: overhead = active*256 + inactive; the first of equals.
		{"lc", "lc", []Server{srv(a, 1, 1, 0), srv(b, 1, 0, 300), srv(c, 1, 0, 255)}, 1, []int{2}},
		{"lc tie", "lc", []Server{srv(a, 1, 1, 0), srv(b, 5, 1, 0)}, 1, []int{0}},
		{"lc ignores weight but not 0", "lc", []Server{srv(a, 0, 0, 0), srv(b, 1, 9, 0)}, 1, []int{1}},
		// wlc: overhead/weight: a 256/1, b 512/3 -> b.
		{"wlc", "wlc", []Server{srv(a, 1, 1, 0), srv(b, 3, 2, 0)}, 1, []int{1}},
		{"wlc tie first", "wlc", []Server{srv(a, 1, 1, 0), srv(b, 2, 2, 0)}, 1, []int{0}},
		// sed: (active+1)/weight: a 2/1, b 3/2 -> b; inactive ignored.
		{"sed", "sed", []Server{srv(a, 1, 1, 0), srv(b, 2, 2, 999)}, 1, []int{1}},
		// nq: an idle server even if slow; else sed.
		{"nq idle", "nq", []Server{srv(a, 10, 1, 0), srv(b, 1, 0, 5)}, 1, []int{1}},
		{"nq busy", "nq", []Server{srv(a, 10, 5, 0), srv(b, 1, 1, 0)}, 1, []int{0}},
		{"empty", "wlc", nil, 1, []int{-1}},
	}
	for _, c := range cases {
		if got := pickN(t, c.sched, c.s, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMWLC(t *testing.T) {
	s := []Server{{Key: "a", Weight: 1, Pending: 10 << 20}, {Key: "b", Weight: 2, Pending: 15 << 20}, {Key: "c", Weight: 1, Pending: 8 << 20}}
	// C/W: a 10M, b 7.5M, c 8M -> b.
	if got := (MWLC{}).Pick(s, Flow{}); got != 1 {
		t.Fatalf("mwlc picked %d, want 1", got)
	}
	s[1].Weight = 0
	if got := (MWLC{}).Pick(s, Flow{}); got != 2 {
		t.Fatalf("mwlc with b drained picked %d, want 2", got)
	}
}

func TestWRRProportions(t *testing.T) {
	s := []Server{srv("a", 5, 0, 0), srv("b", 3, 0, 0), srv("c", 1, 0, 0), srv("d", 0, 0, 0)}
	count := make([]int, len(s))
	w := &WRR{I: -1}
	for i := 0; i < 9000; i++ {
		count[w.Pick(s, Flow{})]++
	}
	if !reflect.DeepEqual(count, []int{5000, 3000, 1000, 0}) {
		t.Fatalf("wrr counts %v, want 5000 3000 1000 0", count)
	}
}

func TestSourceHashing(t *testing.T) {
	s := []Server{srv("a", 1, 0, 0), srv("b", 1, 0, 0), srv("c", 1, 0, 0)}
	sh := &SH{}
	r := rand.New(rand.NewPCG(1, 2))
	moved, total := 0, 2000
	for i := 0; i < total; i++ {
		ip := netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		first := sh.Pick(s, Flow{Src: ip})
		if again := sh.Pick(s, Flow{Src: ip, SrcPort: 999}); again != first {
			t.Fatal("sh is not sticky per source address")
		}
		s[1].Weight = 0
		after := sh.Pick(s, Flow{Src: ip})
		s[1].Weight = 1
		if first != 1 && after != first {
			moved++
		}
		if after == 1 {
			t.Fatal("sh picked a drained server")
		}
	}
	if moved != 0 {
		t.Fatalf("draining b moved %d clients of other servers", moved)
	}
}

func TestMaglevMovesAboutOneNth(t *testing.T) {
	for _, n := range []int{3, 5, 10} {
		s := make([]Server, n)
		for i := range s {
			s[i] = srv(fmt.Sprintf("10.0.0.%d:80", i+1), 1, 0, 0)
		}
		if TableSize(n) < 100*n {
			t.Fatalf("table %d for %d servers", TableSize(n), n)
		}
		before, after := &MH{}, &MH{}
		less := append([]Server(nil), s[:n-1]...)
		r := rand.New(rand.NewPCG(uint64(n), 7))
		keys := 20000
		moved, share := 0, make([]int, n)
		for i := 0; i < keys; i++ {
			ip := netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
			a, b := before.Pick(s, Flow{Src: ip}), after.Pick(less, Flow{Src: ip})
			share[a]++
			if a != n-1 && a != b {
				moved++ // a key whose server survived moved anyway
			}
		}
		frac := float64(moved) / float64(keys)
		if frac > 0.5/float64(n) {
			t.Errorf("n=%d: %.3f of keys on surviving servers moved (want well under 1/n)", n, frac)
		}
		for i, c := range share {
			if d := float64(c)/float64(keys) - 1/float64(n); d > 0.35/float64(n) || d < -0.35/float64(n) {
				t.Errorf("n=%d: server %d got %.3f of keys", n, i, float64(c)/float64(keys))
			}
		}
	}
}

func TestMaglevWeights(t *testing.T) {
	s := []Server{srv("a", 3, 0, 0), srv("b", 1, 0, 0)}
	m := &MH{}
	m.Pick(s, Flow{Src: netip.MustParseAddr("1.1.1.1")})
	count := [2]int{}
	for _, v := range m.table {
		count[v]++
	}
	if r := float64(count[0]) / float64(count[1]); r < 2.8 || r > 3.2 {
		t.Fatalf("weights 3:1 gave table shares %v", count)
	}
}

// Vector is one recorded scenario: servers, a sequence of flows, and the
// picks; rr and wrr keep their position across the sequence.

func genVectors() []Vector {
	r := rand.New(rand.NewPCG(42, 42))
	var out []Vector
	for _, name := range []string{"rr", "wrr", "lc", "wlc", "sed", "nq", "sh", "mh", "mwlc"} {
		for k := 0; k < 6; k++ {
			n := 1 + r.IntN(6)
			v := Vector{Name: fmt.Sprintf("%s-%d", name, k), Scheduler: name}
			for i := 0; i < n; i++ {
				v.Servers = append(v.Servers, Server{Key: fmt.Sprintf("10.1.0.%d:80", i+1), Weight: r.IntN(5),
					Active: r.IntN(20), Inactive: r.IntN(600), Pending: int64(r.IntN(1 << 24))})
			}
			for i := 0; i < 12; i++ {
				v.Sources = append(v.Sources, netip.AddrFrom4([4]byte{192, 0, byte(r.IntN(3)), byte(r.Uint32())}).String())
			}
			sc, _ := New(name)
			for _, src := range v.Sources {
				v.Want = append(v.Want, sc.Pick(v.Servers, Flow{Src: netip.MustParseAddr(src)}))
			}
			out = append(out, v)
		}
	}
	return out
}

// TestVectors checks the schedulers against testdata/vectors.json, the file
// the XDP dataplane's schedulers are checked against too.
func TestVectors(t *testing.T) {
	const path = "testdata/vectors.json"
	if *update {
		b, _ := json.MarshalIndent(genVectors(), "", " ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vs []Vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range vs {
		sc, err := New(v.Scheduler)
		if err != nil {
			t.Fatal(err)
		}
		for i, src := range v.Sources {
			if got := sc.Pick(v.Servers, Flow{Src: netip.MustParseAddr(src)}); got != v.Want[i] {
				t.Fatalf("%s: flow %d from %s: picked %d, want %d", v.Name, i, src, got, v.Want[i])
			}
		}
	}
}

// TestEverySchedulerHasDataplanes: the capability table and New agree.
func TestEverySchedulerHasDataplanes(t *testing.T) {
	for name := range Names {
		if _, ok := carriedBy[name]; !ok {
			t.Errorf("%s: not in the dataplane table", name)
		}
	}
	for name := range carriedBy {
		if _, err := New(name); err != nil {
			t.Errorf("%s in the dataplane table: %v", name, err)
		}
	}
	if err := Supports("mwlc", "l4"); err == nil || !strings.Contains(err.Error(), "mwlc needs dataplane l7") {
		t.Errorf("mwlc on l4: %v", err)
	}
}
