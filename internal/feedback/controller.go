package feedback

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Clock is the controller's time source; tests inject a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ControllerConfig tunes the weight rule. Zero fields take the defaults
// named in their comments (see Defaults).
type ControllerConfig struct {
	Interval  time.Duration // poll interval the controller is stepped at; default 2 s
	Options   Options       // how samples become equations 1-8
	Target    float64       // aggregate load the rule steers towards; default 1 (LVS: 1 - load)
	LoadScale float64       // Total_load (percent) that is aggregate load 1; default 100
	A         float64       // LVS's coefficient: weight units per poll at |target-load| = 1; default Max/3
	Floor     int           // lowest weight the rule or decay gives; default 1
	Max       int           // highest weight; default 100
	Initial   int           // weight of a node before it has two samples; default Max
	Smoothing float64       // share of the newest load in the smoothed load, (0,1]; default 1 (no smoothing: it lags and overshoots, see docs/feedback.md)
	DeadBand  float64       // no change while |target - smoothed load| <= DeadBand; default 0.05
	MinGain   float64       // lowest damping gain after repeated reversals; default 1/32
	// LargeError: an |error| above it is a load step, not a swing, when it
	// follows a poll without a move or persists two polls the same way: the
	// gain goes back to 1. Default 4*DeadBand.
	LargeError float64
	// DecayHalfLife: a node that does not answer moves half-way to Floor per
	// half-life, by the clock; default 2*Interval.
	DecayHalfLife time.Duration
}

// Defaults returns c with every zero field set to its default.
func (c ControllerConfig) Defaults() ControllerConfig {
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.Target <= 0 {
		c.Target = 1
	}
	if c.LoadScale <= 0 {
		c.LoadScale = 100
	}
	if c.Max <= 0 {
		c.Max = 100
	}
	if c.Floor <= 0 {
		c.Floor = 1
	}
	if c.A <= 0 {
		c.A = float64(c.Max) / 3
	}
	if c.Initial <= 0 {
		c.Initial = c.Max
	}
	if c.Smoothing <= 0 || c.Smoothing > 1 {
		c.Smoothing = 1
	}
	if c.DeadBand <= 0 {
		c.DeadBand = 0.05
	}
	if c.MinGain <= 0 || c.MinGain > 1 {
		c.MinGain = 1.0 / 32
	}
	if c.LargeError <= 0 {
		c.LargeError = 4 * c.DeadBand
	}
	if c.DecayHalfLife <= 0 {
		c.DecayHalfLife = 2 * c.Interval
	}
	return c
}

// Validate reports a configuration the rule cannot work with.
func (c ControllerConfig) Validate() error {
	switch {
	case c.Floor > c.Max:
		return fmt.Errorf("feedback: floor weight %d above max weight %d", c.Floor, c.Max)
	case c.Max > 65535:
		return fmt.Errorf("feedback: max weight %d above 65535", c.Max)
	case c.Initial < c.Floor || c.Initial > c.Max:
		return fmt.Errorf("feedback: initial weight %d outside [%d, %d]", c.Initial, c.Floor, c.Max)
	case c.Options.CPU != "" && c.Options.CPU != CPULaLoad && c.Options.CPU != CPURaw:
		return fmt.Errorf("feedback: unknown cpu source %q (want %s or %s)", c.Options.CPU, CPULaLoad, CPURaw)
	}
	return nil
}

// Reading is what a poll returned for one node: a sample or an error.
type Reading struct {
	Node   string
	Sample Sample
	Err    error
}

