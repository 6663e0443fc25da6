package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/testbed"
)

// The feedback scenario (issue 17, paper 003 tests 1-3): three nodes on a
// test bed, one 3x slower, the l7 director with rr, lc, wlc and wlc over
// the feedback controller's weights, httperf open-loop at fractions of the
// capacity measured first, and a load step (a CPU hog joins a fast node's
// cgroup mid-run) traced over time.

// FeedbackConfig configures RunFeedback.
type FeedbackConfig struct {
	Bin, Dir, Out string
	Quick         bool
	Log           io.Writer
	// Only runs part of the scenario after the capacity ramp: "step" (the
	// load step, StepRuns times), "test2" (every scheduler at 90 and 110
	// %: goals a and b), "" everything.
	Only string
	// Calls is httperf's calls per connection (paper 003's test 2 used
	// sessions of 50 calls on persistent connections); default 1.
	Calls int
	// Poll is the feedback block's interval; default 500 ms (the
	// director's own default stays 2 s).
	Poll time.Duration
	// StepRuns is how many load steps to run; default 1, 3 with Only "step".
	StepRuns int
	// StepPct is the load step's load, in % of the capacity; default 50.
	StepPct int
	// Dataplane is the director's: "l7" (default; every request is
	// scheduled, lc counts requests in progress) or "xdp" (direct routing
	// as paper 003's LVS: lc counts connections, IPVS's active x 256 +
	// inactive, and each connection's calls stay on one node).
	Dataplane string
	// Generator is the load generator: "httperf" (default, as paper 003)
	// or "go" (`corral bench loadgen`: open loop, per-connection latency
	// from the scheduled start, up to 16384 connections open, where
	// httperf's select() holds 1024 and a second of backlog collapses a
	// row at the client).
	Generator string
}

// FBRow is one httperf run.
type FBRow struct {
	Scheduler  string  `json:"scheduler"`
	LoadPct    int     `json:"load_pct"` // of the measured capacity
	Hog        bool    `json:"hog"`      // the CPU hog shares node1's cgroup
	Offered    float64 `json:"offered"`  // requests/s asked of httperf
	Throughput float64 `json:"throughput"`
	Mean       float64 `json:"mean_ms"` // connection time (1 request per connection)
	P50        float64 `json:"p50_ms"`
	P90        float64 `json:"p90_ms"`
	P99        float64 `json:"p99_ms"`
	Errors     int     `json:"errors"`
	Conns      int     `json:"conns"`
	// Share is each node's share of the requests answered in the run.
	Share map[string]float64 `json:"share"`
	// Weights are the effective weights at the end of the run.
	Weights map[string]int `json:"weights"`
	Note    string         `json:"note,omitempty"`
}

// FBPoint is one sample of the load-step trace.
type FBPoint struct {
	T       float64        `json:"t_s"`
	Weights map[string]int `json:"weights"`
}

// FBLatency is one httperf chunk of the load-step trace.
type FBLatency struct {
	T          float64 `json:"t_s"` // middle of the chunk
	Mean, P99  float64
	Throughput float64
	Errors     int
}

// FBStep is one load-step run: when the hog joined node1, how long node1's
// weight took to settle, and how often it reversed after the step.
type FBStep struct {
	HogAt      float64   `json:"hog_at_s"`
	Reconverge float64   `json:"reconverge_s"` // -1: did not settle; -2: did not move
	Before     float64   `json:"before"`       // node1's mean weight before the step
	Final      float64   `json:"final"`        // its mean over the last quarter
	Reversals  int       `json:"reversals"`    // direction changes larger than the band after the step
	Trace      []FBPoint `json:"trace"`
	// Polls are node1's controller decisions around the step (from 3 s
	// before it), one per poll: what the time from step to settle is made of.
	Polls []FBPoll `json:"polls"`
}

// FBPoll is one of node1's controller decisions in a load step.
type FBPoll struct {
	T      float64 `json:"t_s"` // when the controller stepped, on the trace's clock
	Weight int     `json:"weight"`
	Load   float64 `json:"load"` // the aggregate load the poll measured
	Error  float64 `json:"error"`
	Gain   float64 `json:"gain"`
	Missed int     `json:"missed"`
	Reason string  `json:"reason"`
}

