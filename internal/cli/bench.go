package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/spf13/cobra"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Run a benchmark scenario; each measures its own baseline in the same run",
		Example: `  corral bench pfs-local --quick
  corral bench web --duration 30s
  corral bench meta --quick
  sudo corral bench scaling --rate 100mbit`,
	}
	var quick bool
	var size, dir, out string
	var workers int
	pfs := &cobra.Command{
		Use:   "pfs-local [--quick]",
		Short: "File system throughput on loopback vs a local file",
		Example: `  corral bench pfs-local --quick
  corral bench pfs-local --size 4G --dir /srv/scratch --out results/pfs-local/today`,
		Long: `Start a metadata server and 4 I/O servers on loopback and measure:
  - a large file written (fsync at the end) then read, through the client
    library with 1..4 I/O servers and 64K/1M/4M stripes, and through a FUSE
    mount (as root), beside the same bytes to a local file on the same disk;
  - 10,000 small files of 4 KiB created, written, closed, then read, beside
    the same on local disk.
Prints MB/s, files/s and ratios (lib to local, FUSE to lib) and writes
results.json and results.md under --out. --quick runs a tiny version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.PFSLocalConfig{Bin: bin, Dir: dir, FileSize: n, IODs: []int{1, 2, 3, 4},
				StripeSizes: []uint32{64 << 10, 1 << 20, 4 << 20}, SmallFiles: 10000, SmallSize: 4096,
				Workers: workers, FUSE: true, Log: os.Stdout}
			if quick {
				cfg.FileSize = min(cfg.FileSize, 32<<20)
				cfg.IODs = []int{1, 3}
				cfg.StripeSizes = []uint32{64 << 10, 1 << 20}
				cfg.SmallFiles = 200
			}
			for _, s := range cfg.StripeSizes {
				if err := layout.ValidStripeSize(int64(s)); err != nil {
					return err
				}
			}
			return runScenario("pfs-local", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunPFSLocal(ctx, cfg)
			})
		},
	}
	pfs.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 32 MiB, fewer layouts, 200 small files")
	pfs.Flags().StringVar(&size, "size", "1G", "large file size")
	pfs.Flags().StringVar(&dir, "dir", ".", "scratch directory on the disk to measure (I/O servers and the local baseline both use it)")
	pfs.Flags().StringVar(&out, "out", "", "results directory (default results/pfs-local/TIMESTAMP)")
	pfs.Flags().IntVar(&workers, "workers", 8, "concurrent workers for the small-file test")
	c.AddCommand(pfs, webBenchCmd(), cssnsBenchCmd(), scalingBenchCmd(), pfsBenchCmd(), pfsIOCmd(), directorBenchCmd())
	c.AddCommand(metaBenchCmd(), metaWorkerCmd(), memServeCmd(), raidBenchCmd())
	c.AddCommand(redundancyBenchCmd(), mgmtBenchCmd(), failoverBenchCmd(), feedbackBenchCmd(), qosBenchCmd(), loadgenCmd())
	return c
}

func directorBenchCmd() *cobra.Command {
	var quick bool
	var dir, out string
	var dur time.Duration
	var conns, runs int
	c := &cobra.Command{
		Use:   "director [--quick]",
		Short: "The XDP dataplane: ns per packet vs a MAC-swap floor; HTTP via XDP-DR vs direct, l4, HAProxy",
		Example: `  sudo corral bench director --quick
  sudo corral bench director --duration 30s --connections 128`,
		Long: `Two parts (root):

1. Per packet: the XDP balancer through the kernel's BPF test run, for a SYN
   opening a new flow (wlc, rr, mh over 8 servers), a frame of an
   established flow and a frame for no VIP (passed), beside a program that
   only swaps MACs and transmits (the floor), with the ratio.

2. HTTP on an unshaped test bed (client, director, proxy, 3 nodes, meta, 3
   I/O servers): wrk from the client host through the VIP with XDP direct
   routing, straight to the three nodes at once (the zero-cost balancer),
   through Corral's l4 proxy and through HAProxy mode tcp (both on the proxy
   host), for 1 KiB, 100 KiB and 10 MiB files, with ratios to direct.