// Decision is one node's weight after a Step and every term that led to it,
// so that `corral ctl feedback` and the metrics can show why.
type Decision struct {
	Node      string    `json:"node"`
	At        time.Time `json:"at"`
	Weight    int       `json:"weight"`    // the weight to apply
	Previous  int       `json:"previous"`  // the weight before this step
	Exact     float64   `json:"exact"`     // the unrounded weight the controller carries
	Terms     *Terms    `json:"terms"`     // equations 1-8; nil when there were none this step
	Aggregate float64   `json:"aggregate"` // Total_load / LoadScale
	Smoothed  float64   `json:"smoothed"`  // exponentially smoothed aggregate load
	Target    float64   `json:"target"`    // the load steered to: Target, or the mean load in overload
	Error     float64   `json:"error"`     // target - Smoothed
	Raw       float64   `json:"raw"`       // A * cbrt(Error): LVS's step before damping
	Gain      float64   `json:"gain"`      // damping gain applied to Raw
	Delta     float64   `json:"delta"`     // change applied before clamping
	Clamped   string    `json:"clamped"`   // "floor", "max" or ""
	Missed    int       `json:"missed"`    // polls in a row without an answer
	Reason    string    `json:"reason"`    // what the step did and why
	Reversals int       `json:"reversals"` // sign changes of the weight's direction so far
}

// String is the one-line explanation of d.
func (d Decision) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: weight %d (was %d): %s", d.Node, d.Weight, d.Previous, d.Reason)
	if t := d.Terms; t != nil {
		fmt.Fprintf(&b, "; eth %.2f%% (in+%d out+%d octets over %d ticks at %d bit/s from %s)",
			t.EthernetUtil, t.DeltaInOctets, t.DeltaOutOctets, t.DeltaTicks, t.Bandwidth, t.BandwidthFrom)
		fmt.Fprintf(&b, " + sys %.2f%% (swap %.2f + %s %.2f + dsk %.2f", t.SysUtil, t.MemSwapLoad, t.CPUFrom, cpuTerm(t), t.DskLoad)
		if t.MemRealInSys {
			fmt.Fprintf(&b, " + memReal %.2f", t.MemRealLoad)
		}
		fmt.Fprintf(&b, "; memReal %.2f) = total %.2f%%", t.MemRealLoad, t.TotalLoad)
		fmt.Fprintf(&b, "; load %.3f smoothed %.3f error %.3f raw %+.3f gain %.3f delta %+.3f",
			d.Aggregate, d.Smoothed, d.Error, d.Raw, d.Gain, d.Delta)
	}
	if d.Clamped != "" {
		fmt.Fprintf(&b, "; clamped at %s", d.Clamped)
	}
	if d.Missed > 0 {
		fmt.Fprintf(&b, "; %d polls unanswered", d.Missed)
	}
	return b.String()
}

func cpuTerm(t *Terms) float64 {
	if t.CPUFrom == CPURaw {
		return t.CPUBusy
	}
	return t.LaLoad
}

type nodeState struct {
	prev      *Sample
	w         float64
	smoothed  float64
	haveLoad  bool
	gain      float64
	lastSign  int
	sameRun   int
	lastErr   float64 // the previous poll's error, 0 before the first
	lastMove  float64 // the previous poll's |weight change| / weight
	lastLoad  float64 // the smoothed load at the previous apply
	reversals int
	missed    int
	lastStep  time.Time
}

// Controller holds per-node state between polls and turns readings into
// weights with LVS feedbackd's rule, weight += A * cbrt(Target - load),
// damped three ways: the load is exponentially smoothed, nothing moves
// inside a dead band around the target, and each reversal of direction
// halves the node's gain (it doubles back after two steps the same way), so
// the weight cannot keep swinging around the target. A large error that is
// a load step rather than a swing (see apply) resets the gain to 1, so the
// damping never slows the response to a real step. It is safe for
// concurrent use.
type Controller struct {
	cfg   ControllerConfig
	clock Clock
	mu    sync.Mutex
	nodes map[string]*nodeState
	last  []Decision
	// mean is the answering nodes' mean load, smoothed over polls with
	// meanSmoothing: it decides the overload target (see Step).
	mean     float64
	haveMean bool
}

// meanSmoothing is the newest poll's share in the smoothed cluster mean.
// Why smoothed: with coarse load figures (a node's cgroup CPU in 10 ms
// ticks over a 500 ms poll at 5 % of a CPU is 1-3 ticks: 0, 40, 80 or
// 100 %), one node's noisy poll lifted the mean above the target, and the
// hogged node was then steered to that mean, not to the target: in the
// bench its weight stalled and reversed, and the load step took 3-7 s or
// did not settle (TestHogStepLikeTheBench). A real overload lasts; the
// mean's lag only delays balancing by a poll or two.
const meanSmoothing = 0.3