// FeedbackResult is the scenario's output.
type FeedbackResult struct {
	When     time.Time `json:"when"`
	Quick    bool      `json:"quick"`
	File     string    `json:"file"`
	Quota    string    `json:"quota"` // how the nodes are limited
	Capacity float64   `json:"capacity"`
	Ramp     []FBRow   `json:"ramp"`
	Rows     []FBRow   `json:"rows"`
	Test3    []FBRow   `json:"test3"`
	// The load step: feedback at StepPct of capacity, the hog joins
	// node1's cgroup at HogAt seconds.
	StepPct    int                       `json:"step_pct"`
	HogAt      float64                   `json:"hog_at_s"`
	Trace      []FBPoint                 `json:"trace"`
	Latency    []FBLatency               `json:"latency"`
	Reconverge float64                   `json:"reconverge_s"` // -1: did not settle
	Steps      []FBStep                  `json:"steps"`        // every load-step run (the first is Trace and Latency)
	Only       string                    `json:"only,omitempty"`
	Calls      int                       `json:"calls"` // httperf calls per connection
	Dataplane  string                    `json:"dataplane"`
	Generator  string                    `json:"generator"`
	Poll       string                    `json:"poll"`  // the feedback block's interval
	Goals      []string                  `json:"goals"` // issue 17's goals a-c: measured, met or not
	Terms      *director.FeedbackService `json:"terms"` // the controller's view at 80 % of the feedback 110 % run
	Checks     []string                  `json:"checks"`
	// LoadAvg is /proc/loadavg at the start and the end: the machine is
	// shared, and the nodes' quotas only hold when it has CPU to give.
	LoadAvg [2]string `json:"loadavg"`
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

var fbHosts = []string{"node1", "node2", "node3"}

const (
	fbBed    = "h7fb"
	fbPeriod = 60000 // µs: cfs period of the nodes' cgroups
	fbFast   = 6000  // µs per period: 10 % of a CPU (5 % left the slow node's tail over the ramp's bound at 25 req/s on a slower machine)
	fbSlow   = 2000  // a third of that: node3
)

// RunFeedback runs the scenario. It needs root (the test bed, cgroups).
func RunFeedback(ctx context.Context, cfg FeedbackConfig) (*FeedbackResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	switch cfg.Only {
	case "", "step", "test2":
	default:
		return nil, fmt.Errorf("bench feedback: --only %q: want step or test2", cfg.Only)
	}
	cfg.Calls = max(cfg.Calls, 1)
	switch cfg.Generator {
	case "":
		cfg.Generator = "httperf"
	case "httperf", "go":
	default:
		return nil, fmt.Errorf("bench feedback: --generator %q: want httperf or go", cfg.Generator)
	}
	switch cfg.Dataplane {
	case "":
		cfg.Dataplane = "l7"
	case "l7", "xdp":
	default:
		return nil, fmt.Errorf("bench feedback: --dataplane %q: want l7 or xdp", cfg.Dataplane)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Poll < 100*time.Millisecond || cfg.Poll > 10*time.Second {
		return nil, fmt.Errorf("bench feedback: --poll %v: want 100ms to 10s", cfg.Poll)
	}
	if cfg.StepRuns <= 0 {
		cfg.StepRuns = 1
		if cfg.Only == "step" {
			cfg.StepRuns = 3
		}
	}
	cfg.StepRuns = min(cfg.StepRuns, 20)
	if cfg.StepPct <= 0 {
		cfg.StepPct = 50
	}
	if cfg.StepPct > 200 {
		return nil, fmt.Errorf("bench feedback: --step-load %d %%: want 1 to 200", cfg.StepPct)
	}
	if err := testbed.CheckRoot(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("httperf"); err != nil && cfg.Generator == "httperf" {
		return nil, fmt.Errorf("bench feedback needs httperf (Debian: apt-get install httperf; scripts/deps installs it)")
	}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "feedback")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	hosts := append([]string{"client"}, launch.ClusterHosts(3, 3)...)
	testbed.Down(fbBed)
	bed, err := testbed.Up(testbed.NewSpecOn(fbBed, netip.MustParsePrefix("10.87.0.0/24"), hosts, ""))
	if err != nil {
		return nil, err
	}
	defer testbed.Down(fbBed)
	if err := clientPorts(bed.Wrap("client")); err != nil {
		return nil, err
	}
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: scratch, Admin: "127.0.0.1:7500", Dataplane: cfg.Dataplane, Scheduler: "wlc",
		// A TCP connect to the admin port: liveness only. An HTTP
		// /healthz from a node throttled by its quota times out under
		// overload, and the checks, not the weights, would then decide.
		Check: "tcp port=9080 interval=1s timeout=1s rise=1 fall=3"}
	if err := cc.OnTestbed(bed, 3, 3); err != nil {
		return nil, err
	}
	if cfg.Dataplane == "xdp" {
		// Direct routing: the client's frames reach the director's XDP
		// program, the nodes answer the client themselves.
		if err := bed.PrepareDR(xdp.AttachPass, "director", "client"); err != nil {
			return nil, err
		}
	}
	cl, err := launch.StartCluster(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	fsc := client.New(cl.Meta.Addr)
	defer fsc.Close()
	const size = 16 << 10
	path, err := putSample(ctx, fsc, size)
	if err != nil {
		return nil, err
	}
	if cfg.Dataplane == "xdp" {
		// The director learns the nodes' MACs on the first flows.
		if err := waitVIP(ctx, bed, cc.VIP, path); err != nil {
			return nil, err
		}
	}
	res := &FeedbackResult{When: time.Now().UTC(), Quick: cfg.Quick, File: humanBytes(size), LoadAvg: [2]string{loadavg()},
		Only: cfg.Only, Calls: cfg.Calls, Poll: cfg.Poll.String(), Dataplane: cfg.Dataplane, Generator: cfg.Generator,
		Quota: fmt.Sprintf("cgroup cpu quota %d/%d µs (%d %% of a CPU) on node1 and node2, %d/%d µs on node3 (3x slower)", fbFast, fbPeriod, 100*fbFast/fbPeriod, fbSlow, fbPeriod)}

	// Every node in a cgroup of its own: equal quotas, node3 a third.
	groups := map[string]*cpuGroup{}
	defer func() {
		for _, g := range groups {
			g.close()
		}
	}()
	for i, h := range fbHosts {
		q := fbFast
		if h == "node3" {
			q = fbSlow
		}
		g, err := newCPUGroup(fbBed+"-"+h, q, fbPeriod)
		if err != nil {
			return nil, err
		}
		groups[h] = g
		if err := g.add(cl.Nodes[i].Pid()); err != nil {
			return nil, err
		}
	}
	res.Quota += "; " + groups["node1"].kind
	nodeHost := map[string]string{}
	for i, n := range cl.Nodes {
		nodeHost[n.Addr] = fbHosts[i]
	}
	adm := director.Client{Base: "http://127.0.0.1:7500", HTTP: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: bed.DialContext("director")}}}
	vip, err := netip.ParseAddrPort(cc.VIP)
	if err != nil {
		return nil, err
	}
	// run offers rate requests/s for d with cfg.Calls requests per
	// connection. The capacity ramp uses the same sessions: a node serves
	// 50 calls on one connection for less than 50 connections (on xdp the
	// node does every handshake), and a capacity measured with one call
	// per connection put "110 %" of sessions below the overload.
	run := func(rate float64, d time.Duration) (FBRow, error) {
		if cfg.Generator == "go" {
			return loadgenRun(ctx, cfg.Bin, bed.Wrap("client"), vip, path, rate, cfg.Calls, d)
		}
		return httperf(ctx, bed.Wrap("client"), vip, path, rate, cfg.Calls, d)
	}
	// drained waits (at most 90 s) until no request is in progress at any
	// node: a node overloaded by the previous run (rr sends the slow one
	// a third) works through its backlog of requests the clients gave up
	// on, and the next scheduler would find it still busy.
	drained := func() {
		for i := 0; i < 450 && ctx.Err() == nil; i++ {
			st, err := adm.Services(ctx)
			busy := err != nil
			for _, x := range st {
				for _, r := range x.Servers {
					busy = busy || r.Active > 0
				}
			}
			if !busy {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		logf("nodes still busy after 90 s; going on\n")
	}
	// apply makes the director run scheduler (feedback: wlc over the
	// controller's weights) and waits until it does.
	apply := func(scheduler string) error {
		drained()
		s := scheduler
		if s == "feedback" {
			s = "wlc"
		}
		if err := cl.WriteDirectorConf(s, nil); err != nil {
			return err
		}
		b, err := os.ReadFile(cl.ConfPath)
		if err != nil {
			return err
		}
		text := strings.Replace(string(b), "docroot /www\n", "docroot /www\n"+fbBlock(cfg.Poll), 1)
		if scheduler == "feedback" {
			text = strings.Replace(text, "    scheduler wlc\n", "    scheduler wlc\n    weights feedback\n", 1)
		}
		if err := os.WriteFile(cl.ConfPath+".tmp", []byte(text), 0o644); err != nil {
			return err
		}
		if err := os.Rename(cl.ConfPath+".tmp", cl.ConfPath); err != nil {
			return err
		}
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := adm.Services(ctx); err == nil {
				for _, x := range st {
					if x.Name != "www" || x.Scheduler != s {
						continue
					}
					ok := len(x.Servers) == len(fbHosts)
					for _, r := range x.Servers {
						ok = ok && r.Healthy && (r.Feedback >= 0) == (scheduler == "feedback")
					}
					if ok {
						return nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		return fmt.Errorf("the director did not take scheduler %s within 20 s (see %s)", scheduler, cl.Director.Log)
	}
	// counts reads each node's requests (the director's count; on xdp,
	// which sees no requests, its connections) so a run's split can be
	// told.
	counts := func() (map[string]int64, map[string]int, error) {
		st, err := adm.Services(ctx)
		if err != nil {
			return nil, nil, err
		}
		c, w := map[string]int64{}, map[string]int{}
		for _, s := range st {
			if s.Name == "www" {
				for _, r := range s.Servers {
					c[nodeHost[r.Addr]], w[nodeHost[r.Addr]] = r.Requests, r.Weight
					if cfg.Dataplane == "xdp" {
						c[nodeHost[r.Addr]] = r.Connections
					}
				}
			}
		}
		return c, w, nil
	}
	// node1Decision is the controller's latest decision for node1.
	node1Decision := func() (director.FeedbackNode, bool) {
		st, err := adm.Feedback(ctx)
		if err != nil {
			return director.FeedbackNode{}, false
		}
		for _, s := range st.Services {
			for _, n := range s.Nodes {
				if nodeHost[n.Node] == "node1" {
					return n, true
				}
			}
		}
		return director.FeedbackNode{}, false
	}
	measured := func(sched string, pct int, hog bool, rate float64, d time.Duration) (FBRow, error) {
		before, _, err := counts()
		if err != nil {
			return FBRow{}, err
		}
		row, err := run(rate, d)
		if err != nil {
			return row, err
		}
		after, w, err := counts()
		if err != nil {
			return row, err
		}
		row.Scheduler, row.LoadPct, row.Hog, row.Weights, row.Share = sched, pct, hog, w, map[string]float64{}
		total := int64(0)
		for h := range after {
			total += after[h] - before[h]
		}
		for h := range after {
			if total > 0 {
				row.Share[h] = float64(after[h]-before[h]) / float64(total)
			}
		}
		logf("%-8s %3d%% hog=%-5v offered %6.0f/s  got %6.0f/s  mean %6.1f ms  p99 %6.1f ms  errors %d  share n1 %.2f n2 %.2f n3 %.2f  weights %v\n",
			sched, pct, hog, row.Offered, row.Throughput, row.Mean, row.P99, row.Errors, row.Share["node1"], row.Share["node2"], row.Share["node3"], w)
		return row, nil
	}

	runDur, warm, rampDur := 20*time.Second, 6*time.Second, 5*time.Second
	loads := []int{50, 70, 90, 110}
	if cfg.Quick {
		runDur, warm, rampDur = 3*time.Second, 3*time.Second, 2*time.Second
		loads = []int{50, 110}
	}
	switch cfg.Only {
	case "test2":
		loads = []int{90, 110}
	case "step":
		loads = nil
	}

	// 1. Capacity: wlc, an open-loop ramp until the replies stop
	// following the offer.
	if err := apply("wlc"); err != nil {
		return nil, err
	}
	if cfg.Calls > 1 {
		rampDur *= 2 // a 5 s step at 100 req/s holds 10 sessions of 50
	}
	res.Capacity, res.Ramp, err = rampCapacity(func(rate float64) (FBRow, error) {
		return measured("wlc", 0, false, rate, rampDur)
	}, cfg.Calls > 1)
	if err != nil {
		return nil, err
	}
	if res.Capacity < 10 {
		return nil, fmt.Errorf("measured capacity %.0f req/s: the cluster does not answer (see %s)", res.Capacity, cl.Director.Log)
	}
	logf("capacity %.0f req/s\n", res.Capacity)

	// 2. Every scheduler at every load (paper 003 tests 1 and 2).
	var snap sync.WaitGroup // the snapshot of the controller's terms
	for _, s := range []string{"rr", "lc", "wlc", "feedback"} {
		if len(loads) == 0 {
			break
		}
		if err := apply(s); err != nil {
			return nil, err
		}
		sleepCtx(ctx, warm)
		for _, pct := range loads {
			if s == "feedback" && pct == loads[len(loads)-1] {
				// The controller's view late in the overloaded run (after
				// it, the nodes drain their queues and read idle).
				snap.Add(1)
				go func() {
					defer snap.Done()
					sleepCtx(ctx, runDur*4/5)
					if st, err := adm.Feedback(ctx); err == nil && len(st.Services) > 0 {
						res.Terms = &st.Services[0]
					}
				}()
			}
			row, err := measured(s, pct, false, res.Capacity*float64(pct)/100, runDur)
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, row)
		}
	}

	snap.Wait()
	// 3. Paper test 3: overloaded, and a CPU hog on node1.
	test3 := []string{"rr", "lc", "wlc", "feedback"}
	if cfg.Only != "" {
		test3 = nil
	}
	hog, err := startHog(groups["node1"])
	if err != nil {
		return nil, err
	}
	for _, s := range test3 {
		if err := apply(s); err != nil {
			hog.stop()
			return nil, err
		}
		sleepCtx(ctx, warm)
		row, err := measured(s, 110, true, res.Capacity*1.1, runDur)
		if err != nil {
			hog.stop()
			return nil, err
		}
		res.Test3 = append(res.Test3, row)
	}
	hog.stop()

	// 4. The load step, with feedback: 50 % of capacity (below the
	// overload where the controller steers to the mean load instead of
	// the target), the hog joins node1 a third of the way in. Repeated
	// StepRuns times (--only step: cheap to repeat); the first run's trace
	// and latency are plotted.
	res.StepPct = cfg.StepPct
	total, chunk := 60*time.Second, 2*time.Second
	switch {
	case cfg.Quick:
		total, chunk = 18*time.Second, time.Second
	case cfg.Only == "step":
		total = 30 * time.Second
	}
	if cfg.Only == "test2" {
		cfg.StepRuns = 0
	}
	for i := 0; i < cfg.StepRuns && ctx.Err() == nil; i++ {
		if err := apply("feedback"); err != nil {
			return nil, err
		}
		sleepCtx(ctx, warm)
		st, lat := loadStep(ctx, groups["node1"], counts, node1Decision, func(d time.Duration) (FBRow, error) {
			return run(res.Capacity*float64(res.StepPct)/100, d)
		}, total, chunk)
		res.Steps = append(res.Steps, st)
		if i == 0 {
			res.HogAt, res.Trace, res.Latency, res.Reconverge = st.HogAt, st.Trace, lat, st.Reconverge
		}
		logf("load step %d: hog on node1 at %.1f s, node1's weight %.0f -> %.0f settled %.2f s later, %d reversals after the step\n",
			i+1, st.HogAt, st.Before, st.Final, st.Reconverge, st.Reversals)
	}
	res.LoadAvg[1] = loadavg()
	res.check()
	res.goals()
	for _, g := range res.Goals {
		logf("goal %s\n", g)
	}
	if err := res.plots(cfg.Out); err != nil {
		return nil, err
	}
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

// waitVIP waits (20 s at most) until the VIP answers path from the client
// host.
func waitVIP(ctx context.Context, bed *testbed.Bed, vip, path string) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: bed.DialContext("client"), DisableKeepAlives: true}}
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		var resp *http.Response
		if resp, err = hc.Get("http://" + vip + path); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	return fmt.Errorf("VIP %s never answered %s from the client host: %v", vip, path, err)
}

// fbBlock is the director's feedback block in the scenario: the agent
// source (each node's admin /load), cpuraw from the nodes' own cgroups,
// target 0.8: the host-wide disk term adds the same ~6 % to every node,
// and a node whose cgroup a hog shares reads 100 % busy whatever its
// weight, so LVS's target of 1 (CPU ~94 %) would leave it inside the dead
// band.
func fbBlock(poll time.Duration) string {
	return fmt.Sprintf(`feedback {
    source agent
    agent-port 9080
    interval %v
    timeout %v
    cpu cpuraw
    bandwidth 1gbit
    target 0.8
}
`, poll, min(300*time.Millisecond, poll*4/5))
}

// clientPorts widens the client host's ephemeral ports and lets it reuse
// TIME_WAIT ports for new connections. With one request per connection at
// ~1000 req/s, a 20 s run opens 20 000 connections and each port waits 60 s
// in TIME_WAIT: the client held 18 000 of the default 28 000 (32768-60999)
// during test 2 on 2026-11-27, close to running out, which would fail
// httperf's connections for whichever scheduler ran then. (It was not the
// cause of lc's collapse at 110 % that day: that remained with this.) The
// settings are the client namespace's own.
func clientPorts(wrap []string) error {
	for _, kv := range []string{"net.ipv4.ip_local_port_range=1024 65535", "net.ipv4.tcp_tw_reuse=1"} {
		args := append(append([]string{}, wrap[1:]...), "sysctl", "-q", "-w", kv)
		if out, err := exec.Command(wrap[0], args...).CombinedOutput(); err != nil {
			return fmt.Errorf("client host: sysctl %s: %v: %s", kv, err, out)
		}
	}
	return nil
}

// followed says the replies kept up with rate with no queue building: a
// short ramp step at the edge of overload still answers most requests, but
// a 20 s run at that rate would not. p99Bound is the tail a step may have:
// 500 ms for one request per connection; for sessions of many calls (a
// session's latency is all its calls) 3x the lightest step's p99.
func followed(row FBRow, rate, p99Bound float64) bool {
	return row.Throughput >= 0.95*rate && row.Errors <= row.Conns/200 && row.P99 <= p99Bound
}

// rampCapacity is the capacity: measure at 25, 50, 100, ... req/s until
// a rate is not followed, then two bisection steps between the last rate
// followed and the first not (doubling alone would leave it up to 2x low).
// The capacity is the highest throughput of a rate that was followed: a
// rate not followed may still answer near the offer for a short step
// (with a growing queue), and loads of 90 or 110 % of that would be
// overload already. sessions says a connection carries many calls: the
// tail bound is then relative to the lightest step (see followed).
func rampCapacity(measure func(rate float64) (FBRow, error), sessions bool) (float64, []FBRow, error) {
	var ramp []FBRow
	capacity, okRate, failRate, bound := 0.0, 0.0, 0.0, 500.0
	// From 25 req/s: the nodes' CPU quotas are a few % of a CPU, and on a
	// slower machine 100 req/s was already past the slow node's tail bound
	// (the ramp then measured nothing).
	for rate := 25.0; rate <= 3200; rate *= 2 {
		row, err := measure(rate)
		if err != nil {
			return 0, ramp, err
		}
		ramp = append(ramp, row)
		if sessions && len(ramp) == 1 {
			bound = max(bound, 3*row.P99)
		}
		if !followed(row, rate, bound) {
			failRate = rate
			break
		}
		okRate, capacity = rate, math.Max(capacity, row.Throughput)
	}
	for i := 0; i < 2 && failRate > 0 && okRate > 0; i++ {
		mid := (okRate + failRate) / 2
		row, err := measure(mid)
		if err != nil {
			return 0, ramp, err
		}
		ramp = append(ramp, row)
		if followed(row, mid, bound) {
			okRate, capacity = mid, math.Max(capacity, row.Throughput)
		} else {
			failRate = mid
		}
	}
	return capacity, ramp, nil
}

// loadStep runs one load step: run (httperf chunks of chunk) for total,
// the hog joins node cgroup g a third of the way in, and node1's weight is
// read every 100 ms (the admin API is cheap; a finer trace makes the
// settling time less coarse: it can only be late by one trace interval).
func loadStep(ctx context.Context, g *cpuGroup, counts func() (map[string]int64, map[string]int, error),
	decision func() (director.FeedbackNode, bool), run func(time.Duration) (FBRow, error), total, chunk time.Duration) (FBStep, []FBLatency) {
	var st FBStep
	var lat []FBLatency
	start := time.Now()
	st.HogAt = (total / 3).Seconds()
	tctx, stopTrace := context.WithCancel(ctx)
	var traceWG sync.WaitGroup
	traceWG.Add(1)
	go func() {
		defer traceWG.Done()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		var hogStep *hogProc
		defer func() {
			if hogStep != nil {
				hogStep.stop()
			}
		}()
		var lastPoll time.Time
		for {
			if hogStep == nil && time.Since(start).Seconds() >= st.HogAt {
				if h, err := startHog(g); err == nil {
					hogStep = h
					st.HogAt = time.Since(start).Seconds()
				}
			}
			if _, w, err := counts(); err == nil {
				st.Trace = append(st.Trace, FBPoint{T: time.Since(start).Seconds(), Weights: w})
			}
			if d, ok := decision(); ok && time.Since(start).Seconds() > st.HogAt-3 && !d.At.Equal(lastPoll) && len(st.Polls) < 1000 {
				lastPoll = d.At
				st.Polls = append(st.Polls, FBPoll{T: d.At.Sub(start).Seconds(), Weight: d.Weight, Load: d.Aggregate, Error: d.Error,
					Gain: d.Gain, Missed: d.Missed, Reason: d.Reason})
			}
			select {
			case <-tctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	for time.Since(start) < total && ctx.Err() == nil {
		t0 := time.Since(start)
		row, err := run(chunk)
		if err != nil {
			break
		}
		lat = append(lat, FBLatency{T: (t0 + time.Since(start)).Seconds() / 2, Mean: row.Mean, P99: row.P99, Throughput: row.Throughput, Errors: row.Errors})
	}
	stopTrace()
	traceWG.Wait()
	st.Reconverge, st.Before, st.Final, st.Reversals = reconvergence(st.Trace, "node1", st.HogAt)
	return st, lat
}

// reconvergence is how long after at node's weight entered, for good, the
// band of ±max(3, 10 %) around its final value (the mean of the last
// quarter of the trace). -1: it never settled; -2: it did not move (the
// final value is within the band of the weight before the step). It also
// returns the mean weight before the step, the final value, and the
// reversals after the step: direction changes between moves of more than
// the band (smaller ones are the trace's rounding and noise, not
// oscillation).
func reconvergence(tr []FBPoint, node string, at float64) (settle, before, final float64, reversals int) {
	if len(tr) < 8 {
		return -1, 0, 0, 0
	}
	q := tr[len(tr)*3/4:]
	for _, p := range q {
		final += float64(p.Weights[node])
	}
	final /= float64(len(q))
	band := math.Max(3, 0.1*final)
	nb := 0
	for _, p := range tr {
		if p.T < at {
			before += float64(p.Weights[node])
			nb++
		}
	}
	if nb > 0 {
		before /= float64(nb)
	}
	// Reversals: from the weight at the step, each time the weight has
	// moved more than the band away from the last turning point.
	ref, dir := math.NaN(), 0
	for _, p := range tr {
		w := float64(p.Weights[node])
		if p.T < at || math.IsNaN(ref) {
			ref = w // the last weight before the step
			continue
		}
		d := 0
		switch {
		case w > ref+band:
			d = 1
		case w < ref-band:
			d = -1
		}
		if d != 0 {
			if dir != 0 && d != dir {
				reversals++
			}
			dir, ref = d, w
		} else if (dir > 0 && w > ref) || (dir < 0 && w < ref) {
			ref = w // still going the same way: follow the extreme
		}
	}
	if nb > 0 && math.Abs(before-final) <= band {
		return -2, before, final, reversals
	}
	settle = -1.0
	for _, p := range tr {
		if p.T < at {
			continue
		}
		if math.Abs(float64(p.Weights[node])-final) > band {
			settle = -1
		} else if settle < 0 {
			settle = p.T - at
		}
	}
	return settle, before, final, reversals
}

// httperfTimeout is httperf's --timeout: a request not answered by then
// is an error.
const httperfTimeout = 2 * time.Second

// p99All is a row's p99 over every request, not only the answered ones:
// a scheduler whose failures are fast (httperf's fd-unavail when a backlog
// passes ~1000 requests) must not look quick for them. With more than 1 %
// failed, the 99th percentile is a failure, counted as the timeout.
func p99All(x FBRow) float64 {
	if x.Conns > 0 && x.Errors*100 > x.Conns {
		return max(x.P99, float64(httperfTimeout/time.Millisecond))
	}
	return x.P99
}

// goals records issue 17's goals for this bench, each with the measured
// figures and "met" or "NOT met" (or why it was not measured):
// (a) at 90 % load feedback's p99 at least 50 % below wlc's and 70 % below
// rr's; (b) paper 003's test 2 (110 %): feedback's throughput at least
// 1.3x lc's and 1.5x rr's; (c) every load step reconverges within 2 s with
// at most one reversal (an overshoot that comes back; more is
// oscillation).
func (r *FeedbackResult) goals() {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	at := func(pct int) map[string]FBRow {
		by := map[string]FBRow{}
		for _, x := range r.Rows {
			if x.LoadPct == pct {
				by[x.Scheduler] = x
			}
		}
		return by
	}
	if by := at(90); by["feedback"].Conns > 0 && by["wlc"].P99 > 0 && by["rr"].P99 > 0 {
		f, w, rr := p99All(by["feedback"]), p99All(by["wlc"]), p99All(by["rr"])
		bw, br := 1-f/w, 1-f/rr
		r.Goals = append(r.Goals, fmt.Sprintf("(a) 90 %% load: feedback p99 %.1f ms is %.0f %% below wlc's %.1f ms (want >= 50 %%) and %.0f %% below rr's %.1f ms (want >= 70 %%) (p99 of every request: a failed one counts as the %v timeout): %s",
			f, 100*bw, w, 100*br, rr, httperfTimeout, verdict(bw >= 0.5 && br >= 0.7)))
	} else {
		r.Goals = append(r.Goals, "(a) 90 % load: not measured in this run")
	}
	if by := at(110); by["feedback"].Conns > 0 && by["lc"].Throughput > 0 && by["rr"].Throughput > 0 {
		f := by["feedback"].Throughput
		kl, kr := f/by["lc"].Throughput, f/by["rr"].Throughput
		g := fmt.Sprintf("(b) test 2 (110 %%, %d calls per connection): feedback throughput %.0f/s is %.2fx lc's %.0f/s (want >= 1.3x) and %.2fx rr's %.0f/s (want >= 1.5x): %s",
			r.Calls, f, kl, by["lc"].Throughput, kr, by["rr"].Throughput, verdict(kl >= 1.3 && kr >= 1.5))
		// No scheduler answers more than the cluster can serve. The most
		// it served in any run of this bench (the ramp's capacity is a
		// conservative figure) bounds every ratio: when that is below
		// 1.3x lc, 1.3x lc is out of reach for any scheduler, and the
		// verdict says so rather than blame the weights.
		most := r.Capacity
		for _, x := range append(append(append([]FBRow(nil), r.Rows...), r.Ramp...), r.Test3...) {
			most = max(most, x.Throughput)
		}
		if bound := most / by["lc"].Throughput; most > 0 && bound < 1.3 {
			g += fmt.Sprintf(" (the most this cluster answered in any run was %.0f/s, %.2fx lc's: 1.3x lc is out of reach for any scheduler here)", most, bound)
		}
		r.Goals = append(r.Goals, g)
	} else {
		r.Goals = append(r.Goals, "(b) test 2: not measured in this run")
	}
	if len(r.Steps) == 0 {
		r.Goals = append(r.Goals, "(c) load step: not measured in this run")
		return
	}
	var figs []string
	ok := true
	for _, st := range r.Steps {
		figs = append(figs, fmt.Sprintf("%.2f s (%d reversals)", st.Reconverge, st.Reversals))
		ok = ok && st.Reconverge >= 0 && st.Reconverge <= 2 && st.Reversals <= 1
	}
	r.Goals = append(r.Goals, fmt.Sprintf("(c) load step at %s polls, %d runs: node1's weight settled %s after the hog joined (want <= 2 s, <= 1 reversal each): %s",
		r.Poll, len(r.Steps), strings.Join(figs, ", "), verdict(ok)))
}

// check records the behaviour the quick run must show.
func (r *FeedbackResult) check() {
	add := func(ok bool, what string) {
		s := "ok"
		if !ok {
			s = "FAILED"
		}
		r.Checks = append(r.Checks, fmt.Sprintf("%s: %s", what, s))
	}
	// Weights reached the pool: the configured weights are all 1.
	moved := false
	for _, row := range r.Rows {
		if row.Scheduler == "feedback" {
			for _, w := range row.Weights {
				moved = moved || w > 1
			}
		}
	}
	if len(r.Rows) > 0 {
		add(moved, "feedback weights reached the pool (a weight above the configured 1)")
	}
	// Paper test 3: the hog's node gets less of the traffic than rr gives it.
	share := map[string]float64{}
	for _, row := range r.Test3 {
		share[row.Scheduler] = row.Share["node1"]
	}
	if len(r.Test3) > 0 {
		add(share["feedback"] < share["rr"], fmt.Sprintf("test 3: feedback gives node1 (hog) a smaller share than rr (%.2f < %.2f)", share["feedback"], share["rr"]))
	}
	if n := len(r.Trace); n > 0 {
		last := r.Trace[n-1].Weights
		add(last["node1"] < last["node2"], fmt.Sprintf("load step: node1 (hog) ends below node2 (%d < %d)", last["node1"], last["node2"]))
	}
}

var (
	reTotal  = regexp.MustCompile(`Total: connections (\d+) requests (\d+) replies (\d+) test-duration ([\d.]+) s`)
	reConnT  = regexp.MustCompile(`Connection time \[ms\]: min [\d.]+ avg ([\d.]+)`)
	reStatus = regexp.MustCompile(`Reply status: 1xx=\d+ 2xx=(\d+)`)
	reErrors = regexp.MustCompile(`Errors: total (\d+)`)
	reFD     = regexp.MustCompile(`Errors: fd-unavail (\d+)`)
	reHist   = regexp.MustCompile(`^\s+([\d.]+)\s+(\d+)$`)
)

// httperf runs httperf in the client host: rate requests per second for
// d, as rate/calls new connections per second of calls requests each
// (httperf --num-calls: persistent connections, one request after the
// other); open-loop in connections (it does not wait for replies to open
// the next). Latency is httperf's connection time (of all its calls);
// percentiles come from its 1 ms lifetime histogram (-v -v).
func httperf(ctx context.Context, wrap []string, vip netip.AddrPort, path string, rate float64, calls int, d time.Duration) (FBRow, error) {
	calls = max(calls, 1)
	crate := rate / float64(calls)
	conns := max(int(crate*d.Seconds()), 1)
	args := append(append([]string{}, wrap[1:]...), "httperf", "--hog", "--server", vip.Addr().String(), "--port", strconv.Itoa(int(vip.Port())),
		"--uri", path, "--rate", fmt.Sprintf("%.2f", crate), "--num-conns", strconv.Itoa(conns), "--num-calls", strconv.Itoa(calls), "--timeout", strconv.Itoa(int(httperfTimeout/time.Second)), "-v", "-v")
	// Bounded: under overload on a loaded machine httperf can run well
	// past d; a run cut short counts every connection as an error and
	// the scenario goes on.
	cctx, cancel := context.WithTimeout(ctx, 3*d+60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, wrap[0], args...).Output()
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		return FBRow{Offered: rate, Conns: conns, Errors: conns, Note: fmt.Sprintf("httperf killed after %v", 3*d+60*time.Second)}, nil
	}
	if err != nil {
		return FBRow{}, fmt.Errorf("httperf: %v: %.500s", err, out)
	}
	return parseHTTPerf(string(out), rate)
}

func parseHTTPerf(out string, rate float64) (FBRow, error) {
	row := FBRow{Offered: rate}
	m := reTotal.FindStringSubmatch(out)
	if m == nil {
		return row, fmt.Errorf("httperf: no totals in its output: %.500s", out)
	}
	row.Conns, _ = strconv.Atoi(m[1])
	dur, _ := strconv.ParseFloat(m[4], 64)
	if m := reStatus.FindStringSubmatch(out); m != nil && dur > 0 {
		ok, _ := strconv.Atoi(m[1])
		row.Throughput = float64(ok) / dur
	}
	if m := reConnT.FindStringSubmatch(out); m != nil {
		row.Mean, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reErrors.FindStringSubmatch(out); m != nil {
		row.Errors, _ = strconv.Atoi(m[1])
	}
	// httperf waits with select(), so it holds at most FD_SETSIZE (1024)
	// sockets: once about 1000 requests are outstanding (a second's
	// backlog at these rates) each new one fails at once as fd-unavail.
	// Those are the overload's errors, but they are the generator's
	// limit, not refusals by the director: say so beside the count.
	if m := reFD.FindStringSubmatch(out); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			row.Note = fmt.Sprintf("%d of them httperf's fd-unavail: over ~1000 outstanding", n)
		}
	}
	type bin struct {
		ms float64
		n  int
	}
	var bins []bin
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "Connection lifetime histogram"):
			in = true
		case strings.HasPrefix(l, "Total:"):
			in = false
		case in:
			if m := reHist.FindStringSubmatch(l); m != nil {
				ms, _ := strconv.ParseFloat(m[1], 64)
				n, _ := strconv.Atoi(m[2])
				bins = append(bins, bin{ms, n})
			}
		}
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].ms < bins[j].ms })
	total := 0
	for _, b := range bins {
		total += b.n
	}
	pct := func(p float64) float64 {
		want, seen := int(math.Ceil(p*float64(total))), 0
		for _, b := range bins {
			seen += b.n
			if seen >= want {
				return b.ms
			}
		}
		return 0
	}
	if total > 0 {
		row.P50, row.P90, row.P99 = pct(0.5), pct(0.9), pct(0.99)
	}
	return row, nil
}

