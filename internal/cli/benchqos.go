package cli

import (
	"context"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func qosBenchCmd() *cobra.Command {
	var quick bool
	var dir, out, netFlag string
	var phase time.Duration
	var load, gold float64
	var perServer, fileSize int
	var bed bool
	var nodeRate, topRate string
	var reserve int
	c := &cobra.Command{
		Use:   "qos [--quick]",
		Short: "Request classes under overload: gold's latency and best-effort's shed rate at 120 % of capacity",
		Example: `  corral bench qos --quick
  corral bench qos --phase 20s --load 1.5 --out results/qos/today
  sudo corral bench qos --testbed --node-rate 20mbit --file-size 32768`,
		Long: `Start a cluster on loopback (--net, default 127.0.89.0/24: one metadata server,
one I/O server, two nodes with --qos-workers, the l7 director with two classes:
gold by the header X-Tier: gold, and best-effort, the default class) and measure:

1. the capacity: requests/s through the VIP, best-effort only, closed loop;
2. gold alone at --gold x capacity (open loop): its unloaded latency;
3. --load x capacity, --gold of it gold (open loop): gold's p50/p99 against
   unloaded, best-effort's shed rate (503 with Retry-After);
4. the same load with the classes removed: what gold gets without them.

With --testbed (root) each role runs in its own namespace and the nodes'
links are shaped (--node-rate), so the nodes run out before this machine's
CPUs do, as in a real cluster; the file fetched is --file-size bytes.

The director keeps --reserve slots per server for gold (qos-reserve); with
--testbed the nodes mark gold's responses DSCP EF and their links get an EF
band (--top-rate) served first: gold's priority carries onto the wire.

Writes results.json, results.md and SVG plots (latency, admitted and shed
over time per class) under --out. --quick: 3 s phases.`,
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
			cfg := bench.QoSConfig{Bin: bin, Dir: dir, Net: n, Phase: phase, Load: load, GoldShare: gold, PerServer: perServer,
				Testbed: bed, NodeRate: nodeRate, FileSize: fileSize, Reserve: reserve, TopRate: topRate, Log: os.Stdout}
			if quick && !cmd.Flags().Changed("phase") {
				cfg.Phase = 3 * time.Second
			}
			return runScenario("qos", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunQoS(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "small version (CI): 3 s phases")
	c.Flags().DurationVar(&phase, "phase", 10*time.Second, "length of each measurement")
	c.Flags().Float64Var(&load, "load", 1.2, "overload as a share of the measured capacity")
	c.Flags().Float64Var(&gold, "gold", 0.1, "share of gold requests")
	c.Flags().IntVar(&perServer, "per-server", 0, "the director's qos-per-server and the nodes' --qos-workers (default 8; 2 with --testbed)")
	c.Flags().BoolVar(&bed, "testbed", false, "each role in its own namespace on 10.89.0.0/24 (root), the nodes' links shaped: the nodes run out, not this machine's CPUs")
	c.Flags().StringVar(&nodeRate, "node-rate", "20mbit", "with --testbed: the nodes' link rate")
	c.Flags().IntVar(&reserve, "reserve", 0, "the director's qos-reserve: slots per server only gold may take (default 1, 0 with --per-server 1; -1: none)")
	c.Flags().StringVar(&topRate, "top-rate", "", "with --testbed: the nodes' links' EF band for gold's responses (default half of --node-rate; off: one band)")
	c.Flags().IntVar(&fileSize, "file-size", 32<<10, "with --testbed: the size of the file fetched")
	c.Flags().StringVar(&netFlag, "net", "127.0.89.0/24", "loopback /24 the cluster takes (VIP .100, nodes .21..)")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory for the cluster's data")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/qos/TIMESTAMP)")
	return c
}
