package cli

import (
	"context"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func feedbackBenchCmd() *cobra.Command {
	var quick bool
	var dir, out, only, dataplane, generator string
	var calls, stepRuns, stepPct int
	var poll time.Duration
	c := &cobra.Command{
		Use:   "feedback [--quick] [--only step|test2] [--calls N] [--poll D] [--dataplane l7|xdp]",
		Short: "Load feedback (paper 003): rr, lc, wlc and feedback weights with one node 3x slower, open-loop httperf, a load step",
		Example: `  sudo corral bench feedback --quick
  sudo corral bench feedback --out results/feedback/today
  sudo corral bench feedback --only step --step-runs 3 --poll 250ms
  sudo corral bench feedback --only test2 --calls 50
  sudo corral bench feedback --only test2 --calls 50 --dataplane xdp`,
		Long: `Build test bed h7fb (10.87.0.0/24: client, director, node1-3, meta, iod1-3),
start a cluster with the l7 director, put every node in a CPU cgroup of its
own (equal quotas; node3 a third: 3x slower) and request a 16 KiB file with
httperf (open-loop, one request per connection) from the client host:

1. capacity: wlc under an open-loop ramp (100, 200, 400, ... req/s) until the
   replies stop following;
2. rr, lc, wlc and feedback (wlc over the feedback controller's weights, the
   agent source reading each node's /load every 500 ms) at 50, 70, 90 and
   110 % of it: throughput, mean, p50, p90, p99, errors, each node's share;
3. paper 003's test 3: 110 % with a CPU hog in node1's cgroup, every
   scheduler;
4. a load step: feedback at 50 %, the hog joins node1 a third of the way in;
   weights every 100 ms and latency per httperf chunk, the time node1's
   weight takes to settle.

It prints issue 17's goals, measured, met or not: (a) p99 at 90 %, (b) test
2's throughput ratios, (c) the load step's settling time (<= 2 s, at most one
reversal).

--only step: the capacity ramp and --step-runs load steps (default 3) of 30 s,
nothing else. --only test2: every scheduler at 90 and 110 % (goals a and b).
--calls N: N requests per connection (httperf --num-calls; paper 003's test 2
used sessions of 50 calls). --poll: the feedback block's interval (default
500ms here; the director's own default is 2s). --dataplane xdp: the XDP
director with direct routing, as paper 003's LVS: lc and wlc count
connections (IPVS's active x 256 + inactive), not requests, and each node's
share is its share of connections. --generator go: corral's own open-loop
generator instead of httperf (httperf holds at most 1024 sockets, so at
~1000 req/s a second of backlog fails every new request at the client);
latencies then count from each connection's scheduled start.

Writes results.json, results.md, feedback-weights.svg and feedback-latency.svg
under --out. Needs root and httperf. --quick: 50 and 110 % only, 3 s runs, an
18 s step; behaviour checks (results.md "Checks").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			return runScenario("feedback", out, func(ctx context.Context, out string) (markdowner, error) {
				return bench.RunFeedback(ctx, bench.FeedbackConfig{Bin: bin, Dir: dir, Out: out, Quick: quick, Log: os.Stdout,
					Only: only, Calls: calls, Poll: poll, StepRuns: stepRuns, StepPct: stepPct, Dataplane: dataplane, Generator: generator})
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "short runs, behaviour checks only (CI)")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory for the cluster's data")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/feedback/TIMESTAMP)")
	c.Flags().StringVar(&only, "only", "", "run only part after the capacity ramp: step (load steps) or test2 (90 and 110 %)")
	c.Flags().IntVar(&calls, "calls", 1, "httperf calls per connection (persistent connections)")
	c.Flags().IntVar(&stepRuns, "step-runs", 0, "load steps to run (default 1; 3 with --only step; at most 20)")
	c.Flags().IntVar(&stepPct, "step-load", 50, "the load step's load, % of the capacity")
	c.Flags().StringVar(&generator, "generator", "httperf", "the load generator: httperf (paper 003's) or go (corral bench loadgen: no 1024-socket cap)")
	c.Flags().StringVar(&dataplane, "dataplane", "l7", "the director's dataplane: l7 (schedules each request) or xdp (direct routing, schedules connections)")
	c.Flags().DurationVar(&poll, "poll", 500*time.Millisecond, "the feedback block's poll interval (100ms to 10s)")
	return c
}