// saturatedCPU is the CPU busy share (cpuraw) from which a node counts as
// saturated: a cgroup at its quota reads 97-100 % over a poll (cfs hands
// the quota out per period).
const saturatedCPU = 97.0

// Last returns a copy of the decisions of the latest Step (for `corral ctl
// feedback` and metrics, which must not step the controller themselves).
func (c *Controller) Last() []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Decision(nil), c.last...)
}

// NewController returns a controller; clock nil means the real clock.
func NewController(cfg ControllerConfig, clock Clock) (*Controller, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = realClock{}
	}
	return &Controller{cfg: cfg, clock: clock, nodes: map[string]*nodeState{}}, nil
}

// Config returns the controller's configuration with defaults filled in.
func (c *Controller) Config() ControllerConfig { return c.cfg }

// Forget drops a node (it left the pool).
func (c *Controller) Forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, node)
	for i, d := range c.last {
		if d.Node == node {
			c.last = append(c.last[:i], c.last[i+1:]...)
			break
		}
	}
}

// Seed starts nodes from decisions another controller made: their weight
// (Exact, else Weight, clamped) and smoothed load, with the gain and
// damping afresh. A station that takes over polling seeds its controllers
// from the last publication, so the change of poller does not send every
// server back to the Initial weight (Max: a slow server would get a full
// share until its load told again). why is each seeded node's reason until
// its next Step.
func (c *Controller) Seed(ds []Decision, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	for _, d := range ds {
		if d.Node == "" {
			continue
		}
		w := d.Exact
		if w <= 0 {
			w = float64(d.Weight)
		}
		w = math.Min(float64(c.cfg.Max), math.Max(float64(c.cfg.Floor), w))
		st := &nodeState{w: w, gain: 1, lastStep: now}
		if d.Smoothed > 0 && !math.IsInf(d.Smoothed, 0) && !math.IsNaN(d.Smoothed) {
			st.smoothed, st.haveLoad = d.Smoothed, true
		}
		c.nodes[d.Node] = st
		i := slices.IndexFunc(c.last, func(x Decision) bool { return x.Node == d.Node })
		if i < 0 {
			c.last = append(c.last, Decision{})
			i = len(c.last) - 1
		}
		c.last[i] = Decision{Node: d.Node, At: now, Weight: c.round(w), Previous: c.round(w), Exact: w,
			Smoothed: st.smoothed, Target: c.cfg.Target, Reason: why}
	}
	sort.Slice(c.last, func(i, j int) bool { return c.last[i].Node < c.last[j].Node })
}

