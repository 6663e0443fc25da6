package feedback

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (f *fakeClock) Now() time.Time          { return f.t }
func (f *fakeClock) Advance(d time.Duration) { f.t = f.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }
func loadSample(node string, at time.Time, ticks uint32, load float64) Sample {
	// The whole load rides on laLoad (equation 7: laLoadInt = load*100 in
	// percent, so aggregate load = laLoadInt/100 with LoadScale 100); the
	// link carries nothing and has a fixed speed.
	return Sample{Node: node, At: at, SysUpTime: ticks, IfIndex: 1, Counter64: true,
		IfSpeed: 1e9, LaLoadInt: uint64(math.Round(load * 100))}
}

// plant is a closed loop the controller steers: demand D (in units of one
// normal node's capacity) is split by weight, and node i's load over a poll
// is its share of D divided by its capacity, as for a CPU-bound service.
type plant struct {
	names []string
	cap   []float64
	D     float64
}

func (p *plant) loads(w map[string]int) []float64 {
	sum := 0
	for _, n := range p.names {
		sum += w[n]
	}
	out := make([]float64, len(p.names))
	for i, n := range p.names {
		out[i] = p.D * float64(w[n]) / float64(sum) / p.cap[i]
	}
	return out
}

type trace struct {
	at      []time.Duration
	weights []map[string]int
	dec     [][]Decision
}

// run steps the loop for n polls; step(i) may change the plant before poll i.
func run(t *testing.T, c *Controller, clk *fakeClock, p *plant, n int, step func(i int)) trace {
	t.Helper()
	start := clk.Now()
	var tr trace
	w := map[string]int{}
	for _, name := range p.names {
		w[name] = c.Config().Initial
	}
	ticks := uint32(1000)
	interval := c.Config().Interval
	for i := 0; i < n; i++ {
		if step != nil {
			step(i)
		}
		clk.Advance(interval)
		ticks += uint32(interval / (10 * time.Millisecond))
		ls := p.loads(w)
		var rs []Reading
		for j, name := range p.names {
			rs = append(rs, Reading{Node: name, Sample: loadSample(name, clk.Now(), ticks, ls[j])})
		}
		ds := c.Step(rs)
		w = map[string]int{}
		for _, d := range ds {
			w[d.Node] = d.Weight
		}
		tr.at = append(tr.at, clk.Now().Sub(start))
		tr.weights = append(tr.weights, w)
		tr.dec = append(tr.dec, ds)
	}
	return tr
}

// settledAt is the index of the first poll from which node's weight stays
// within tol of its final value, or -1.
func settledAt(tr trace, node string, tol int) int {
	final := tr.weights[len(tr.weights)-1][node]
	idx := -1
	for i := len(tr.weights) - 1; i >= 0; i-- {
		if d := tr.weights[i][node] - final; d > tol || d < -tol {
			break
		}
		idx = i
	}
	return idx
}

// signChanges counts reversals of direction of node's weight.
func signChanges(tr trace, node string) int {
	n, last := 0, 0
	for i := 1; i < len(tr.weights); i++ {
		d := tr.weights[i][node] - tr.weights[i-1][node]
		s := 0
		if d > 0 {
			s = 1
		} else if d < 0 {
			s = -1
		}
		if s != 0 && last != 0 && s != last {
			n++
		}
		if s != 0 {
			last = s
		}
	}
	return n
}

