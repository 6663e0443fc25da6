package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/sched"
	"github.com/corral-cluster/corral/internal/testbed"
	"github.com/spf13/cobra"
)

func upCmd() *cobra.Command {
	var data, vip, dataplane, scheduler, rate string
	var iods, nodes int
	var onTestbed bool
	c := &cobra.Command{
		Use:   "up [--data DIR] [--nodes N] [--iods M] [--dataplane l4|l7|xdp] [--vip HOST:PORT] [--testbed [--rate 100mbit]]",
		Short: "Run a whole Corral cluster on this machine",
		Long: `Run every role on this machine as child processes on loopback addresses
(no root needed): a metadata server on 127.0.0.10:7400, I/O servers on
127.0.0.11:7410, ..., cluster nodes on 127.0.0.21:8080, ..., and a director
holding the VIP (default 127.0.0.100:8080) with its admin API on
127.0.0.1:7500. A sample site for the virtual domain www.example.test is
uploaded on the first run. Data and logs go under --data; a second run reuses
them. Ctrl-C stops everything.

With --testbed (root), each role runs on its own host of a test bed (network
namespaces on a bridge, 10.77.0.0/24: client, director, node1.., meta,
iod1..), links shaped to --rate; Ctrl-C also removes the test bed. With
--dataplane xdp the director does LVS direct routing in the kernel: the VIP is
10.77.0.100:80, the nodes hold it on their loopback and answer the client
straight back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iods < 1 || iods > 50 || nodes < 1 || nodes > 50 {
				return fmt.Errorf("--iods and --nodes: want 1..50")
			}
			if dataplane != "l4" && dataplane != "l7" && dataplane != "xdp" {
				return fmt.Errorf("--dataplane %q: want l4, l7 or xdp", dataplane)
			}
			if dataplane == "xdp" && !onTestbed {
				return fmt.Errorf("--dataplane xdp needs --testbed: direct routing needs the director and the nodes on separate hosts of one link")
			}
			if dataplane == "xdp" && scheduler == "mwlc" {
				return fmt.Errorf("--scheduler mwlc is l7 only; the XDP dataplane has rr wrr lc wlc sed nq sh mh")
			}
			if _, err := sched.New(scheduler); err != nil {
				return fmt.Errorf("--scheduler: %v", err)
			}
			if scheduler == "mwlc" && dataplane != "l7" {
				return fmt.Errorf("--scheduler mwlc needs --dataplane l7")
			}
			if rate != "" && !onTestbed {
				return fmt.Errorf("--rate shapes test-bed links: add --testbed")
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(data)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			cfg := launch.ClusterConfig{Bin: bin, Data: abs, MetaListen: "127.0.0.10:7400", VIP: vip, Admin: "127.0.0.1:7500",
				Dataplane: dataplane, Scheduler: scheduler}
			for i := 0; i < iods; i++ {
				cfg.IODListens = append(cfg.IODListens, fmt.Sprintf("127.0.0.%d:7410", 11+i))
			}
			for i := 0; i < nodes; i++ {
				cfg.NodeListen = append(cfg.NodeListen, fmt.Sprintf("127.0.0.%d:8080", 21+i))
			}
			var bed *testbed.Bed
			if onTestbed {
				if bed, err = upTestbed(&cfg, rate); err != nil {
					return err
				}
				defer testbed.Down(bed.Name)
			}
			cl, err := launch.StartCluster(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Printf("corral is up (data and logs in %s)\n\n", abs)
			all := append(append([]*launch.Proc{cl.Meta}, cl.IODs...), cl.Nodes...)
			all = append(all, cl.Director)
			for _, p := range all {
				fmt.Printf("  %-9s %-20s log %s\n", p.Name, p.Addr, p.Log)
			}
			if bed != nil && dataplane == "xdp" {
				fmt.Printf(`
  VIP       http://%[4]s/ (XDP direct routing on the director's eth0, %[5]s)
  Test bed %[1]s: each role on its own host (a network namespace), links %[2]s.
  Requests go client -> director -> node; replies go node -> client directly.

Try:
  %[3]s testbed exec client -- curl -s http://%[4]s/
  %[3]s testbed exec director -- %[3]s ctl services   # OutBytes: -, replies bypass it
  %[3]s testbed status

Ctrl-C stops everything and removes the test bed.
`, bed.Name, orDefault(rate, "unshaped"), bin, cfg.VIP, scheduler)
			} else if bed != nil {
				fmt.Printf(`
  VIP       http://%[4]s/ on host director (%[5]s, %[6]s)
  Test bed %[1]s: each role on its own host (a network namespace), links %[2]s.

Try:
  %[3]s testbed exec client -- curl -s http://%[4]s/
  %[3]s testbed exec director -- %[3]s ctl services
  %[3]s testbed status

Ctrl-C stops everything and removes the test bed.
`, bed.Name, orDefault(rate, "unshaped"), bin, cfg.VIP, dataplane, scheduler)
			} else {
				fmt.Printf(`
  VIP       http://%[1]s/   (%[4]s, %[5]s; virtual domain %[6]s)

Try, in another terminal:
  export CORRAL_SECRET_FILE=%[7]s   # the cluster secret
  curl http://%[1]s/
  curl -H 'Host: %[6]s' -r 0-99 http://%[1]s/big.bin | wc -c
  %[2]s ctl services
  %[2]s fs --meta %[3]s ls -l /www/%[6]s
  %[2]s fs --meta %[3]s put index.html /www/%[6]s/   # change the site
  mkdir -p /tmp/corral && %[2]s mount --meta %[3]s /tmp/corral   # FUSE; needs /dev/fuse

Ctrl-C stops everything.
`, cfg.VIP, bin, cl.Meta.Addr, dataplane, scheduler, launch.SampleDomain, cl.SecretFile)
			}
			died := make(chan string, len(all))
			for _, p := range all {
				go func() {
					<-p.Done()
					died <- p.Name
				}()
			}
			select {
			case <-ctx.Done():
				fmt.Println("\nstopping...")
				cl.Stop()
				fmt.Println("stopped")
				return nil
			case name := <-died:
				cl.Stop()
				return fmt.Errorf("%s exited unexpectedly; see its log under %s", name, filepath.Join(abs, "logs"))
			}
		},
	}
	c.Flags().StringVar(&data, "data", "corral-data", "directory for every role's data and logs")
	c.Flags().IntVar(&iods, "iods", 3, "number of I/O servers")
	c.Flags().IntVar(&nodes, "nodes", 3, "number of cluster nodes")
	c.Flags().StringVar(&vip, "vip", "127.0.0.100:8080", "the virtual service's address (with --testbed: the director host's port 80)")
	c.Flags().StringVar(&dataplane, "dataplane", "l4", "director dataplane: l4 (TCP proxy), l7 (HTTP proxy) or xdp (direct routing in the kernel; with --testbed)")
	c.Flags().StringVar(&scheduler, "scheduler", "wlc", "scheduler (rr wrr lc wlc sed nq sh mh; mwlc with l7)")
	c.Flags().BoolVar(&onTestbed, "testbed", false, "run each role on its own host of a test bed (root)")
	c.Flags().StringVar(&rate, "rate", "", "with --testbed: every host's link speed (e.g. 100mbit; empty: unshaped)")
	return c
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// upTestbed builds the test bed for a cluster and moves every role onto its
// own host.
func upTestbed(cfg *launch.ClusterConfig, rate string) (*testbed.Bed, error) {
	nodes, iods := len(cfg.NodeListen), len(cfg.IODListens)
	hosts := append([]string{"client"}, launch.ClusterHosts(nodes, iods)...)
	bed, err := testbed.Up(testbed.NewSpec("corral", hosts, rate))
	if err != nil {
		return nil, err
	}
	if err := cfg.OnTestbed(bed, nodes, iods); err != nil {
		testbed.Down(bed.Name)
		return nil, err
	}
	if cfg.Dataplane == "xdp" {
		if err := bed.PrepareDR("director", "client"); err != nil {
			testbed.Down(bed.Name)
			return nil, err
		}
	}
	return bed, nil
}