// Step feeds one poll's readings and returns every known node's decision,
// sorted by node. A known node missing from readings, or with an error,
// counts as not answering.
//
// Two things go beyond LVS's rule, both only when they matter. When the
// answering nodes' mean smoothed load is above Target (the whole cluster is
// overloaded, so no weight can bring a node down to Target), each node is
// steered to that mean instead: the rule then balances load instead of
// driving every weight to the floor together. And when no answering node is
// at Max, their weights are scaled up together until one is, which keeps the
// ratios (all the scheduler sees) and keeps integer weights fine-grained.
func (c *Controller) Step(readings []Reading) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	got := map[string]Reading{}
	for _, r := range readings {
		got[r.Node] = r
		if _, ok := c.nodes[r.Node]; !ok {
			c.nodes[r.Node] = &nodeState{w: float64(c.cfg.Initial), gain: 1, lastStep: now}
		}
	}
	names := make([]string, 0, len(c.nodes))
	for n := range c.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Decision, len(names))
	fresh := make([]bool, len(names))
	sum, nfresh := 0.0, 0
	for i, n := range names {
		r, ok := got[n]
		if !ok {
			r = Reading{Node: n, Err: errors.New("no reading this poll")}
		}
		out[i], fresh[i] = c.observe(now, c.nodes[n], r)
		if fresh[i] {
			sum += out[i].Smoothed
			nfresh++
		}
	}
	target, why := c.cfg.Target, fmt.Sprintf("target %.3f", c.cfg.Target)
	if nfresh > 0 {
		m := sum / float64(nfresh)
		if !c.haveMean {
			c.mean, c.haveMean = m, true
		} else {
			c.mean += meanSmoothing * (m - c.mean)
		}
		if c.mean > target {
			target = c.mean
			why = fmt.Sprintf("cluster overloaded: mean load %.3f (smoothed) as target", target)
		}
	}
	// Every answering node's CPU saturated in overload: the loads then
	// measure the quotas, not the nodes' speed, and the differences left
	// (the eth term, larger on the nodes that serve more) would steer
	// weight towards the slowest node, and "the load did not follow the
	// move" (none can) would drive each to the floor. Hold the weights
	// learnt below saturation (TestSustainedOverload). Only in overload
	// (the smoothed mean above Target): one poll of coarse figures (SNMP's
	// ticks) can read every node at 100 % at half load.
	saturated := nfresh > 0 && c.mean > c.cfg.Target
	for i := range names {
		if fresh[i] {
			t := out[i].Terms
			saturated = saturated && t != nil && t.CPUFrom == CPURaw && t.CPUBusy >= saturatedCPU
		}
	}
	for i, n := range names {
		switch {
		case fresh[i] && saturated:
			out[i].Target = target
			out[i].Error = target - out[i].Smoothed
			out[i].Reason = fmt.Sprintf("every answering node's CPU reads >= %.0f %% busy: the loads cannot tell the nodes apart: weight held", saturatedCPU)
		case fresh[i]:
			c.apply(c.nodes[n], &out[i], target, why)
		}
	}
	// Rescale the answering nodes so the largest sits at Max.
	top := 0.0
	for _, n := range names {
		if c.nodes[n].missed == 0 && c.nodes[n].prev != nil {
			top = math.Max(top, c.nodes[n].w)
		}
	}
	if top > 0 && top < float64(c.cfg.Max) {
		k := float64(c.cfg.Max) / top
		// If every answering node is at the floor, none is pinned: equal
		// weights at the floor are equal weights at Max, and leaving them
		// all at 1 made the floor a trap no rule step left.
		allFloor := true
		for _, n := range names {
			if st := c.nodes[n]; st.missed == 0 && st.prev != nil && st.w > float64(c.cfg.Floor) {
				allFloor = false
			}
		}
		for i, n := range names {
			st := c.nodes[n]
			// A node at the floor that the rule did not raise (it pushed
			// against the floor, or sat in the dead band there) is not
			// scaled: the floor is the clamp of a wish for less, not a
			// ratio to keep. Scaling it up with the others lifted a hogged
			// node off the floor every poll the others fell (1 -> 14 in
			// the bench at 250 ms polls), each lift undone a poll later.
			pinned := st.w <= float64(c.cfg.Floor) && out[i].Delta <= 0 && !allFloor
			if st.missed == 0 && st.prev != nil && !pinned {
				st.w = math.Min(float64(c.cfg.Max), st.w*k)
				out[i].Reason += fmt.Sprintf("; all answering weights scaled by %.3f so the largest is %d", k, c.cfg.Max)
			}
		}
	}
	for i, n := range names {
		st := c.nodes[n]
		out[i].Exact = st.w
		out[i].Weight = c.round(st.w)
		out[i].Missed = st.missed
		out[i].Reversals = st.reversals
		st.lastStep = now
	}
	c.last = append(c.last[:0], out...)
	return out
}