// TestStepResponseSettles: three equal nodes, then node c becomes slower
// (a load step); for every slowdown and offered load the slow node's weight
// settles within 6 polls (4 below overload) and reverses direction at most 3
// times.
func TestStepResponseSettles(t *testing.T) {
	const stepAt, polls = 10, 60
	for _, slow := range []float64{0.5, 1.0 / 3, 0.2} {
		for _, offered := range []float64{0.5, 0.9, 1.1} {
			clk := newFakeClock()
			c, err := NewController(ControllerConfig{Interval: 500 * time.Millisecond}, clk)
			if err != nil {
				t.Fatal(err)
			}
			// Offered load is relative to the capacity after the step:
			// at 90 % with c 3x slower, D = 0.9 * (1 + 1 + 1/3) = 2.1.
			p := &plant{names: []string{"a", "b", "c"}, cap: []float64{1, 1, 1}, D: offered * (2 + slow)}
			tr := run(t, c, clk, p, polls, func(i int) {
				if i == stepAt {
					p.cap[2] = slow
				}
			})
			s := settledAt(tr, "c", 2)
			n := s - stepAt + 1
			if n < 0 {
				n = 0 // never moved: the step needed no change
			}
			final := tr.dec[polls-1]
			t.Logf("slow %.2f offered %.1f: settled after %d polls (%v) at weights %v, loads a %.2f c %.2f, reversals %d",
				slow, offered, n, time.Duration(n)*c.Config().Interval, tr.weights[polls-1],
				final[0].Aggregate, final[2].Aggregate, signChanges(tr, "c"))
			if s < 0 || n > 6 {
				t.Errorf("slow %.2f offered %.1f: settling took %d polls, want <= 6", slow, offered, n)
			}
			// Below overload (the benchmark's 90 % case) it takes at most 4
			// polls: 2 s at a 500 ms interval.
			if offered < 1 && time.Duration(n)*c.Config().Interval > 2*time.Second {
				t.Errorf("slow %.2f offered %.1f: settling took %v, want <= 2s", slow, offered, time.Duration(n)*c.Config().Interval)
			}
			for _, name := range p.names {
				if sc := signChanges(tr, name); sc > 3 {
					t.Errorf("slow %.2f offered %.1f: node %s reversed %d times, want <= 3", slow, offered, name, sc)
				}
			}
			// Settled means balanced: below overload, the slow node is at
			// most target + dead band (+ rounding); above it, every node's
			// load is within a dead band (+ rounding) of the mean.
			la, lc := final[0].Aggregate, final[2].Aggregate
			if offered < 1 && lc > 1.05+0.03 {
				t.Errorf("slow %.2f offered %.1f: slow node's load %.3f above target", slow, offered, lc)
			}
			if offered > 1 && math.Abs(la-lc) > 0.15 {
				t.Errorf("slow %.2f offered %.1f: overloaded loads %.3f and %.3f not balanced", slow, offered, la, lc)
			}
		}
	}
}

// TestClampsHold drives random loads, from idle to 50x overload, through a
// controller with a narrow range: every weight stays in [Floor, Max].
func TestClampsHold(t *testing.T) {
	clk := newFakeClock()
	c, err := NewController(ControllerConfig{Floor: 5, Max: 20, A: 100}, clk)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ticks := uint32(0)
	sawFloor, sawMax := false, false
	for i := 0; i < 500; i++ {
		clk.Advance(2 * time.Second)
		ticks += 200
		var rs []Reading
		for _, n := range []string{"a", "b", "c"} {
			rs = append(rs, Reading{Node: n, Sample: loadSample(n, clk.Now(), ticks, rng.Float64()*50*rng.Float64())})
		}
		for _, d := range c.Step(rs) {
			if d.Weight < 5 || d.Weight > 20 || d.Exact < 5 || d.Exact > 20 {
				t.Fatalf("poll %d: %v outside [5, 20] (exact %.3f)", i, d, d.Exact)
			}
			sawFloor = sawFloor || d.Weight == 5
			sawMax = sawMax || d.Weight == 20
		}
	}
	if !sawFloor || !sawMax {
		t.Errorf("the clamps were never reached (floor %v, max %v): test too weak", sawFloor, sawMax)
	}
}

