package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fsck"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

type fsRunner = func(func(context.Context, *client.Client, []string) error) func(*cobra.Command, []string) error

func replaceCmd(run fsRunner) *cobra.Command {
	return &cobra.Command{Use: "replace ID", Short: "Accept an empty disk as I/O server ID (its data are lost)",
		Example: `  corral fs servers             # find the server that came back lost
  corral fs servers replace 2`, Args: cobra.ExactArgs(1),
		Long: `Accept an empty data directory as I/O server ID: run it when ID's disk was
replaced (or wiped). The iod at ID's address, started on the empty directory,
waits; after this command it registers as ID and takes new files again. The
data ID held are gone: reading them fails with EIO (never zeros), while files
created later, and parts of files written later, read normally.`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return usageError{fmt.Errorf("invalid server ID %q (see corral fs servers)", args[0])}
			}
			r, err := cl.Call(ctx, &proto.ReplaceServer{ID: uint32(id)})
			if err != nil {
				return err
			}
			if sr, ok := r.(*proto.ServersReply); ok && len(sr.Servers) == 1 {
				fmt.Printf("server %d at %s: the next empty data directory registering there takes it over\n", id, sr.Servers[0].Addr)
			}
			return nil
		})}
}

func lostCmd(run fsRunner) *cobra.Command {
	return &cobra.Command{Use: "lost ID", Short: "Declare I/O server ID gone for good: its replicas are made again elsewhere",
		Example: `  corral fs servers             # find the dead server
  corral fs servers lost 2`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return err
			}
			if id, err := strconv.ParseUint(args[0], 10, 32); err != nil || id == 0 {
				return usageError{fmt.Errorf("invalid server ID %q (see corral fs servers)", args[0])}
			}
			return nil
		},
		Long: `Declare I/O server ID lost for good (a dead machine that will not come back).
The metadata server moves every replica ID held to another server (another
zone when there is one) and heal copies them there from the current copies;
corral fs servers shows the progress (STALE, HEALED, HEAL). Files with a
single copy on ID lose those stripe units: reading them fails with EIO.

It is refused (EBUSY) while the server still answers as itself, up with
its objects: stop it first. Meta also declares a server lost by itself once
it has been down longer than corral meta --lost-after (default 30m).`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			id, _ := strconv.ParseUint(args[0], 10, 32) // checked by Args
			s, err := cl.LoseServer(ctx, uint32(id))
			if err != nil {
				return fmt.Errorf("server %d: %w", id, err)
			}
			fmt.Printf("server %d at %s is lost: its replicas are being made again elsewhere (%s to heal; see corral fs servers)\n", id, s.Addr, human(int64(s.Stale)))
			return nil
		})}
}

func gcCmd(run fsRunner) *cobra.Command {
	var apply bool
	var grace time.Duration
	c := &cobra.Command{Use: "gc [--apply] [--grace DURATION]", Short: "Find (and with --apply remove) objects no file references",
		Example: `  corral fs gc                  # count only
  corral fs gc --apply --grace 2h`, Args: cobra.NoArgs,
		Long: `Ask every I/O server that is up for its objects and the metadata server which
of them a file still references. Objects nobody references (left by crashes)
older than --grace are counted per server; with --apply they are removed.
Without --apply nothing changes (a dry run). Each iod also sweeps its own
objects this way when it starts.`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			ss, err := cl.Servers(ctx)
			if err != nil {
				return err
			}
			pool := cl.Pool()
			cut := time.Now().Add(-grace).UnixNano()
			var totalN int
			var totalB uint64
			for _, s := range ss {
				if s.State != proto.ServerUp && s.State != proto.ServerFull {
					fmt.Printf("server %d (%s): %s, skipped\n", s.ID, s.Addr, proto.StateName(s.State))
					continue
				}
				objs, err := fsck.ListObjects(ctx, pool, s.Addr)
				if err != nil {
					return fmt.Errorf("server %d (%s): %w", s.ID, s.Addr, err)
				}
				gone, err := fsck.Orphans(ctx, cl, s.ID, objs, cut)
				if err != nil {
					return fmt.Errorf("server %d (%s): %w", s.ID, s.Addr, err)
				}
				var n int
				var b uint64
				for _, o := range gone {
					if apply {
						idx := o.Index
						if idx == proto.AnyIndex {
							idx = 0 // a legacy name is index 0's
						}
						if _, err := pool.Call(ctx, s.Addr, &proto.Remove{Handle: o.Ino, Index: idx}); err != nil {
							return fmt.Errorf("server %d (%s): remove object of file %d: %w", s.ID, s.Addr, o.Ino, err)
						}
					}
					n++
					b += o.Size
				}
				verb := "unreferenced"
				if apply {
					verb = "removed"
				}
				fmt.Printf("server %d (%s): %d objects, %d %s (%s)\n", s.ID, s.Addr, len(objs), n, verb, human(int64(b)))
				totalN += n
				totalB += b
			}
			if apply {
				fmt.Printf("removed %d objects, %s\n", totalN, human(int64(totalB)))
			} else {
				fmt.Printf("%d unreferenced objects, %s (dry run: --apply removes them)\n", totalN, human(int64(totalB)))
			}
			return nil
		})}
	c.Flags().BoolVar(&apply, "apply", false, "remove the unreferenced objects (default: only count them)")
	c.Flags().DurationVar(&grace, "grace", time.Hour, "ignore objects younger than this (a create may still be writing them)")
	return c
}