// observe takes in one node's reading: it computes the terms and the
// smoothed load, or handles a missing or unusable answer (decay). fresh
// says the node has a new load for apply.
func (c *Controller) observe(now time.Time, st *nodeState, r Reading) (d Decision, fresh bool) {
	cfg := &c.cfg
	d = Decision{Node: r.Node, At: now, Previous: c.round(st.w), Gain: st.gain}
	if r.Err != nil {
		c.decay(now, st)
		d.Reason = fmt.Sprintf("no answer (%v): decaying towards floor %d", r.Err, cfg.Floor)
		return d, false
	}
	cur := r.Sample
	if st.prev == nil {
		st.prev = &cur
		st.missed = 0
		d.Reason = "first sample: rates need two"
		return d, false
	}
	t, err := Compute(*st.prev, cur, cfg.Options)
	if errors.Is(err, ErrReset) {
		st.prev = &cur
		st.missed = 0
		d.Reason = fmt.Sprintf("holding: %v", err)
		return d, false
	}
	if errors.Is(err, ErrStale) {
		// Keep the older sample: the next difference spans the refresh.
		st.missed = 0
		d.Reason = fmt.Sprintf("holding: %v", err)
		return d, false
	}
	st.prev = &cur
	if err != nil {
		// A sample we cannot read (no link speed, no CPU counters) is as
		// good as no answer, and says so.
		c.decay(now, st)
		d.Reason = fmt.Sprintf("unusable sample (%v): decaying towards floor %d", err, cfg.Floor)
		return d, false
	}
	st.missed = 0
	d.Terms = &t
	d.Aggregate = t.TotalLoad / cfg.LoadScale
	if !st.haveLoad {
		st.smoothed, st.haveLoad = d.Aggregate, true
	} else {
		st.smoothed += cfg.Smoothing * (d.Aggregate - st.smoothed)
	}
	d.Smoothed = st.smoothed
	return d, true
}

// apply is LVS's rule with the dead band, the reversal damping, the gain
// scheduling that tells a load step from a swing, and a proportional bound
// near the target.
//
// Why gain scheduling: the damping halves the gain on each reversal and only
// doubled it after three polls the same way, so a node whose load had swung
// around the target (noise, a burst) met the next real load step with a gain
// of 1/32 and took up to 15 polls to regain speed (16.7 s in the benchmark's
// load step at 500 ms polls). The gain goes back to 1 when
//
//   - |error| > LargeError and the previous poll moved the weight by less
//     than smallMove (10 %) of itself, or not at all (dead band, clamp, a
//     damped gain): a load that is a share of the demand moves by at most
//     that share, 0.1 at load 1, so a jump past LargeError (0.2) is not our
//     own overshoot but a load step; or
//   - the error is outside the dead band the same way two polls running:
//     that is an undershoot, and damping it only prolongs it.
//
// Only alternating signs, that is oscillation, keep the gain down, and
// reversals never restore it, so a swing keeps dying out geometrically.
// Why the proportional bound: at full gain ∛ overshoots near the target (its
// slope there is infinite), which cost a reversal and two polls after each
// step; see the bound below.
// smallMove: a weight change below this fraction of the weight cannot by
// itself move the load past LargeError (see apply).
const smallMove = 0.1

// unmoved: a load that changed by less than this (towards the target) after
// a move of at least smallMove/2 did not follow the move. maxBoost: the
// highest gain an unresponsive load earns (see apply).
const (
	unmoved  = 0.02
	maxBoost = 4
)