// TestNoiseNoOscillation: a steady plant with ±3 % measurement noise keeps
// each weight inside the dead band: few reversals, small spread.
func TestNoiseNoOscillation(t *testing.T) {
	clk := newFakeClock()
	c, _ := NewController(ControllerConfig{}, clk)
	rng := rand.New(rand.NewPCG(3, 4))
	p := &plant{names: []string{"a", "b", "c"}, cap: []float64{1, 1, 1.0 / 3}, D: 2.1}
	ticks := uint32(0)
	w := map[string]int{"a": 100, "b": 100, "c": 100}
	var cw []int
	for i := 0; i < 200; i++ {
		clk.Advance(2 * time.Second)
		ticks += 200
		ls := p.loads(w)
		var rs []Reading
		for j, n := range p.names {
			rs = append(rs, Reading{Node: n, Sample: loadSample(n, clk.Now(), ticks, ls[j]*(1+0.03*(2*rng.Float64()-1)))})
		}
		for _, d := range c.Step(rs) {
			w[d.Node] = d.Weight
		}
		cw = append(cw, w["c"])
	}
	lo, hi, rev, last := 1000, 0, 0, 0
	for i, x := range cw[20:] {
		lo, hi = min(lo, x), max(hi, x)
		if i > 0 {
			d := x - cw[20+i-1]
			s := 0
			if d > 0 {
				s = 1
			} else if d < 0 {
				s = -1
			}
			if s != 0 && last != 0 && s != last {
				rev++
			}
			if s != 0 {
				last = s
			}
		}
	}
	t.Logf("after settling: slow node's weight in [%d, %d], %d reversals in 180 polls", lo, hi, rev)
	if hi-lo > 6 || rev > 6 {
		t.Errorf("noisy steady state: weight in [%d, %d] with %d reversals: oscillates", lo, hi, rev)
	}
}

// TestSilentNodeDecays: a node that stops answering moves half-way to the
// floor per half-life (default 2 polls of 2 s), and the others are unaffected.
func TestSilentNodeDecays(t *testing.T) {
	clk := newFakeClock()
	c, _ := NewController(ControllerConfig{Floor: 4}, clk)
	ticks := uint32(0)
	poll := func(withB bool) map[string]Decision {
		clk.Advance(2 * time.Second)
		ticks += 200
		rs := []Reading{{Node: "a", Sample: loadSample("a", clk.Now(), ticks, 0.5)}}
		if withB {
			rs = append(rs, Reading{Node: "b", Sample: loadSample("b", clk.Now(), ticks, 0.5)})
		}
		out := map[string]Decision{}
		for _, d := range c.Step(rs) {
			out[d.Node] = d
		}
		return out
	}
	for i := 0; i < 3; i++ {
		poll(true)
	}
	// b at 100; silent for 2 polls (one half-life): 4 + 96/2 = 52; 4
	// polls: 4 + 96/4 = 28; 8 polls: 4 + 96/16 = 10.
	want := map[int]int{2: 52, 4: 28, 8: 10}
	for i := 1; i <= 30; i++ {
		ds := poll(false)
		if ds["a"].Weight != 100 {
			t.Fatalf("answering node a: weight %d, want 100", ds["a"].Weight)
		}
		b := ds["b"]
		if b.Missed != i || !strings.Contains(b.Reason, "no answer") {
			t.Fatalf("poll %d: %v: want %d missed and a no-answer reason", i, b, i)
		}
		if w, ok := want[i]; ok && b.Weight != w {
			t.Errorf("after %d silent polls weight %d, want %d", i, b.Weight, w)
		}
		if i == 30 && b.Weight != 4 {
			t.Errorf("after 30 silent polls weight %d, want the floor 4", b.Weight)
		}
	}
	// It answers again: the rule takes over from the decayed weight.
	d := poll(true)["b"]
	if d.Missed != 0 || d.Terms == nil || d.Weight <= 4 {
		t.Errorf("after answering again: %v", d)
	}
}

func TestFirstSampleResetAndErrors(t *testing.T) {
	clk := newFakeClock()
	c, _ := NewController(ControllerConfig{}, clk)
	// b, lightly loaded, is there so that a's overload is relative: one
	// node alone has no one to shift load to.
	step := func(a Sample) Decision {
		b := loadSample("b", a.At, a.SysUpTime, 0.2)
		return c.Step([]Reading{{Node: "a", Sample: a}, {Node: "b", Sample: b}})[0]
	}
	d := step(loadSample("a", clk.Now(), 5000, 2))
	if d.Weight != 100 || !strings.Contains(d.Reason, "first sample") {
		t.Errorf("first sample: %v", d)
	}
	clk.Advance(2 * time.Second)
	// The agent restarted: sysUpTime went from 5000 to 100 (modulo 2^32 a
	// 497-day step in 2 s): hold the weight and restart from this sample.
	d = step(loadSample("a", clk.Now(), 100, 2))
	if d.Weight != 100 || !strings.Contains(d.Reason, "reset") {
		t.Errorf("reset: %v", d)
	}
	clk.Advance(2 * time.Second)
	d = step(loadSample("a", clk.Now(), 300, 2))
	if d.Terms == nil || d.Terms.LaLoad != 200 || d.Weight >= 100 {
		t.Errorf("after reset: %v", d)
	}
	for _, want := range []string{"laload 200.00", "total 200.00%", "cbrt"} {
		if !strings.Contains(d.String(), want) {
			t.Errorf("explanation %q lacks %q", d.String(), want)
		}
	}
	// A sample without any link speed cannot be read: it decays, saying why.
	clk.Advance(2 * time.Second)
	s := loadSample("a", clk.Now(), 500, 2)
	s.IfSpeed = 0
	d = step(s)
	if !strings.Contains(d.Reason, "no link speed") || d.Missed != 1 {
		t.Errorf("no link speed: %v", d)
	}
	if _, err := NewController(ControllerConfig{Floor: 10, Max: 5}, nil); err == nil {
		t.Error("floor above max accepted")
	}
	if _, err := NewController(ControllerConfig{Options: Options{CPU: "hr"}}, nil); err == nil {
		t.Error("unknown cpu source accepted")
	}
}

