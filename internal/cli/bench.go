package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-cluster/corral/internal/bench"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/spf13/cobra"
)

func benchCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Run a benchmark scenario; each measures its own baseline in the same run",
	}
	var quick bool
	var size, dir, out string
	var workers int
	pfs := &cobra.Command{
		Use:   "pfs-local [--quick]",
		Short: "File system throughput on loopback vs a local file",
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
			if out == "" {
				out = filepath.Join("results", "pfs-local", time.Now().UTC().Format("20060102-150405"))
			}
			cfg.Out = out
			ctx, stop := signalContext()
			defer stop()
			res, err := bench.RunPFSLocal(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Printf("\n%s\nresults in %s\n", res.Markdown(), out)
			return nil
		},
	}
	pfs.Flags().BoolVar(&quick, "quick", false, "tiny version (CI): 32 MiB, fewer layouts, 200 small files")
	pfs.Flags().StringVar(&size, "size", "1G", "large file size")
	pfs.Flags().StringVar(&dir, "dir", ".", "scratch directory on the disk to measure (I/O servers and the local baseline both use it)")
	pfs.Flags().StringVar(&out, "out", "", "results directory (default results/pfs-local/TIMESTAMP)")
	pfs.Flags().IntVar(&workers, "workers", 8, "concurrent workers for the small-file test")
	c.AddCommand(pfs)
	return c
}
