package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/spf13/cobra"
)

func metaBenchCmd() *cobra.Command {
	var quick, web, chaos, noFUSE, noEtcd bool
	var dir, out, members string
	var cfg bench.MetaConfig
	var webCfg bench.MetaWebConfig
	c := &cobra.Command{
		Use:   "meta [--quick] [--members 1,3] [--web] [--chaos] [--profile]",
		Short: "Metadata operations (mdtest-style) vs ext4, ext4+fsync and etcd; a Zipf web figure vs nginx",
		Example: `  corral bench meta --quick
  sudo corral bench meta --members 1,3 --web
  sudo corral bench meta --members 3 --chaos`,
		Long: `Start Corral on loopback with 1 and then 3 metadata members (--members) and 2
I/O servers, and run P worker processes (--procs) that each create (and
write), stat, read and delete F files (--files) of 4 KiB, with a barrier
between phases: all in one shared directory, then each in its own. Through
the client library and through a FUSE mount (root), and, as baselines in the
same run, on a local directory (plain, and with an fsync per file) and on
embedded etcd with as many members (a put per create). Prints ops/s per
phase, the ratios to local+fsync and to etcd, and the goals of issue 13.

--web adds: Corral nodes serving 4 KiB files drawn from a Zipf distribution
(s = 1.0) over 10^4 files, beside nginx serving the same files from local
disk and a bare Go net/http server serving them from memory, with the same wrk
script (needs wrk and nginx: scripts/deps).
--profile writes CPU and block profiles of every metadata member, I/O server,
node and worker, per phase, under OUT/profiles (go tool pprof reads them), and
adds a per-operation breakdown (client, propose -> commit -> apply, fsyncs,
bytes) from the daemons' metrics scraped before and after each phase.
--chaos kills the metadata leader every 20 s (3 times) and reports the time until
operations resume (needs 3 members and 'corral fs meta members').
Writes results.json, results.md and meta.svg under --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			for _, m := range strings.Split(members, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(m))
				if err != nil || n < 1 || n > 7 {
					return usageError{fmt.Errorf("--members %q: want a comma-separated list of member counts from 1 to 7", members)}
				}
				cfg.Members = append(cfg.Members, n)
			}
			cfg.Bin, cfg.Dir, cfg.Log = bin, dir, os.Stdout
			cfg.FUSE, cfg.Etcd, cfg.Chaos, cfg.ChaosEvery, cfg.ChaosKills = !noFUSE, !noEtcd, chaos, 20*time.Second, 3
			if quick {
				if !cmd.Flags().Changed("files") {
					cfg.Files = 200
				}
				cfg.ChaosKills = 1
				if !cmd.Flags().Changed("web-files") {
					webCfg.Files = 2000
				}
				if !cmd.Flags().Changed("web-duration") {
					webCfg.Duration = 2 * time.Second
				}
			}
			if cfg.Procs < 1 || cfg.Files < 1 || cfg.Threads < 1 || cfg.Size < 0 {
				return usageError{fmt.Errorf("want --procs, --files and --threads at least 1 and --size at least 0")}
			}
			if web {
				if webCfg.Files < 1 || webCfg.Connections < 1 || webCfg.Nodes < 1 {
					return usageError{fmt.Errorf("want --web-files, --web-connections and --web-nodes at least 1")}
				}
				webCfg.Size, webCfg.S = 4096, 1.0
				cfg.Web = webCfg
			}
			return runScenario("meta", out, func(ctx context.Context, out string) (markdowner, error) {
				cfg.Out = out
				return bench.RunMeta(ctx, cfg)
			})
		},
	}
	f := c.Flags()
	f.BoolVar(&quick, "quick", false, "tiny version (CI): 200 files per process (web: 2000 files, 2 s runs; chaos: one kill)")
	f.StringVar(&members, "members", "1,3", "metadata member counts to run, comma-separated")
	f.IntVar(&cfg.Procs, "procs", 4, "worker processes")
	f.IntVar(&cfg.Files, "files", 2000, "files per process")
	f.IntVar(&cfg.Size, "size", 4096, "bytes written and read per file (0: empty files, metadata operations only)")
	f.IntVar(&cfg.Threads, "threads", 1, "calls in flight per process (1: mdtest's)")
	f.BoolVar(&noFUSE, "no-fuse", false, "skip the FUSE rows")
	f.BoolVar(&noEtcd, "no-etcd", false, "skip the etcd baseline")
	f.BoolVar(&chaos, "chaos", false, "kill the metadata leader every 20 s and report the resume time")
	f.BoolVar(&web, "web", false, "add the Zipf web figure beside nginx and a bare Go net/http server")
	f.BoolVar(&cfg.Profile, "profile", false, "write CPU and block profiles of every daemon and worker per phase (OUT/profiles) and a per-operation breakdown")
	f.IntVar(&webCfg.Files, "web-files", 10000, "web: distinct files")
	f.IntVar(&webCfg.Nodes, "web-nodes", 2, "web: corral nodes (nginx gets as many worker processes)")
	f.DurationVar(&webCfg.Duration, "web-duration", 10*time.Second, "web: length of each wrk run")
	f.IntVar(&webCfg.Connections, "web-connections", 64, "web: wrk connections")
	f.StringVar(&dir, "dir", os.TempDir(), "scratch directory (its disk is the local baseline's)")
	f.StringVar(&out, "out", "", "results directory (default results/meta/TIMESTAMP)")
	return c
}

// metaWorkerCmd is one worker process of 'corral bench meta': it reads phase
// names on stdin and answers each with a JSON line on stdout.
func metaWorkerCmd() *cobra.Command {
	var w bench.MetaWorkerConfig
	c := &cobra.Command{Use: "meta-worker", Short: "One worker of bench meta (phases on stdin, JSON results on stdout)", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.MetaWorker(cmd.Context(), w, os.Stdin, os.Stdout)
		}}
	f := c.Flags()
	f.StringVar(&w.Target, "target", "local", "local, local+fsync, fuse, lib or etcd")
	f.IntVar(&w.ID, "id", 0, "worker number")
	f.IntVar(&w.Files, "files", 2000, "files")
	f.IntVar(&w.Size, "size", 4096, "bytes per file")
	f.IntVar(&w.Threads, "threads", 1, "calls in flight")
	f.BoolVar(&w.Shared, "shared", false, "all workers in --dir (else each in --dir/pID)")
	f.StringVar(&w.Dir, "dir", "", "directory (local or file-system path; etcd: key prefix)")
	f.StringVar(&w.Meta, "meta", "", "metadata members, comma-separated (lib)")
	f.StringVar(&w.Etcd, "etcd", "", "etcd client URLs, comma-separated (etcd)")
	f.StringVar(&w.Profile, "profile", "", "path prefix of a CPU profile per phase (PREFIX-PHASE.cpu.pprof)")
	return c
}

// memServeCmd is the bare Go net/http baseline of the web figures: the
// files under --root served from memory.
func memServeCmd() *cobra.Command {
	var root, listen string
	c := &cobra.Command{Use: "memserve", Short: "Serve the files under --root from memory with bare net/http (the web figures' baseline)", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.MemServe(cmd.Context(), root, listen, os.Stdout)
		}}
	c.Flags().StringVar(&root, "root", "", "directory whose files are served")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on")
	return c
}