func TestForget(t *testing.T) {
	c, _ := NewController(ControllerConfig{}, newFakeClock())
	c.Step([]Reading{{Node: "a", Err: errors.New("timeout")}, {Node: "b", Err: errors.New("timeout")}})
	if l := c.Last(); len(l) != 2 || l[0].Node != "a" || l[0].Missed != 1 {
		t.Errorf("Last after a step: %v", l)
	}
	c.Forget("a")
	if l := c.Last(); len(l) != 1 || l[0].Node != "b" {
		t.Errorf("Last after Forget: %v", l)
	}
	if ds := c.Step(nil); len(ds) != 1 || ds[0].Node != "b" {
		t.Errorf("after Forget: %v", ds)
	}
}

// TestStepAfterDampedGain reproduces the benchmark's 16.7 s load step: the
// node's load swung around the target before the step (each swing past the
// dead band reversed its direction and halved its gain towards MinGain),
// then a real step arrives, either a slow-down (capacity) or a hog (load the
// node carries whatever its weight). At 500 ms polls the weight must settle
// within 4 polls (2 s) of the step and reverse direction at most twice after
// it.
func TestStepAfterDampedGain(t *testing.T) {
	const swing, stepAt, polls = 12, 12, 40
	for _, tc := range []struct {
		name    string
		offered float64
		slow    float64 // c's capacity after the step (1: unchanged)
		hog     float64 // load added to c after the step
	}{
		{"3x slower at 90%", 0.9, 1.0 / 3, 0},
		{"3x slower at 50%", 0.5, 1.0 / 3, 0},
		{"5x slower at 90%", 0.9, 0.2, 0},
		{"hog at 50%", 0.5, 1, 1.5},
		{"hog at 90%", 0.9, 1, 0.8},
	} {
		clk := newFakeClock()
		c, err := NewController(ControllerConfig{Interval: 500 * time.Millisecond}, clk)
		if err != nil {
			t.Fatal(err)
		}
		p := &plant{names: []string{"a", "b", "c"}, cap: []float64{1, 1, 1}, D: tc.offered * (2 + tc.slow)}
		ticks := uint32(1000)
		w := map[string]int{"a": 100, "b": 100, "c": 100}
		var tr trace
		gainBefore := 1.0
		for i := 0; i < polls; i++ {
			if i == stepAt {
				p.cap[2] = tc.slow
			}
			clk.Advance(500 * time.Millisecond)
			ticks += 50
			ls := p.loads(w)
			switch {
			case i < swing:
				// c's load swings ±0.15 around the target, past the dead
				// band each way: every poll is a reversal.
				ls[2] = 1 + 0.15*float64(1-2*(i%2))
			case i >= stepAt:
				ls[2] += tc.hog
			}
			var rs []Reading
			for j, n := range p.names {
				rs = append(rs, Reading{Node: n, Sample: loadSample(n, clk.Now(), ticks, ls[j])})
			}
			ds := c.Step(rs)
			w = map[string]int{}
			for _, d := range ds {
				w[d.Node] = d.Weight
			}
			if i == stepAt-1 {
				gainBefore = ds[2].Gain
			}
			tr.weights = append(tr.weights, w)
			tr.dec = append(tr.dec, ds)
		}
		if gainBefore > 1.0/8 {
			t.Errorf("%s: gain before the step %.3f: the swings did not damp it, test too weak", tc.name, gainBefore)
		}
		after := trace{weights: tr.weights[stepAt-1:], dec: tr.dec[stepAt-1:]}
		if testing.Verbose() {
			for i := stepAt - 1; i < stepAt+7; i++ {
				d := tr.dec[i][2]
				t.Logf("  poll %+d: load %.3f target %.3f error %+.3f gain %.3f weight %d", i-stepAt, d.Aggregate, d.Target, d.Error, d.Gain, d.Weight)
			}
		}
		s := settledAt(after, "c", 2)
		n := s // polls after the step (index 0 is the poll before it)
		final := tr.dec[polls-1][2]
		t.Logf("%s: gain before the step %.3f; settled after %d polls (%v) at weight %d, load %.2f; %d reversals after the step",
			tc.name, gainBefore, n, time.Duration(n)*500*time.Millisecond, final.Weight, final.Aggregate, signChanges(after, "c"))
		if s < 0 || n > 4 {
			t.Errorf("%s: settled after %d polls, want <= 4 (2 s at 500 ms)", tc.name, n)
		}
		if sc := signChanges(after, "c"); sc > 2 {
			t.Errorf("%s: %d reversals after the step, want <= 2", tc.name, sc)
		}
		// Settled means at the target (the mean load when the hog
		// overloads the cluster), or at the floor if even that is too much.
		if final.Aggregate > final.Target+0.05+0.03 && final.Weight > 1 {
			t.Errorf("%s: settled load %.3f above the target %.3f at weight %d", tc.name, final.Aggregate, final.Target, final.Weight)
		}
	}
}

