package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestMain gives every cluster the tests start one shared secret (see
// pfstest.SecretMain).
func TestMain(m *testing.M) { pfstest.SecretMain(m, nil) }

// TestMetaWorkerPhases drives a worker as the parent does, over pipes, on a
// temporary directory (the ext4 baseline's code path), in both layouts.
func TestMetaWorkerPhases(t *testing.T) {
	for _, tc := range []struct {
		target string
		shared bool
		size   int
	}{{"local", true, 4096}, {"local", false, 0}, {"local+fsync", true, 4096}, {"local+fsync", false, 4096}} {
		target, shared := tc.target, tc.shared
		{
			dir := t.TempDir()
			c := MetaWorkerConfig{Target: target, ID: 3, Files: 25, Size: tc.size, Threads: 2, Shared: shared, Dir: dir}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- MetaWorker(context.Background(), c, inR, outW); outW.Close() }()
			t.Cleanup(func() { inW.Close(); outR.Close() })
			sc := bufio.NewScanner(outR)
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("%s shared=%v: first line %q, want ready", target, shared, sc.Text())
			}
			sub := dir
			if !shared {
				sub = filepath.Join(dir, "p3")
			}
			count := func() int {
				ents, err := os.ReadDir(sub)
				if err != nil {
					t.Fatal(err)
				}
				return len(ents)
			}
			for _, ph := range metaPhases {
				if _, err := io.WriteString(inW, ph+"\n"); err != nil {
					t.Fatal(err)
				}
				if !sc.Scan() {
					t.Fatalf("%s %s: no answer: %v", target, ph, sc.Err())
				}
				var r PhaseResult
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("%s %s: answer %q: %v", target, ph, sc.Text(), err)
				}
				if r.Err != "" || r.Phase != ph || r.Ops != 25 || r.End < r.Start {
					t.Fatalf("%s %s: result %+v", target, ph, r)
				}
				switch ph {
				case "create", "stat", "read":
					if n := count(); n != 25 {
						t.Fatalf("%s after %s: %d files in %s, want 25", target, ph, n, sub)
					}
					b, err := os.ReadFile(filepath.Join(sub, "p3.f000007"))
					if err != nil || len(b) != tc.size {
						t.Fatalf("%s after %s: file 7: %d bytes, %v", target, ph, len(b), err)
					}
				case "delete":
					if n := count(); n != 0 {
						t.Fatalf("%s after delete: %d files left", target, n)
					}
				}
			}
			// A phase that fails reports it instead of ending the worker:
			// the files are gone, so stat fails.
			io.WriteString(inW, "stat\n")
			if !sc.Scan() {
				t.Fatal("no answer to a failing stat")
			}
			var r PhaseResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil || !strings.Contains(r.Err, "stat") {
				t.Fatalf("failing stat: %q (%v), want an error naming stat", sc.Text(), err)
			}
			inW.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("worker ended with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("worker did not end at EOF")
			}
		}
	}
}

