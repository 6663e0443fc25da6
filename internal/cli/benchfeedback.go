package cli

import (
	"context"
	"os"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func feedbackBenchCmd() *cobra.Command {
	var quick bool
	var dir, out string
	c := &cobra.Command{
		Use:   "feedback [--quick]",
		Short: "Load feedback (paper 003): rr, lc, wlc and feedback weights with one node 3x slower, open-loop httperf, a load step",
		Example: `  sudo corral bench feedback --quick
  sudo corral bench feedback --out results/feedback/today`,
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
4. a load step: feedback at 70 %, the hog joins node1 a third of the way in;
   weights every 250 ms and latency per httperf chunk, the time node1's
   weight takes to settle.

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
				return bench.RunFeedback(ctx, bench.FeedbackConfig{Bin: bin, Dir: dir, Out: out, Quick: quick, Log: os.Stdout})
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "short runs, behaviour checks only (CI)")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory for the cluster's data")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/feedback/TIMESTAMP)")
	return c
}