// cgroupNode models a bench node's CPU figures as the node reports them
// (internal/node cgroupCPU): busy is the cgroup's usage and idle the unused
// allowance, both in 10 ms ticks, idle never going back. At 5 % of a CPU a
// 500 ms poll holds 2.5 ticks of allowance, so the busy share is coarse.
type cgroupNode struct {
	fine             bool    // counters in µs (the node's /load since 2026-11-28), not 10 ms ticks
	quota            float64 // share of a CPU
	usedUS, allowUS  float64
	busyT, idleT     uint64
	hogFrom, hogFrac float64 // the hog saturates the cgroup from this share of the next poll on
}

func (g *cgroupNode) advance(interval time.Duration, demand float64, hog bool, rng *rand.Rand) (busy, idle uint64) {
	allow := g.quota * float64(interval/time.Microsecond)
	use := math.Min(1, demand) * allow
	if hog {
		use = allow
	}
	// cfs hands the quota out in periods: the usage seen at a poll is off
	// by up to one period's quota either way.
	g.allowUS += allow
	g.usedUS = math.Min(g.allowUS, g.usedUS+use)
	seen := math.Max(0, g.usedUS-rng.Float64()*3000)
	unit := 10000.0
	if g.fine {
		unit = 1
	}
	g.busyT = max(g.busyT, uint64(seen/unit))
	if a := uint64(g.allowUS / unit); a > g.busyT && a-g.busyT > g.idleT {
		g.idleT = a - g.busyT
	}
	return g.busyT, g.idleT
}