// cpuGroup is a cgroup limiting CPU: v2 (cpu.max) where the cpu
// controller is on the unified hierarchy, else v1 (cpu.cfs_quota_us, with
// a cpuacct group beside it for the node's usage).
type cpuGroup struct {
	kind string
	dirs []string // the group's directories (v1: cpu and cpuacct)
}

func newCPUGroup(name string, quota, period int) (*cpuGroup, error) {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(b)+" ", " cpu ") {
		dir := "/sys/fs/cgroup/" + name
		os.Mkdir(dir, 0o755)
		g := &cpuGroup{kind: "cgroup v2 cpu.max", dirs: []string{dir}}
		if err := os.WriteFile(dir+"/cpu.max", []byte(fmt.Sprintf("%d %d", quota, period)), 0o644); err != nil {
			g.close()
			return nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		return g, nil
	}
	cpu, acct := "/sys/fs/cgroup/cpu/"+name, "/sys/fs/cgroup/cpuacct/"+name
	g := &cpuGroup{kind: "cgroup v1 cpu.cfs_quota_us (this kernel has the cpu controller on v1, not on the unified hierarchy)", dirs: []string{cpu, acct}}
	for _, d := range g.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.close()
			return nil, fmt.Errorf("cgroup: %w (bench feedback limits the nodes' CPU with cgroups)", err)
		}
	}
	if err := os.WriteFile(cpu+"/cpu.cfs_period_us", []byte(strconv.Itoa(period)), 0o644); err != nil {
		g.close()
		return nil, fmt.Errorf("cgroup %s: %w", cpu, err)
	}
	if err := os.WriteFile(cpu+"/cpu.cfs_quota_us", []byte(strconv.Itoa(quota)), 0o644); err != nil {
		g.close()
		return nil, fmt.Errorf("cgroup %s: %w", cpu, err)
	}
	return g, nil
}