Needs wrk and haproxy (scripts/deps installs them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.DirectorConfig{Bin: bin, Dir: dir, Runs: runs, Duration: dur, Connections: conns,
				Sizes: []int64{1 << 10, 100 << 10, 10 << 20}, Log: os.Stdout}
			if quick {
				cfg.Runs, cfg.Duration, cfg.Connections = 2000, time.Second, 16
			}
			if cfg.Connections < 3 || cfg.Runs < 100 {
				return usageError{errors.New("want --connections >= 3 (one per node) and --runs >= 100")}
			}
			return runScenario("director", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunDirector(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 2000 packets, 1 s runs")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/director/TIMESTAMP)")
	c.Flags().DurationVar(&dur, "duration", 10*time.Second, "length of each wrk run")
	c.Flags().IntVar(&conns, "connections", 64, "wrk connections")
	c.Flags().IntVar(&runs, "runs", 50000, "frames per per-packet figure (SYNs; repeated frames run 20x this)")
	return c
}

// markdowner is a scenario's result: it renders its tables.
type markdowner interface{ Markdown() string }

// runScenario runs a scenario until done or interrupted, writing its
// results to out (default results/NAME/TIMESTAMP), and prints its tables.
func runScenario(name, out string, run func(ctx context.Context, out string) (markdowner, error)) error {
	if out == "" {
		out = filepath.Join("results", name, time.Now().UTC().Format("20060102-150405"))
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := run(ctx, out)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\nresults in %s\n", res.Markdown(), out)
	return nil
}

func webBenchCmd() *cobra.Command {
	var quick bool
	var dir, out string
	var dur time.Duration
	var conns int
	c := &cobra.Command{
		Use:   "web [--quick]",
		Short: "HTTP through the director (l4, l7) vs straight to the nodes vs HAProxy",
		Example: `  corral bench web --quick
  corral bench web --duration 30s --connections 128 --out results/web/today`,
		Long: `Start the whole cluster on loopback (3 nodes, 3 I/O servers, a director with an
l4 and an l7 service) and Debian's HAProxy (mode tcp, leastconn) over the same
nodes, then run wrk against: one node, a bare Go net/http server serving the
same file from memory, the three nodes at once (the zero-cost balancer),
Corral l4, Corral l7 and HAProxy, for 1 KiB, 100 KiB and 10 MiB
files. Prints requests/s, MB/s, p99 latency and the ratios. Then measures a
node's memory while P clients each fetch an S-byte file, for several P·S.
Needs wrk and haproxy (scripts/deps installs them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.WebConfig{Bin: bin, Dir: dir, Duration: dur, Connections: conns,
				Sizes: []int64{1 << 10, 100 << 10, 10 << 20}, MemP: []int{10, 20, 40}, MemS: []int64{1 << 20, 5 << 20}, Log: os.Stdout}
			if quick {
				cfg.Duration, cfg.Connections = time.Second, 16
				cfg.Sizes = []int64{1 << 10, 100 << 10}
				cfg.MemP, cfg.MemS = []int{4, 8}, []int64{1 << 20}
			}
			if cfg.Connections < 3 {
				return fmt.Errorf("--connections %d: want at least 3 (one per node)", cfg.Connections)
			}
			return runScenario("web", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunWeb(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 1 s runs, 2 sizes, small memory test")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/web/TIMESTAMP)")
	c.Flags().DurationVar(&dur, "duration", 10*time.Second, "length of each wrk run")
	c.Flags().IntVar(&conns, "connections", 64, "wrk connections")
	return c
}

func cssnsBenchCmd() *cobra.Command {
	var quick bool
	var rate, out, dir string
	c := &cobra.Command{
		Use:   "cssns [--quick] [--rate 100mbit]",
		Short: "Paper 000's completion-time experiment on a test bed (root)",
		Example: `  sudo corral bench cssns --quick
  sudo corral bench cssns --rate 1gbit`,
		Long: `Rerun paper 000's tables 1-7 on a test bed (root): P clients each fetch an
S-byte file over HTTP (a) from one node with no director ("only PVFS"), (b)
through the director with 2 nodes, (c) with 3 nodes; nodes and I/O servers on
--rate links. Prints completion times, the ratio tables (paper: 0.63 and
0.51), the saving-time tables and the serving node's memory against P·S, and
writes results.json, results.md and SVG plots under --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.CSSNSConfig{Bin: bin, Dir: dir, P: []int{10, 20, 30, 45}, S: []int64{1 << 20, 2 << 20, 4 << 20}, Rate: rate, Log: os.Stdout}
			if quick {
				cfg.P, cfg.S = []int{2, 4}, []int64{256 << 10}
				if !cmd.Flags().Changed("rate") {
					cfg.Rate = "1gbit"
				}
			}
			return runScenario("cssns", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunCSSNS(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): P 2 and 4, 256 KiB files, 1gbit links")
	c.Flags().StringVar(&rate, "rate", "100mbit", "link speed of nodes and I/O servers")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/cssns/TIMESTAMP)")
	return c
}

func scalingBenchCmd() *cobra.Command {
	var quick bool
	var rate, out, dir, size string
	var dur time.Duration
	var conns int
	c := &cobra.Command{
		Use:   "scaling [--quick] [--rate 100mbit]",
		Short: "Paper 001's scaling test: requests/s as nodes go 1, 2, 3, 4, 6, 8 (root)",
		Example: `  sudo corral bench scaling --quick
  sudo corral bench scaling --rate 100mbit --size 1M`,
		Long: `On a test bed (root) with every node's link at --rate, run wrk through the
director while the pool grows 1, 2, 3, 4, 6, 8 nodes (by live reloads), and
print requests/s, the speedup and the ratio to linear (paper 001: 4.65x from 2
to 10 nodes, 0.93 of linear). Writes results.json, results.md and scaling.svg.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			cfg := bench.ScalingConfig{Bin: bin, Dir: dir, Nodes: []int{1, 2, 3, 4, 6, 8}, Rate: rate, FileSize: n,
				Duration: dur, Connections: conns, Log: os.Stdout}
			if quick {
				cfg.Nodes, cfg.Duration = []int{1, 2}, time.Second
			}
			return runScenario("scaling", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunScaling(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 1 and 2 nodes, 1 s runs")
	c.Flags().StringVar(&rate, "rate", "100mbit", "link speed of every node")
	c.Flags().StringVar(&size, "size", "100K", "file size fetched")
	c.Flags().DurationVar(&dur, "duration", 5*time.Second, "length of each wrk run")
	c.Flags().IntVar(&conns, "connections", 64, "wrk connections")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/scaling/TIMESTAMP)")
	return c
}

func pfsBenchCmd() *cobra.Command {
	var quick, others, profile bool
	var replicas int
	var out, dir string
	c := &cobra.Command{
		Use:   "pfs [--quick]",
		Short: "Paper 002's file-system tests 1-3 on a test bed at 100 Mbit and 1 Gbit (root)",
		Example: `  sudo corral bench pfs --quick
  sudo corral bench pfs --dir /srv/scratch --others=false`,
		Long: `Rerun paper 002's IOzone-style tests on a test bed (root), with clients and
I/O servers on their own hosts, links at 100 Mbit and then 1 Gbit:
  1. one client, one I/O server, record sizes 64 KiB .. 16 MiB;
  2. 1 .. 10 processes on one client, 512 KiB records, all I/O servers;
  3. N clients x M I/O servers (1 .. 4 each), 2 MiB records.
Measures in the same run the link speed I (raw TCP between two hosts) and the
disk speed R, and prints the aggregate MB/s beside the bound
S = min(N·I, M·I, P·R) and the ratio. Writes results.json, results.md and
SVG plots under --out.

--replicas R (2..5) runs test 4 instead, at 100 Mbit: N = 1 .. 4 clients over
4 I/O servers writing and reading files with R copies, on Corral and (with
--others) GlusterFS replica 2 and MooseFS goal 2 on the same bed, with the
ratios to S and to S/R (the bound if the client sent every copy itself).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.PFSConfig{Bin: bin, Dir: dir, Rates: []string{"100mbit", "1gbit"},
				Test1File: 64 << 20, Records: []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20},
				Test2File: 16 << 20, Procs: []int{1, 2, 4, 6, 8, 10}, Test3File: 32 << 20, MaxN: 4, MaxM: 4, Others: others, Log: os.Stdout}
			if quick {
				cfg.Rates, cfg.Test1File, cfg.Records = []string{"1gbit"}, 4<<20, []int64{64 << 10, 1 << 20}
				cfg.Test2File, cfg.Procs, cfg.Test3File, cfg.MaxN, cfg.MaxM = 2<<20, []int{1, 2}, 2<<20, 2, 2
				cfg.Others = others && cmd.Flags().Changed("others")
			}
			if replicas != 1 {
				if replicas < 2 || replicas > 5 {
					return usageError{fmt.Errorf("--replicas %d: want 2..5 (1: tests 1-3)", replicas)}
				}
				cfg.Replicas = replicas
				if !quick {
					cfg.Rates = []string{"100mbit"}
				}
			}
			return runScenario("pfs", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				if profile {
					// Every corral process started from here on (I/O
					// servers, meta, the pfs-io clients) writes its
					// profiles there when it ends.
					d, err := filepath.Abs(filepath.Join(out, "profile"))
					if err != nil {
						return nil, err
					}
					os.Setenv(ProfileEnv, d)
					defer os.Unsetenv(ProfileEnv)
				}
				return bench.RunPFS(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 1 Gbit only, small files, up to 2 clients and 2 I/O servers")
	c.Flags().BoolVar(&others, "others", true, "also run test 3 (or 4) on GlusterFS and MooseFS when installed (scripts/deps bench installs them)")
	c.Flags().IntVar(&replicas, "replicas", 1, "2..5: run test 4 (replicated files) instead of tests 1-3")
	c.Flags().BoolVar(&profile, "profile", false, "write CPU, block and mutex profiles of every I/O server, metadata server and client process into the results directory's profile/")
	c.Flags().StringVar(&dir, "dir", ".", "scratch directory on the disk to measure")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/pfs/TIMESTAMP)")
	return c
}

// pfsIOCmd is one client process of 'corral bench pfs', run on a test-bed host.
func pfsIOCmd() *cobra.Command {
	var meta, path string
	var size, record int64
	var write bool
	var count uint32
	c := &cobra.Command{Use: "pfs-io", Short: "Write or read one file and print the rate as JSON (a client of bench pfs)", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size <= 0 || record <= 0 || record > 64<<20 {
				return fmt.Errorf("--size and --record (at most 64 MiB) must be positive")
			}
			cl := client.New(meta)
			defer cl.Close()
			verb := "read"
			if write {
				verb = "write"
			}
			bar := newProgress(verb+" "+path, size)
			r, err := bench.PFSIO(cmd.Context(), cl, path, size, record, write, client.CreateOpts{StripeSize: 1 << 20, StripeCount: count}, bar.set)
			if err != nil {
				return err
			}
			bar.done()
			return json.NewEncoder(os.Stdout).Encode(r)
		}}
	c.Flags().StringVar(&meta, "meta", "", "comma-separated list of metadata members")
	c.Flags().StringVar(&path, "path", "/pfs-io", "file")
	c.Flags().Int64Var(&size, "size", 64<<20, "bytes")
	c.Flags().Int64Var(&record, "record", 1<<20, "bytes per call")
	c.Flags().BoolVar(&write, "write", false, "write (default: read)")
	c.Flags().Uint32Var(&count, "stripe-count", 0, "I/O servers the file spans (0: all)")
	return c
}

func raidBenchCmd() *cobra.Command {
	var quick bool
	var disks, rate, size string
	c := &cobra.Command{
		Use:   "raid [--quick] [--disks 1,2,4] [--rate 20M] [--size 128M]",
		Short: "An I/O server's store over 1..4 throttled loop disks, RAID-0 and RAID-1",
		Long: `As root: make loop-device disks (files under /tmp, ext4), throttle each
to --rate bytes/s with cgroup v1 blkio, and measure an I/O server's store
(in-process, checksums on) over 1..N of them as RAID-0 and RAID-1:
sequential write (1 MiB writes, fsync), sequential read, random 4 KiB
reads, 4 streams at once (bonnie-style). Prints a table with ratios to one
disk beside paper 004's software RAID-0. Cleans up loops, mounts and the
cgroup. Without root it says so and does nothing.`,
		Example: "  sudo corral bench raid --quick\n  sudo corral bench raid --disks 1,2,3,4 --rate 20M --size 256M",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Checked before anything is made or throttled: a bad value
			// is a usage error (exit 2) naming its flag.
			r, err := parseSize(rate)
			if err != nil || r <= 0 {
				return usageError{fmt.Errorf("--rate %q: want a positive rate in bytes/s such as 20M", rate)}
			}
			sz, err := parseSize(size)
			if err != nil || sz <= 0 {
				return usageError{fmt.Errorf("--size %q: want a positive size such as 128M", size)}
			}
			cfg := bench.RAIDConfig{Rate: r, Size: sz, Streams: 4, RandDur: 3 * time.Second, Out: os.Stdout}
			for _, d := range strings.Split(disks, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(d))
				if err != nil || n < 1 || n > 8 {
					return usageError{fmt.Errorf("--disks %q: want counts from 1 to 8, comma-separated", disks)}
				}
				cfg.Disks = append(cfg.Disks, n)
			}
			if quick {
				cfg.Size = min(cfg.Size, 32<<20)
				cfg.RandDur = time.Second
			}
			ctx, stop := signalContext()
			defer stop()
			_, err = bench.RAID(ctx, cfg)
			return err
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "a short run (32 MiB per configuration, 1 s of random reads; under a minute)")
	c.Flags().StringVar(&disks, "disks", "1,2,4", "disk counts to measure")
	c.Flags().StringVar(&rate, "rate", "20M", "bytes/s of each disk, read and write")
	c.Flags().StringVar(&size, "size", "128M", "bytes written then read per configuration")
	return c
}

func redundancyBenchCmd() *cobra.Command {
	var quick, wipe bool
	var out, dir, systems string
	var dur, healWait time.Duration
	var replicas, iods, workers int
	c := &cobra.Command{
		Use:   "redundancy [--quick] [--duration 10m] [--replicas 2]",
		Short: "Kill -9 random I/O servers under a mixed load; count lost operations, stalls and heal",
		Example: `  corral bench redundancy --quick
  corral bench redundancy --duration 10m
  corral bench redundancy --quick --replicas 1 --wipe   # must report lost operations`,
		Long: `Start a metadata server and --iods I/O servers on loopback, make a directory
with --replicas copies, and run --workers workers of mixed writes, reads
(checked) and fsyncs over their own files while an I/O server picked at
random is killed (SIGKILL) every 10-30 s (--quick: 10-15 s, 1 minute in all)
and restarted 2 s later. At the end, after waiting for heal, every file is
read whole and every acknowledged write checked. Prints lost operations (goal
0), the longest write (goal <= 5 s), the operation count, heal time and the
bytes stale and healed. As root with GlusterFS installed, runs the same
schedule against a GlusterFS replica 2 volume on a test bed (--systems).
Each system's run takes --duration plus its heal wait (--quick: about 80 s).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg := bench.RedundancyConfig{Bin: bin, Dir: dir, Duration: dur, KillMin: 10 * time.Second, KillMax: 30 * time.Second,
				Down: 2 * time.Second, IODs: iods, Replicas: replicas, Workers: workers, Files: 4, FileSize: 1 << 20, Block: 4096,
				Wipe: wipe, HealWait: healWait, Systems: strings.Split(systems, ","), Seed: time.Now().UnixNano(), Log: os.Stdout}
			if quick {
				cfg.KillMax = 15 * time.Second
				if !cmd.Flags().Changed("heal-wait") {
					cfg.HealWait = 15 * time.Second
				}
				if !cmd.Flags().Changed("systems") {
					cfg.Systems = []string{"corral"}
				}
				if !cmd.Flags().Changed("duration") {
					cfg.Duration = time.Minute
				}
			}
			for _, s := range cfg.Systems {
				if s != "corral" && s != "glusterfs" {
					return usageError{fmt.Errorf("--systems: unknown system %q (corral, glusterfs)", s)}
				}
			}
			if iods < 3 || replicas < 1 || replicas > 5 || workers < 1 {
				return usageError{fmt.Errorf("want --iods >= 3, --replicas 1..5, --workers >= 1 (have %d, %d, %d)", iods, replicas, workers)}
			}
			return runScenario("redundancy", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunRedundancy(ctx, cfg)
			})
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "1 minute, kills every 10-15 s, shorter heal wait")
	c.Flags().DurationVar(&dur, "duration", 10*time.Minute, "length of the load with kills")
	c.Flags().DurationVar(&healWait, "heal-wait", 2*time.Minute, "after the load, how long to wait for nothing stale (--quick: 15s)")
	c.Flags().IntVar(&replicas, "replicas", 2, "copies of every file (1 shows what the harness finds without redundancy)")
	c.Flags().IntVar(&iods, "iods", 3, "I/O servers")
	c.Flags().IntVar(&workers, "workers", 8, "concurrent workers, 4 files of 1 MiB each")
	c.Flags().StringVar(&systems, "systems", "corral,glusterfs", "systems to run, comma-separated (--quick: corral unless given); glusterfs needs root and runs replica 2")
	c.Flags().BoolVar(&wipe, "wipe", false, "restart a killed server on an empty disk (accepted with servers replace): a lost disk")
	c.Flags().StringVar(&dir, "dir", os.TempDir(), "scratch directory")
	c.Flags().StringVar(&out, "out", "", "results directory (default results/redundancy/TIMESTAMP)")
	return c
}
