package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fsck"
	"github.com/spf13/cobra"
)

func fsckCmd(run fsRunner) *cobra.Command {
	var repair, asJSON bool
	var workers int
	var grace time.Duration
	c := &cobra.Command{Use: "fsck [PATH] [--repair] [--json] [--workers N]", Short: "Check every copy of every file's data (and with --repair, fix them)",
		Example: `  corral fs fsck                 # check everything, change nothing
  corral fs fsck /www --json
  corral fs fsck --repair`, Args: cobra.ArbitraryArgs,
		Long: `Check the data of every regular file below PATH (default /): each copy of
each column on its I/O server must exist where it holds data, have the size
the file's size and the other copies imply, have no stale record at the
metadata server and no block whose checksum fails (Scrub; a server that
does not scrub yet is checked by size only). Then every I/O server's objects
that no file references and older than --grace are orphans.

Prints a line per damaged copy (path, column, server, byte ranges of the
object) and the counts per kind: missing, mismatch, stale, corrupt,
orphaned, unreadable (a damaged column with no good copy left). When
standard error is a terminal, a progress line goes there every 5 s (not
with --quiet or --json).

With --repair, a damaged copy is healed from the good copies of its column
(the I/O server copies the bad ranges, or the whole object when it is
missing or has the wrong size); stale records are left to the metadata
server's healer ("healing"); orphans are removed. Without it nothing
changes. Copies on servers that are down are not checked (a warning).

Exit status, as e2fsck's:
  0  no damage
  1  damage found and all of it repaired
  4  damage left (found without --repair, not repairable, or being healed)
  8  fsck itself failed (metadata server unreachable, bad arguments)`,
	}
	check := run(func(ctx context.Context, cl *client.Client, args []string) error {
		opt := fsck.Options{Path: "/", Repair: repair, Workers: workers, Grace: grace}
		if len(args) == 1 {
			opt.Path = args[0]
		}
		// Progress only for a person watching: not into logs or pipes,
		// and not beside --json, which is for programs.
		if !progressQuiet && !asJSON && isTTYFile(os.Stderr) {
			opt.Progress, opt.ProgressEvery = os.Stderr, 5*time.Second
		}
		rep, err := fsck.Check(ctx, cl, cl.Pool(), opt)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		} else {
			printFsck(rep)
		}
		if rep.Exit != 0 {
			return exitError{rep.Exit}
		}
		return nil
	})
	// Every failure of fsck itself is status 8 (as e2fsck's), bad
	// arguments and flags too, so scripts tell it from damage (4).
	fail := func(cmd *cobra.Command, err error) error {
		fmt.Fprintf(os.Stderr, "%s: %s\n", cmd.CommandPath(), errText(err))
		return exitError{fsck.ExitFailed}
	}
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fail(cmd, fmt.Errorf("%w (usage: %s)", err, cmd.UseLine()))
	})
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return fail(cmd, fmt.Errorf("one PATH at most, got %d (usage: %s)", len(args), cmd.UseLine()))
		}
		if workers < 1 || workers > 256 {
			return fail(cmd, fmt.Errorf("--workers %d: want 1..256", workers))
		}
		err := check(cmd, args)
		if err == nil || errors.As(err, new(exitError)) {
			return err
		}
		return fail(cmd, err)
	}
	c.Flags().BoolVar(&repair, "repair", false, "heal damaged copies from good ones and remove orphans (default: only report)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	c.Flags().IntVar(&workers, "workers", 8, "files checked at once")
	c.Flags().DurationVar(&grace, "grace", time.Hour, "ignore unreferenced objects younger than this (a create may still be writing them)")
	return c
}

func printFsck(r *fsck.Report) {
	for _, w := range r.Warnings {
		fmt.Printf("warning: %s\n", w)
	}
	for _, d := range r.Damage {
		var b strings.Builder
		if d.Kind == fsck.Orphaned {
			fmt.Fprintf(&b, "orphan: file %d column %d on server %d", d.Ino, d.Column, d.Server)
		} else {
			b.WriteString(d.Path)
			if d.Column >= 0 {
				fmt.Fprintf(&b, ": column %d", d.Column)
			}
			if d.Server != 0 {
				fmt.Fprintf(&b, " server %d", d.Server)
			}
			fmt.Fprintf(&b, ": %s", d.Kind)
		}
		if len(d.Ranges) > 0 && d.Kind != fsck.Orphaned {
			rs := make([]string, len(d.Ranges))
			for i, x := range d.Ranges {
				if x.Len == 0 {
					rs[i] = fmt.Sprintf("%d-end", x.Off)
				} else {
					rs[i] = fmt.Sprintf("%d-%d", x.Off, x.Off+x.Len)
				}
			}
			fmt.Fprintf(&b, " [%s]", strings.Join(rs, " "))
		}
		if d.Detail != "" {
			fmt.Fprintf(&b, " (%s)", d.Detail)
		}
		if d.Repair != "" {
			fmt.Fprintf(&b, ": %s", d.Repair)
		}
		fmt.Println(b.String())
	}
	c := r.Counts
	fmt.Printf("%d files, %d copies, %d objects checked: %d missing, %d mismatch, %d stale, %d corrupt, %d orphaned, %d unreadable\n",
		r.Files, r.Copies, r.Objects, c.Missing, c.Mismatch, c.Stale, c.Corrupt, c.Orphaned, c.Unreadable)
	if r.Unchecked > 0 {
		fmt.Printf("%d copies not checked (their servers are down or unknown)\n", r.Unchecked)
	}
	switch r.Exit {
	case fsck.ExitClean:
		fmt.Println("clean")
	case fsck.ExitRepaired:
		fmt.Printf("%d repaired, none left\n", r.Repaired)
	default:
		fmt.Printf("%d repaired, %d left\n", r.Repaired, r.Left)
	}
}