// TestHogStepLikeTheBench is the bench's load step on the fake clock: three
// nodes at 50 % (c 3x slower), CPU read from each node's cgroup in 10 ms
// ticks at 5 % of a CPU (coarse: 1-3 ticks a poll), a disk term of 6.86 %
// on every node, target 0.8; a hog then saturates a's cgroup, starting at a
// random point of a poll interval. For 500 ms and 250 ms polls it reports
// how many polls a's weight takes from the hog to within 3 of its final
// weight, and the reversals after the step, over 20 seeds.
func TestHogStepLikeTheBench(t *testing.T) {
	for _, iv := range []time.Duration{500 * time.Millisecond, 250 * time.Millisecond} {
		worst, worstRev, sum := 0.0, 0, 0.0
		const seeds = 20
		for seed := uint64(0); seed < seeds; seed++ {
			rng := rand.New(rand.NewPCG(seed, 17))
			clk := newFakeClock()
			c, err := NewController(ControllerConfig{Interval: iv, Target: 0.8, Options: Options{CPU: CPURaw}}, clk)
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"a", "b", "c"}
			caps := []float64{1, 1, 1.0 / 3}
			nodes := []*cgroupNode{{quota: 0.05}, {quota: 0.05}, {quota: 0.05 / 3}}
			D := 0.5 * (2 + 1.0/3)
			w := map[string]int{"a": 100, "b": 100, "c": 100}
			polls := int(20 * time.Second / iv)
			stepAt := polls / 2
			hogAt := float64(stepAt) - rng.Float64() // in polls
			ticks := uint32(1000)
			var tr trace
			for i := 0; i < polls; i++ {
				clk.Advance(iv)
				ticks += uint32(iv / (10 * time.Millisecond))
				sum := 0
				for _, n := range names {
					sum += w[n]
				}
				var rs []Reading
				for j, n := range names {
					demand := D * float64(w[n]) / float64(sum) / caps[j]
					hog := false
					if j == 0 && float64(i+1) > hogAt {
						// The poll in which the hog starts is partly
						// saturated: split it.
						if f := float64(i+1) - hogAt; f < 1 {
							nodes[j].advance(time.Duration((1-f)*float64(iv)), demand, false, rng)
							iv2 := time.Duration(f * float64(iv))
							busy, idle := nodes[j].advance(iv2, demand, true, rng)
							rs = append(rs, Reading{Node: n, Sample: cpuSample(n, clk.Now(), ticks, busy, idle)})
							continue
						}
						hog = true
					}
					busy, idle := nodes[j].advance(iv, demand, hog, rng)
					rs = append(rs, Reading{Node: n, Sample: cpuSample(n, clk.Now(), ticks, busy, idle)})
				}
				ds := c.Step(rs)
				w = map[string]int{}
				for _, d := range ds {
					w[d.Node] = d.Weight
				}
				tr.weights = append(tr.weights, w)
				tr.dec = append(tr.dec, ds)
			}
			from := int(math.Floor(hogAt)) // the last poll before the hog
			after := trace{weights: tr.weights[from:], dec: tr.dec[from:]}
			s := settledAt(after, "a", 3)
			// Time from the hog's start to the poll that settled.
			took := (float64(from+s) - hogAt) * iv.Seconds()
			if s < 0 {
				took = math.Inf(1)
			}
			rev := bandReversals(after, "a", 3)
			if testing.Verbose() && seed == 0 {
				for i := from - 2; i < from+24 && i < polls; i++ {
					d := tr.dec[i][0]
					t.Logf("  %v seed 0 poll %+d: load %.3f error %+.3f gain %.3f weight %d: %s", iv, i-from, d.Aggregate, d.Error, d.Gain, d.Weight, d.Reason)
				}
			}
			if testing.Verbose() && (took > 2 || rev > 1) {
				t.Logf("  %v seed %d: settled %.2f s, %d reversals: a %v", iv, seed, took, rev, weightsOf(after, "a"))
			}
			worst, worstRev, sum = math.Max(worst, took), max(worstRev, rev), sum+took
		}
		t.Logf("%v polls: a's weight settled %.2f s after the hog on average, %.2f s at worst; at most %d reversals (of moves over 3) after it", iv, sum/seeds, worst, worstRev)
		// An outlier of the coarse CPU figure after the hog (the unused
		// allowance's maximum grows by a tick) lifted the floored weight
		// by 20-100 before the floor waited for a second poll.
		if worstRev > 1 {
			t.Errorf("%v polls: %d reversals after the step, want <= 1", iv, worstRev)
		}
		if worst > 2 {
			t.Errorf("%v polls: settled after %.2f s on average, %.2f s at worst; want <= 2 s", iv, sum/seeds, worst)
		}
	}
}

func cpuSample(node string, at time.Time, ticks uint32, busy, idle uint64) Sample {
	return Sample{Node: node, At: at, SysUpTime: ticks, IfIndex: 1, Counter64: true, IfSpeed: 1e9,
		HaveCPU: true, CPU: CPUTicks{User: busy, Idle: idle}, DskTotal: 1000000, DskUsed: 68600}
}

