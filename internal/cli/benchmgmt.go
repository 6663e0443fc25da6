package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func mgmtBenchCmd() *cobra.Command {
	var quick bool
	var dir, out, netFlag string
	var nodes, applies, services, servers int
	var before time.Duration
	c := &cobra.Command{
		Use:   "mgmt [--quick] [--nodes 10]",
		Short: "The management station: time from cfg apply until every member runs it; a 10,000-server configuration under load",
		Example: `  corral bench mgmt --quick
  corral bench mgmt --nodes 10 --applies 100
  corral bench mgmt --services 1000 --servers 10 --out results/mgmt/today`,
		Long: `Start a managed cluster on loopback (a station, one metadata server, one
I/O server, --nodes web nodes and a director, every member joined to the
station; --net, default 127.0.59.0/24) and measure:

1. --applies versions, each changing one node's weight: the time from the
   station's reply to the apply until the director and every node report
   that version applied (the members list polled every 5 ms); p50, p99 and
   max (goal: p99 <= 1 s with 10 nodes).
2. A configuration of --services services with --servers real servers each
   (1,000 x 10 = 10,000 by default) applied while two clients (one kept
   alive, one connection per request) request the sample site through the
   VIP: request latency p50/p99 before and during the apply, errors, and
   the time until every member runs it (the director must not stall).

Writes results.json, results.md and mgmt.svg under --out. --quick: 3 nodes,
5 applies, 100 x 10 servers, 2 s of baseline; under a minute.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			n, err := upNet(netFlag)
			if err != nil {
				return err
			}
			cfg := bench.MgmtConfig{Bin: bin, Dir: dir, Net: n, Nodes: nodes, Applies: applies, BigServices: services,
				BigServers: servers, LoadBefore: before, Log: os.Stdout}
			if quick {
				if !cmd.Flags().Changed("nodes") {
					cfg.Nodes = 3
				}
				cfg.Applies, cfg.BigServices, cfg.LoadBefore = 5, 100, 2*time.Second
			}
			if cfg.Applies < 1 || cfg.BigServices < 0 || cfg.BigServers < 1 {
				return usageError{fmt.Errorf("--applies >= 1, --services >= 0, --servers >= 1")}
			}
			return runScenario("mgmt", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunMgmt(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "small version (CI): 3 nodes, 5 applies, 100 x 10 servers")
	c.Flags().IntVar(&nodes, "nodes", 10, "web nodes")
	c.Flags().IntVar(&applies, "applies", 50, "versions timed, each changing one weight")
	c.Flags().IntVar(&services, "services", 1000, "services of the big configuration (0: skip it)")
	c.Flags().IntVar(&servers, "servers", 10, "real servers per service of the big configuration")
	c.Flags().DurationVar(&before, "load-before", 5*time.Second, "request loop's baseline before the big configuration")
	c.Flags().StringVar(&netFlag, "net", "127.0.59.0/24", "loopback /24 the cluster takes (station .1:7600, nodes .21.., VIP .100:8080)")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory for the cluster's data")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/mgmt/TIMESTAMP)")
	return c
}
