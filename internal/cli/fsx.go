package cli

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/corral-cluster/corral/internal/pfs/fsx"
	"github.com/spf13/cobra"
)

func fsxCmd() *cobra.Command {
	var (
		o                            fsx.Options
		mode, maxSize, maxLen, align string
		quiet                        bool
	)
	c := &cobra.Command{
		Use:   "fsx [flags] DIR",
		Short: "Exercise a file with random operations and check every byte read",
		Long: `Creates one file in DIR (on a mount, or any directory) and applies a seeded,
repeatable sequence of random operations to it: writes at unaligned and
page-straddling offsets that overlap earlier ones, truncates up and down, hole
punches, reads, fsyncs, close/reopen, and in mmap mode reads and writes
through shared mappings. It keeps a model of what the file must hold and
checks every read, and the whole file at each reopen and at the end.

On the first difference it prints the operation, the first differing offset,
expected and actual bytes (and which operation wrote each), the last 20
operations, the command that replays them, and leaves the file and
FILE.expected in DIR; exit status 1. On success the file is removed.

Modes: buffered (pread/pwrite), mmap (adds mmap reads and writes with msync),
direct (O_DIRECT; offsets, lengths and buffers aligned to --align).
See docs/fsx.md.`,
		Example: `  corral fsx --seed 1 /mnt/corral
  corral fsx --ops 1000000 --seed 7 --mode mmap /mnt/corral     # long mode
  corral fsx --mode direct --punch=false --duration 5m /mnt/corral`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Mode, err = fsx.ParseMode(mode); err != nil {
				return usageError{fmt.Errorf("--mode: %w", err)}
			}
			for _, s := range []struct {
				flag, val string
				to        *int64
			}{{"--max-size", maxSize, &o.MaxSize}, {"--max-len", maxLen, &o.MaxLen}, {"--align", align, &o.Align}} {
				if *s.to, err = parseSize(s.val); err != nil {
					return usageError{fmt.Errorf("%s: %w", s.flag, err)}
				}
			}
			if o.Ops < 1 {
				return usageError{fmt.Errorf("--ops %d: want at least 1", o.Ops)}
			}
			if o.Duration < 0 {
				return usageError{fmt.Errorf("--duration %s: want 0 (no limit) or more", o.Duration)}
			}
			if fi, err := os.Stat(args[0]); err != nil {
				return err
			} else if !fi.IsDir() {
				return fmt.Errorf("%s: not a directory", args[0])
			}
			if !quiet {
				o.Progress = os.Stderr
			}
			r, err := fsx.Run(args[0], o)
			var f *fsx.Failure
			if errors.As(err, &f) {
				fmt.Fprintln(os.Stderr, f.Error())
				return exitError{1}
			}
			if err != nil {
				return err
			}
			how := "ok"
			if r.TimedOut {
				how = fmt.Sprintf("ok, stopped by --duration %s before %d operations", o.Duration, o.Ops)
			}
			names := make([]string, 0, len(r.Counts))
			for k := range r.Counts {
				names = append(names, k)
			}
			sort.Strings(names)
			var counts []string
			for _, k := range names {
				if r.Counts[k] > 0 {
					counts = append(counts, fmt.Sprintf("%s %d", k, r.Counts[k]))
				}
			}
			fmt.Printf("fsx: %d operations (seed %d, mode %s) in %s: %s\n  %s\n", r.Ops, o.Seed, o.Mode, r.Elapsed.Round(1e6), how, strings.Join(counts, ", "))
			return nil
		},
	}
	c.Flags().Uint64Var(&o.Seed, "seed", 1, "random seed: the same seed and flags replay the same operations")
	c.Flags().IntVar(&o.Ops, "ops", fsx.DefaultOps, "number of operations (long mode: 1000000)")
	c.Flags().DurationVar(&o.Duration, "duration", 0, "stop, successfully, after this long even if --ops are not done (0: no limit)")
	c.Flags().StringVar(&mode, "mode", "buffered", "buffered, mmap or direct")
	c.Flags().BoolVar(&o.Punch, "punch", true, "punch holes (fallocate PUNCH_HOLE|KEEP_SIZE)")
	c.Flags().StringVar(&maxSize, "max-size", "256K", "largest file size")
	c.Flags().StringVar(&maxLen, "max-len", "64K", "largest length of one operation")
	c.Flags().StringVar(&align, "align", "4096", "direct mode: alignment of offsets, lengths and buffers (512 or 4096)")
	c.Flags().IntVar(&o.Reopen, "reopen", fsx.DefaultReopen, "close, reopen and check the whole file about once in this many operations")
	c.Flags().StringVar(&o.Name, "name", "", "name of the file in DIR (default fsx-SEED-MODE)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress lines")
	return c
}