// bandReversals counts reversals of node's weight between moves of more
// than band from the last turning point (the bench's count: smaller wiggles
// are rounding at the floor, not oscillation).
func bandReversals(tr trace, node string, band int) int {
	n, dir, ref := 0, 0, tr.weights[0][node]
	for _, w := range tr.weights[1:] {
		x := w[node]
		d := 0
		switch {
		case x > ref+band:
			d = 1
		case x < ref-band:
			d = -1
		}
		if d != 0 {
			if dir != 0 && d != dir {
				n++
			}
			dir, ref = d, x
		} else if (dir > 0 && x > ref) || (dir < 0 && x < ref) {
			ref = x
		}
	}
	return n
}

// TestFloorNotRescaled: a node the rule holds at the floor stays there when
// the others fall and are scaled back up to Max. The rescale used to lift
// it by the same factor every poll (the bench at 250 ms polls: a hogged
// node's weight went 1 -> 14 while the others swung).
func TestFloorNotRescaled(t *testing.T) {
	clk := newFakeClock()
	c, err := NewController(ControllerConfig{Interval: 250 * time.Millisecond}, clk)
	if err != nil {
		t.Fatal(err)
	}
	ticks := uint32(1000)
	// a is overloaded alone first (to the floor), then every node is
	// near 1.1 (an overloaded cluster: the mean is the target): a sits in
	// the dead band at the floor while b and c swing around the mean, so the
	// largest weight keeps falling below Max and is scaled back up.
	for i := 0; i < 40; i++ {
		clk.Advance(250 * time.Millisecond)
		ticks += 25
		la, lb, lc := 1.5, 0.6, 0.6
		if i >= 8 {
			la, lb, lc = 1.1, 1.3, 1.3
			if i%2 == 0 {
				lb, lc = 0.9, 0.9
			}
		}
		rs := []Reading{
			{Node: "a", Sample: loadSample("a", clk.Now(), ticks, la)},
			{Node: "b", Sample: loadSample("b", clk.Now(), ticks, lb)},
			{Node: "c", Sample: loadSample("c", clk.Now(), ticks, lc)},
		}
		ds := c.Step(rs)
		if i >= 6 && ds[0].Weight != 1 {
			t.Fatalf("poll %d: a's weight %d (exact %.2f), want the floor 1: %s", i, ds[0].Weight, ds[0].Exact, ds[0].Reason)
		}
	}
}

func weightsOf(tr trace, node string) []int {
	var out []int
	for _, w := range tr.weights {
		out = append(out, w[node])
	}
	return out
}

// TestFloorWaitsForSecondPoll: a node at the floor is not raised by one
// poll of low load (a noisy figure), but is by two, and then climbs back
// at full speed.
func TestFloorWaitsForSecondPoll(t *testing.T) {
	clk := newFakeClock()
	c, _ := NewController(ControllerConfig{Interval: 500 * time.Millisecond}, clk)
	ticks := uint32(1000)
	step := func(la float64) Decision {
		clk.Advance(500 * time.Millisecond)
		ticks += 50
		return c.Step([]Reading{{Node: "a", Sample: loadSample("a", clk.Now(), ticks, la)},
			{Node: "b", Sample: loadSample("b", clk.Now(), ticks, 0.5)}})[0]
	}
	for i := 0; i < 8; i++ {
		step(2)
	}
	if d := step(2); d.Weight != 1 {
		t.Fatalf("overloaded a at weight %d, want the floor", d.Weight)
	}
	if d := step(0.3); d.Weight != 1 {
		t.Errorf("one poll of low load lifted a to %d: %s", d.Weight, d.Reason)
	}
	if d := step(2); d.Weight != 1 {
		t.Errorf("a at %d after the outlier, want 1", d.Weight)
	}
	step(0.3)
	d := step(0.3)
	if d.Weight <= 1 {
		t.Errorf("two polls of low load left a at %d: %s", d.Weight, d.Reason)
	}
	for i := 0; i < 4; i++ {
		d = step(0.3)
	}
	if d.Weight < 90 {
		t.Errorf("a at %d four polls after leaving the floor, want >= 90 (b is at 100 with load 0.5)", d.Weight)
	}
}