func (c *Controller) apply(st *nodeState, d *Decision, target float64, why string) {
	cfg := &c.cfg
	d.Target = target
	d.Error = target - st.smoothed
	d.Raw = cfg.A * math.Cbrt(d.Error)
	prevErr, lastMove, lastLoad := st.lastErr, st.lastMove, st.lastLoad
	st.lastErr, st.lastMove, st.lastLoad = d.Error, 0, st.smoothed
	if math.Abs(d.Error) <= cfg.DeadBand {
		d.Reason = fmt.Sprintf("inside dead band ±%.3f of %s: unchanged", cfg.DeadBand, why)
		return
	}
	sign := 1
	if d.Error < 0 {
		sign = -1
	}
	if (sign > 0 && st.w >= float64(cfg.Max)) || (sign < 0 && st.w <= float64(cfg.Floor)) {
		// Pushing against a clamp is not a direction change: leave the
		// damping state alone so a later reversal is judged fairly.
		d.Clamped = map[bool]string{true: "max", false: "floor"}[sign > 0]
		d.Reason = fmt.Sprintf("rule pushes past the clamp (%s): unchanged", why)
		return
	}
	if sign > 0 && st.w <= float64(cfg.Floor) && prevErr <= cfg.DeadBand {
		// A node parked at the floor (overloaded, or a hog shares its
		// CPU) leaves it on the second poll asking for more, not the
		// first: one coarse, noisy figure lifted it by a full step (1 -> 25
		// and more) and sent traffic to a node that could not take it. A
		// late lift costs one poll of a little unused capacity.
		d.Reason = fmt.Sprintf("at the floor: waiting for a second poll below %s before raising", why)
		return
	}
	large := math.Abs(d.Error) > cfg.LargeError
	step, unresponsive := "", false
	switch {
	case large && lastMove < smallMove:
		step = "load step (large error after no or a small move): gain reset to 1; "
	case math.Abs(prevErr) > cfg.DeadBand && (prevErr > 0) == (sign > 0) && st.gain < 1:
		step = "load step (error outside the dead band two polls the same way): gain reset to 1; "
	}
	switch {
	case step != "":
		// A new disturbance, not a reversal of our own move: full speed,
		// and the damping starts afresh from this direction.
		st.gain, st.sameRun = 1, 0
	case st.lastSign != 0 && sign != st.lastSign:
		st.gain = math.Max(cfg.MinGain, math.Min(1, st.gain)/2) // a boost ends at a reversal
		st.sameRun = 0
		st.reversals++
	case sign == st.lastSign && lastMove >= smallMove/2 && (st.smoothed-lastLoad)*float64(sign) <= unmoved:
		// The last move was this way and of some size, and the load did
		// not follow it: it is not (only) a share of the demand, it is
		// work no weight moves (a hog). The fixed step of LVS's rule is
		// then only slow: double the gain, up to maxBoost, and skip the
		// proportional bound (which assumes a load that follows).
		st.gain = math.Min(maxBoost, math.Max(1, st.gain)*2)
		st.sameRun = 0
		step = fmt.Sprintf("load did not follow the last move (%.3f -> %.3f): gain %.0f; ", lastLoad, st.smoothed, st.gain)
		unresponsive = true
	case sign == st.lastSign:
		st.sameRun++
		if st.sameRun >= 3 {
			st.gain = math.Min(1, st.gain*2)
			st.sameRun = 0
		}
	}
	st.lastSign = sign
	d.Gain = st.gain
	d.Delta = st.gain * d.Raw
	// Near the target ∛ overshoots: bound the step there by the
	// proportional one, w*(target/load - 1), the weight at which the load
	// would be on target if it scaled with the weight. A load is a share
	// (which moves less than the weight) plus work no weight moves (a hog),
	// so that step never overshoots; far from the target it would be too
	// slow against a hog, so ∛ keeps full speed there.
	if a := math.Abs(d.Error); a <= cfg.LargeError && st.smoothed > 0 && !unresponsive {
		if p := st.w * (target/st.smoothed - 1); math.Abs(p) < math.Abs(d.Delta) && (p < 0) == (d.Delta < 0) {
			d.Delta = p
			step += "bounded by the proportional step; "
		}
	}
	w := st.w + d.Delta
	switch {
	case w > float64(cfg.Max):
		w, d.Clamped = float64(cfg.Max), "max"
	case w < float64(cfg.Floor):
		w, d.Clamped = float64(cfg.Floor), "floor"
	}
	if st.w > 0 {
		st.lastMove = math.Abs(w-st.w) / st.w
	}
	st.w = w
	d.Reason = fmt.Sprintf("%sweight += gain*A*cbrt(%s - load) = %.3f*%.3f*cbrt(%.3f)", step, why, st.gain, cfg.A, d.Error)
}

// decay moves a silent node's weight towards Floor by the clock: half the
// distance per DecayHalfLife, so a longer gap decays further whatever the
// poll rhythm was.
func (c *Controller) decay(now time.Time, st *nodeState) {
	st.missed++
	dt := now.Sub(st.lastStep)
	if dt <= 0 {
		return
	}
	f := math.Exp2(-float64(dt) / float64(c.cfg.DecayHalfLife))
	fl := float64(c.cfg.Floor)
	st.w = fl + (st.w-fl)*f
	if st.w-fl < 0.5 {
		st.w = fl
	}
}

func (c *Controller) round(w float64) int {
	n := int(math.Round(w))
	return max(c.cfg.Floor, min(c.cfg.Max, n))
}