func (g *cpuGroup) add(pid int) error {
	for _, d := range g.dirs {
		if err := os.WriteFile(d+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: add %d: %w", d, pid, err)
		}
	}
	return nil
}

// close moves what is left in the group to its parent and removes it.
func (g *cpuGroup) close() {
	for _, d := range g.dirs {
		if b, err := os.ReadFile(d + "/cgroup.procs"); err == nil {
			for _, p := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Dir(d)+"/cgroup.procs", []byte(p), 0o644)
			}
		}
		for i := 0; i < 20; i++ { // bounded: a moved process may take a moment
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// hogProc is a busy loop sharing a node's cgroup (so its quota): the
// "CPU load on real server 1" of the paper's test 3.
type hogProc struct{ cmd *exec.Cmd }

func startHog(g *cpuGroup) (*hogProc, error) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &hogProc{cmd}
	if err := g.add(cmd.Process.Pid); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

func (h *hogProc) stop() {
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

func (r *FeedbackResult) plots(out string) error {
	if len(r.Trace) == 0 {
		return nil
	}
	var ws []Series
	for _, h := range fbHosts {
		s := Series{Name: h}
		for _, p := range r.Trace {
			s.X, s.Y = append(s.X, p.T), append(s.Y, float64(p.Weights[h]))
		}
		ws = append(ws, s)
	}
	ws = append(ws, Series{Name: "hog starts", X: []float64{r.HogAt, r.HogAt}, Y: []float64{0, 100}, Dashed: true})
	if err := LineChart(filepath.Join(out, "feedback-weights.svg"), fmt.Sprintf("feedback weights, load step at %.0f s (%d%% load)", r.HogAt, r.StepPct), "time (s)", "weight", ws); err != nil {
		return err
	}
	mean, p99 := Series{Name: "mean"}, Series{Name: "p99"}
	top := 0.0
	for _, l := range r.Latency {
		mean.X, mean.Y = append(mean.X, l.T), append(mean.Y, l.Mean)
		p99.X, p99.Y = append(p99.X, l.T), append(p99.Y, l.P99)
		top = math.Max(top, l.P99)
	}
	return LineChart(filepath.Join(out, "feedback-latency.svg"), "latency through the load step (httperf chunks)", "time (s)", "ms",
		[]Series{mean, p99, {Name: "hog starts", X: []float64{r.HogAt, r.HogAt}, Y: []float64{0, top}, Dashed: true}})
}

// Markdown renders the result.
func (r *FeedbackResult) Markdown() string {
	var b strings.Builder
	q := ""
	if r.Quick {
		q = " (--quick: short runs, behaviour checks only)"
	}
	if r.Only != "" {
		q += " (--only " + r.Only + ")"
	}
	calls := "one request per connection"
	if r.Calls > 1 {
		calls = fmt.Sprintf("%d requests per connection (persistent connections; latencies are per connection, of all its calls)", r.Calls)
	}
	gen := "httperf open-loop (--hog; at most 1024 sockets: select())"
	if r.Generator == "go" {
		gen = "`corral bench loadgen` open-loop (up to 16384 connections open; latency from each connection's scheduled start)"
	}
	dp := "the l7 director (every request scheduled; lc counts requests in progress)"
	if r.Dataplane == "xdp" {
		dp = "the xdp director in direct routing (connections scheduled; lc counts connections as IPVS: active x 256 + inactive; shares are of connections)"
	}
	fmt.Fprintf(&b, "# feedback, %s%s\n\nThree nodes on test bed %s (10.87.0.0/24), %s, %s requests of a %s file, %s, %s. Feedback polls every %s. %s.\n\n",
		r.When.Format(time.RFC3339), q, fbBed, dp, "GET", r.File, gen, calls, r.Poll, r.Quota)
	if len(r.Goals) > 0 {
		b.WriteString("## Issue 17's goals\n\n")
		for _, g := range r.Goals {
			fmt.Fprintf(&b, "- %s\n", g)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Capacity (wlc, open-loop ramp): **%.0f req/s**. /proc/loadavg at the start: %s; at the end: %s (2 CPUs, shared).\n\n", r.Capacity, r.LoadAvg[0], r.LoadAvg[1])
	table := func(rows []FBRow) {
		b.WriteString("| scheduler | load | offered/s | throughput/s | mean ms | p50 ms | p90 ms | p99 ms | errors | share n1/n2/n3 | weights n1/n2/n3 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range rows {
			errs := strconv.Itoa(x.Errors)
			if x.Note != "" {
				errs += " (" + x.Note + ")"
			}
			fmt.Fprintf(&b, "| %s | %d%% | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %s | %.2f/%.2f/%.2f | %d/%d/%d |\n", x.Scheduler, x.LoadPct, x.Offered, x.Throughput,
				x.Mean, x.P50, x.P90, x.P99, errs, x.Share["node1"], x.Share["node2"], x.Share["node3"], x.Weights["node1"], x.Weights["node2"], x.Weights["node3"])
		}
	}
	if len(r.Rows) > 0 {
		b.WriteString("## Every scheduler and load\n\n")
		table(r.Rows)
		b.WriteString("\n## Paper 003 tests 1-3 beside the paper's figures\n\n")
		b.WriteString("The paper reports throughput (\"capability\") ratios of its SNMP feedback scheduler to lc and rr. Test 1: not overloaded; test 2: overloaded; test 3: overloaded with CPU load added on real server 1.\n\n")
		b.WriteString("| test | here | feedback / rr throughput | feedback / lc throughput | feedback / wlc throughput | mean ms rr / lc / wlc / feedback | paper |\n|---|---|---|---|---|---|---|\n")
		ratioRow := func(name, here string, rows []FBRow, paper string) {
			by := map[string]FBRow{}
			for _, x := range rows {
				by[x.Scheduler] = x
			}
			f := by["feedback"]
			div := func(a, c float64) string {
				if c == 0 {
					return "-"
				}
				return fmt.Sprintf("%.2f", a/c)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1f / %.1f / %.1f / %.1f | %s |\n", name, here, div(f.Throughput, by["rr"].Throughput), div(f.Throughput, by["lc"].Throughput),
				div(f.Throughput, by["wlc"].Throughput), by["rr"].Mean, by["lc"].Mean, by["wlc"].Mean, f.Mean, paper)
		}
		pick := func(pct int) []FBRow {
			var out []FBRow
			for _, x := range r.Rows {
				if x.LoadPct == pct {
					out = append(out, x)
				}
			}
			return out
		}
		ratioRow("1", "50% of capacity", pick(50), "\"almost the same\" (ratios ≈ 1)")
		ratioRow("2", "110% of capacity", pick(110), "1.5× rr, 1.3× lc")
		ratioRow("3", "110%, hog in node1's cgroup", r.Test3, "1.3–1.6× the others")
		b.WriteString("\n### Test 3 runs\n\n")
		table(r.Test3)
	}
	if len(r.Steps) > 1 {
		b.WriteString("\n## Load-step runs\n\n| run | hog at s | node1 weight before | final | settled s | reversals after the step |\n|---|---|---|---|---|---|\n")
		for i, st := range r.Steps {
			fmt.Fprintf(&b, "| %d | %.1f | %.0f | %.0f | %.2f | %d |\n", i+1, st.HogAt, st.Before, st.Final, st.Reconverge, st.Reversals)
		}
	}
	if len(r.Trace) > 0 {
		fmt.Fprintf(&b, "\n## Load step\n\nfeedback at %d%% of capacity; a CPU hog joins node1's cgroup at %.1f s. node1's weight reconverged (stayed within ±max(3, 10 %%) of its final value) **%.2f s** after the step (-1: it did not settle; -2: it did not move). Weights: feedback-weights.svg; latency: feedback-latency.svg.\n\n",
			r.StepPct, r.HogAt, r.Reconverge)
		if len(r.Steps) > 0 && len(r.Steps[0].Polls) > 0 {
			b.WriteString("node1's controller decisions from 3 s before the step (t on the trace's clock; the step is at the hog's start):\n\n| t s | weight | load | error | gain | missed | reason |\n|---|---|---|---|---|---|---|\n")
			for _, p := range r.Steps[0].Polls {
				if p.T > r.HogAt+6 {
					break
				}
				fmt.Fprintf(&b, "| %.2f | %d | %.3f | %+.3f | %.3f | %d | %s |\n", p.T, p.Weight, p.Load, p.Error, p.Gain, p.Missed, strings.ReplaceAll(p.Reason, "|", "/"))
			}
			b.WriteString("\n")
		}
		b.WriteString("| t s | mean ms | p99 ms | throughput/s | errors |\n|---|---|---|---|---|\n")
		for _, l := range r.Latency {
			fmt.Fprintf(&b, "| %.1f | %.1f | %.1f | %.0f | %d |\n", l.T, l.Mean, l.P99, l.Throughput, l.Errors)
		}
	}
	if t := r.Terms; t != nil {
		b.WriteString("\n## The controller's terms late in the feedback 110 % run\n\n| server | weight | load | eth % | cpu % (cgroup) | swap % | dsk % | total % |\n|---|---|---|---|---|---|---|---|\n")
		for _, n := range t.Nodes {
			if n.Terms == nil {
				fmt.Fprintf(&b, "| %s | %d | - | - | - | - | - | - |\n", n.Node, n.Weight)
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", n.Node, n.Weight, n.Aggregate, n.Terms.EthernetUtil, n.Terms.CPUBusy, n.Terms.MemSwapLoad, n.Terms.DskLoad, n.Terms.TotalLoad)
		}
	}
	b.WriteString("\n## Checks\n\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "- %s\n", c)
	}
	return b.String()
}
