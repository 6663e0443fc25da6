package cli

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func failoverBenchCmd() *cobra.Command {
	var quick, noCorral, noKeepalived, noAA bool
	var dir, out string
	var conns, chunk, rate, aaConns int
	var interval, aaDur, ttl time.Duration
	c := &cobra.Command{
		Use:   "failover [--quick]",
		Short: "HA directors: takeover time, surviving connections, failed new ones, against keepalived; active-active scaling",
		Example: `  sudo corral bench failover --quick
  sudo corral bench failover --conns 1000 --rate 200
  sudo corral bench failover --no-keepalived --no-active-active`,
		Long: `On a test bed (root; hosts client, router, d1..d3, 3 nodes, meta, iod1 on
10.83.0.0/24), with --conns long-lived keep-alive connections downloading in
a loop and --rate new connections per second (open loop):

1. Corral, two directors in one active-standby group (etcd lease, the
   connection table synced, the XDP fence): kill -9 of the active; fail-back
   (the killed one restarted: it resyncs and takes the VIP back); a clean
   handover (corral ctl handover); the active's link pulled.
2. The same events on keepalived (VRRP, advert_int 1) with an nftables
   direct-routing rule as the forwarder.
3. Active-active: requests/s through 1, 2 and 3 directors behind the
   router's ECMP route, director links at 100 Mbit/s, and the scaling ratio.

Per event: takeover time on the wire (first frame the new director
forwards), the forwarding gap, % of established connections surviving (the
same TCP connection keeps transferring), failed new connections during and
after the takeover, bytes stalled, and any moment two directors forwarded
at once (captured on every director's link). docs/bench.md#failover says
how each figure is taken. Writes results.json and results.md under --out.

--quick (CI): 50 connections, 20 new per second, short active-active runs;
it fails when fewer than 99 % of Corral's established connections survive
an event or two directors forward at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.FailoverConfig{Bin: bin, Dir: dir, Conns: conns, Chunk: chunk, Interval: interval, Rate: rate,
				Corral: !noCorral, Keepalived: !noKeepalived, ActiveActive: !noAA, AADuration: aaDur, AAConns: aaConns,
				LeaseTTL: ttl, Quick: quick, Log: os.Stdout}
			if quick {
				if !cmd.Flags().Changed("conns") {
					cfg.Conns = 50
				}
				if !cmd.Flags().Changed("rate") {
					cfg.Rate = 20
				}
				if !cmd.Flags().Changed("aa-duration") {
					cfg.AADuration = 3 * time.Second
				}
				if !cmd.Flags().Changed("aa-conns") {
					cfg.AAConns = 48
				}
			}
			if cfg.Conns < 1 || cfg.Conns > 10000 || cfg.Rate < 1 || cfg.Rate > 5000 || cfg.Chunk < 1 || cfg.Interval <= 0 {
				return usageError{errors.New("want 1 <= --conns <= 10000, 1 <= --rate <= 5000, --chunk >= 1, --interval > 0")}
			}
			if ttl < time.Second || ttl%time.Second != 0 {
				return usageError{errors.New("--lease-ttl: whole seconds, at least 1s")}
			}
			return runScenario("failover", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunFailover(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "small version (CI): 50 connections, 20 new/s; checks survival >= 99% and no two forwarders")
	c.Flags().IntVar(&conns, "conns", 1000, "long-lived keep-alive connections")
	c.Flags().IntVar(&chunk, "chunk", 4096, "bytes each keep-alive request downloads (a Range of /big.bin)")
	c.Flags().DurationVar(&interval, "interval", 250*time.Millisecond, "pause between a keep-alive connection's requests")
	c.Flags().IntVar(&rate, "rate", 100, "new connections per second (open loop)")
	c.Flags().DurationVar(&ttl, "lease-ttl", 2*time.Second, "the HA group's election lease TTL")
	c.Flags().DurationVar(&aaDur, "aa-duration", 10*time.Second, "length of each active-active measurement")
	c.Flags().IntVar(&aaConns, "aa-conns", 192, "keep-alive connections of the active-active load (spread by the router's hash)")
	c.Flags().BoolVar(&noCorral, "no-corral", false, "skip Corral's active-standby events")
	c.Flags().BoolVar(&noKeepalived, "no-keepalived", false, "skip the keepalived baseline")
	c.Flags().BoolVar(&noAA, "no-active-active", false, "skip the active-active scaling")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory for the clusters' data")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/failover/TIMESTAMP)")
	return c
}