func TestMetaWorkerRejects(t *testing.T) {
	err := MetaWorker(context.Background(), MetaWorkerConfig{Target: "nfs", Files: 1, Size: 1, Dir: t.TempDir()}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"nfs"`) {
		t.Fatalf("unknown target: %v", err)
	}
	if err := MetaWorker(context.Background(), MetaWorkerConfig{Target: "local", Dir: t.TempDir()}, strings.NewReader(""), io.Discard); err == nil {
		t.Fatal("zero files accepted")
	}
}

// TestZipf checks the generator against its own probabilities: a
// chi-square statistic over the 50 most popular ranks plus the rest as one
// bin, with a bound far above its mean (51 degrees of freedom), and the
// head's share near the harmonic number's prediction.
func TestZipf(t *testing.T) {
	const n, draws = 10000, 200000
	z := newZipf(n, 1.0)
	if math.Abs(z.cdf[n-1]-1) > 1e-12 {
		t.Fatalf("cdf ends at %v", z.cdf[n-1])
	}
	// P(rank 0) = 1/H(n), H(10^4) ≈ 9.7876.
	if p := z.prob(0); math.Abs(p-1/9.7876) > 1e-3 {
		t.Fatalf("P(0) = %v, want about %v", p, 1/9.7876)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const bins = 50
	counts := make([]int, bins+1)
	for i := 0; i < draws; i++ {
		k := z.sample(r)
		if k < 0 || k >= n {
			t.Fatalf("rank %d out of [0,%d)", k, n)
		}
		counts[min(k, bins)]++
	}
	chi := 0.0
	for b := 0; b <= bins; b++ {
		p := 1 - z.cdf[bins-1] // the tail bin
		if b < bins {
			p = z.prob(b)
		}
		e := p * draws
		chi += (float64(counts[b]) - e) * (float64(counts[b]) - e) / e
	}
	// Mean 50, sd 10: 120 is seven standard deviations out.
	if chi > 120 {
		t.Fatalf("chi-square %.1f over %d bins: draws do not follow the distribution (counts %v)", chi, bins+1, counts[:5])
	}
	// Ranks fall monotonically in popularity, roughly as 1/k.
	if !(counts[0] > counts[1] && counts[1] > counts[3] && counts[3] > counts[9]) {
		t.Fatalf("counts not decreasing with rank: %v", counts[:10])
	}
	if ratio := float64(counts[0]) / float64(counts[9]); ratio < 7 || ratio > 13 {
		t.Fatalf("rank 1 / rank 10 = %.1f, want about 10 for s = 1", ratio)
	}
}

func TestZipfLua(t *testing.T) {
	z := newZipf(100, 1.0)
	s := zipfLua(z, 500, 7)
	if s != zipfLua(z, 500, 7) {
		t.Fatal("same seed, different scripts: targets would see different loads")
	}
	for _, want := range []string{"function request()", "function setup(thread)", `"/z/%05d.bin"`} {
		if !strings.Contains(s, want) {
			t.Fatalf("script lacks %q", want)
		}
	}
	if webPath(42) != "/z/00042.bin" {
		t.Fatalf("webPath(42) = %q: the script and the files disagree", webPath(42))
	}
}

// TestMetaResultFiles writes a result as the scenario does and reads it back.
func TestMetaResultFiles(t *testing.T) {
	dir := t.TempDir()
	rates := func(c, s, r, d float64) map[string]float64 {
		return map[string]float64{"create": c, "stat": s, "read": r, "delete": d}
	}
	res := &MetaResult{Scenario: "meta", When: time.Unix(0, 0).UTC(), Procs: 4, Files: 10, Size: 4096, Threads: 1, Rows: []MetaRow{
		{Target: "local+fsync", Layout: "private", OpsPerS: rates(2000, 400000, 100000, 20000)},
		{Target: "etcd", Members: 3, Layout: "private", OpsPerS: rates(1000, 5000, 5000, 1000)},
		{Target: "lib", Members: 3, Layout: "private", OpsPerS: rates(12000, 90000, 10000, 9000)},
		{Target: "fuse", Members: 3, Layout: "private", OpsPerS: rates(800, 2000, 2000, 700)},
	}, Web: []WebRow{{Target: "corral (2 nodes)", ReqPerS: 900, VsDirect: 0.9}, {Target: "bare Go net/http (memory)", ReqPerS: 950, VsDirect: 0.95}, {Target: "nginx (2 workers, local disk)", ReqPerS: 1000, VsDirect: 1}}}
	res.ratios()
	res.Goals = metaGoals(res.Rows, 4, 1)
	if r := res.Rows[2].Ratio["create"]; math.Abs(r-6) > 1e-9 {
		t.Fatalf("lib create ratio to local+fsync = %v, want 6", r)
	}
	met := map[string]bool{}
	for _, g := range res.Goals {
		if g.Layout == "private" {
			met[g.What] = g.Met
		}
	}
	want := map[string]bool{"library creates (4 procs, 1 in flight; goal with 4 procs, 1 in flight)": true, "library creates / etcd creates": true,
		"library stats": true, "library deletes": true, "FUSE creates / ext4+fsync creates": false}
	for k, v := range want {
		if met[k] != v {
			t.Errorf("goal %q met = %v, want %v", k, met[k], v)
		}
	}
	if err := writeJSONMD(dir, res, res.Markdown()); err != nil {
		t.Fatal(err)
	}
	if err := res.plot(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back MetaResult
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != 4 || back.Rows[2].OpsPerS["create"] != 12000 {
		t.Fatalf("results.json does not read back: %v %+v", err, back.Rows)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, want := range []string{"| lib | 3 | private | 12000 |", "Corral library / etcd", "| 3 | private | 12.00 |", "Zipf web req/s / nginx req/s | 0.60 | 0.90", "Zipf web req/s / bare Go net/http req/s | 0.90 | 0.95", "| goal | want | got |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "meta.svg"))
	if err != nil || !strings.Contains(string(svg), "lib (3)") {
		t.Fatalf("meta.svg: %v", err)
	}
}

// TestRunMetaQuick runs the whole scenario, small, with one member: worker
// processes of the real binary, the local, etcd and library rows (and FUSE
// as root).
func TestRunMetaQuick(t *testing.T) {
	bin := pfstest.Binary(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	res, err := RunMeta(ctx, MetaConfig{Bin: bin, Dir: t.TempDir(), Out: out, Procs: 2, Files: 20, Size: 4096, Threads: 1,
		Members: []int{1}, FUSE: true, Etcd: true, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	seen := map[string]int{}
	for _, r := range res.Rows {
		seen[r.Target]++
		for _, ph := range metaPhases {
			if !(r.OpsPerS[ph] > 0) {
				t.Errorf("%s %s %s: %v ops/s", r.Target, r.Layout, ph, r.OpsPerS[ph])
			}
		}
	}
	want := map[string]int{"local": 2, "local+fsync": 2, "lib": 2, "lib-serial": 2}
	if etcdBuilt {
		want["etcd"] = 2
	}
	if lab.Have(t, lab.FUSE) {
		want["fuse"] = 2
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%d %s rows, want %d (rows %v)", seen[k], k, v, seen)
		}
	}
	for _, f := range []string{"results.json", "results.md", "meta.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestLeaderID(t *testing.T) {
	for _, c := range []struct {
		json string
		want uint64
	}{
		{`{"ID":1,"Leader":2,"Term":3,"Members":[{"ID":1,"Addr":"a"},{"ID":2,"Addr":"b"}]}`, 2},
		{`{"members":[{"id":1,"addr":"a","leader":false},{"id":3,"addr":"c","leader":true}]}`, 3},
		{`[{"id":1,"role":"follower"},{"id":2,"role":"Leader"}]`, 2},
		{`{"leader":0,"members":[]}`, 0},
		{`not json`, 0},
	} {
		if got := leaderID([]byte(c.json)); got != c.want {
			t.Errorf("leaderID(%s) = %d, want %d", c.json, got, c.want)
		}
	}
}