// TestSustainedOverload: the bench's nodes (c 3x slower, CPU from each
// cgroup in µs, the disk term every node carries, an eth term that grows
// with each node's traffic) learn their weights at 70 % load, then stay at
// 110 % for 40 s. In a saturated cluster every CPU reads 100 %, so the
// loads no longer tell the nodes apart: the weights must keep what they
// learnt, not fall to the floor together. Before the fix they did (on the
// xdp bed, 2026-11-28: 1/1/1 late in the 110 % run, and the slow node
// took 22 % of the connections): no node's load followed its weight's
// moves, so the gain boost for a hog drove each to the floor within a few
// polls, and the rescale left floored nodes alone even when every node was
// floored.
func TestSustainedOverload(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 29))
		clk := newFakeClock()
		iv := 250 * time.Millisecond
		c, err := NewController(ControllerConfig{Interval: iv, Target: 0.8, Options: Options{CPU: CPURaw, BandwidthOverride: 1e9}}, clk)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"a", "b", "c"}
		caps := []float64{1, 1, 1.0 / 3}
		nodes := []*cgroupNode{{fine: true, quota: 0.05}, {fine: true, quota: 0.05}, {fine: true, quota: 0.05 / 3}}
		w := map[string]int{"a": 100, "b": 100, "c": 100}
		octets := map[string]uint64{}
		ticks := uint32(1000)
		var last map[string]int
		for i := 0; i < int(60*time.Second/iv); i++ {
			load := 0.7
			if i >= int(20*time.Second/iv) {
				load = 1.1
			}
			D := load * (2 + 1.0/3)
			clk.Advance(iv)
			ticks += uint32(iv / (10 * time.Millisecond))
			sum := 0
			for _, n := range names {
				sum += w[n]
			}
			var rs []Reading
			for j, n := range names {
				demand := D * float64(w[n]) / float64(sum) / caps[j]
				busy, idle := nodes[j].advance(iv, demand, false, rng)
				// 9 % of a 1 Gbit/s link at a fast node's full rate.
				octets[n] += uint64(math.Min(1, demand) * caps[j] * 0.09 * 1e9 / 8 * iv.Seconds())
				smp := cpuSample(n, clk.Now(), ticks, busy, idle)
				smp.OutOctets = octets[n]
				rs = append(rs, Reading{Node: n, Sample: smp})
			}
			last = map[string]int{}
			for _, d := range c.Step(rs) {
				last[d.Node] = d.Weight
			}
			w = last
		}
		if top := max(last["a"], last["b"], last["c"]); top != 100 {
			t.Errorf("seed %d: weights %v after 40 s at 110 %%: the largest is not 100", seed, last)
		}
		if last["c"] >= min(last["a"], last["b"]) {
			t.Errorf("seed %d: weights %v after 40 s at 110 %%: the slow node c is not below the fast ones", seed, last)
		}
	}
}

// TestSeed: a controller seeded with another's decisions (a station taking
// over polling) starts from their weights, clamped, not from Initial, and
// says so until its first step.
func TestSeed(t *testing.T) {
	clk := newFakeClock()
	c, err := NewController(ControllerConfig{Interval: time.Second, Floor: 1, Max: 100, Options: Options{CPU: CPURaw}}, clk)
	if err != nil {
		t.Fatal(err)
	}
	c.Seed([]Decision{{Node: "a", Exact: 7.4, Weight: 7, Smoothed: 0.9}, {Node: "b", Weight: 500}, {Node: "c", Weight: 0}}, "seeded from publication 12")
	want := map[string]int{"a": 7, "b": 100, "c": 1}
	for _, d := range c.Last() {
		if d.Weight != want[d.Node] || d.Reason != "seeded from publication 12" {
			t.Errorf("after Seed: %s weight %d reason %q, want %d", d.Node, d.Weight, d.Reason, want[d.Node])
		}
	}
	// The first samples give no rates: the seeded weights stand.
	clk.Advance(time.Second)
	var rs []Reading
	for _, n := range []string{"a", "b", "c"} {
		rs = append(rs, Reading{Node: n, Sample: cpuSample(n, clk.Now(), 1000, 10, 10)})
	}
	for _, d := range c.Step(rs) {
		if d.Weight != want[d.Node] {
			t.Errorf("first step after Seed: %s weight %d, want %d (%s)", d.Node, d.Weight, want[d.Node], d.Reason)
		}
	}
}
