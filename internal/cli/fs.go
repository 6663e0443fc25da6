package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/spf13/cobra"
)

// transferBuf is the size of one read or write of put/get: several stripes,
// so each call feeds every I/O server.
const transferBuf = 8 << 20

func fsCmd() *cobra.Command {
	var metaAddr string
	c := &cobra.Command{
		Use:   "fs [--meta HOST:PORT[,HOST:PORT...]] COMMAND",
		Short: "Use the parallel file system from the command line",
		Long: `Commands on the parallel file system, like the coreutils of the same names.
Paths inside the file system are absolute (a missing leading / is added).
The metadata members come from --meta or the CORRAL_META environment
variable, a comma-separated list (default 127.0.0.1:7400,7401,7402, where
corral up runs them); requests go to whichever member leads. Sizes accept units: 4096, 64K, 1M, 1G.`,
		Example: `  # after 'corral up', in the same directory (meta and secret found by default):
  corral fs mkdir -p /www/example.org
  corral fs put index.html /www/example.org/
  corral fs ls -l /www/example.org
  corral fs stat /www/example.org/index.html
  corral fs layout set /big --stripe-size 1M --stripe-count 3`,
	}
	c.PersistentFlags().StringVar(&metaAddr, "meta", metaClientDefault(), metaClientHelp)
	var sf secFlags
	sf.client = true
	sf.add(c.PersistentFlags(), true)
	c.PersistentFlags().BoolVarP(&progressQuiet, "quiet", "q", false, "no progress bars (drawn on standard error when it is a terminal)")
	// run gives a subcommand a client; Main prints its error after the
	// command's path, coreutils style, and exits 1 (2 for a usageError).
	run := func(f func(ctx context.Context, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext()
			defer stop()
			sec, err := sf.security(false)
			if err != nil {
				return err
			}
			cl := client.New(metaAddr, client.WithSecurity(sec))
			cl.Uid, cl.Gid = uint32(os.Getuid()), uint32(os.Getgid())
			defer cl.Close()
			if err := reachMeta(ctx, cl); err != nil {
				return interrupted(ctx, err)
			}
			return interrupted(ctx, f(ctx, cl, args))
		}
	}
	var parents bool
	mkdir := &cobra.Command{Use: "mkdir [-p] PATH...", Short: "Make directories",
		Example: `  corral fs mkdir /www
  corral fs mkdir -p /www/example.org/img`, Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				var err error
				if parents {
					err = cl.MkdirAll(ctx, p, 0o755)
				} else {
					err = cl.MkdirPath(ctx, p, 0o755)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})}
	mkdir.Flags().BoolVarP(&parents, "parents", "p", false, "make parent directories as needed; no error if existing")

	var long, all bool
	ls := &cobra.Command{Use: "ls [-l] [-a] [PATH...]", Short: "List directory contents",
		Long: `List directories (the root without PATH), as ls does: names starting with
'.' only with -a; -l: mode, links, owner, group, size, time of the last
change (the year instead of the time for one over 6 months old or in the
future).`,
		Example: `  corral fs ls
  corral fs ls -l /www/example.org
  corral fs ls -la /www`, Args: cobra.ArbitraryArgs,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			if len(args) == 0 {
				args = []string{"/"}
			}
			for i, p := range args {
				if len(args) > 1 {
					if i > 0 {
						fmt.Println()
					}
					fmt.Printf("%s:\n", p)
				}
				if err := list(ctx, cl, p, long, all); err != nil {
					return err
				}
			}
			return nil
		})}
	ls.Flags().BoolVarP(&long, "long", "l", false, "long listing: mode, links, owner, size, time")
	ls.Flags().BoolVarP(&all, "all", "a", false, "also names starting with '.' (as ls -A: without . and ..)")

	stat := &cobra.Command{Use: "stat PATH...", Short: "Show attributes and layout: where each stripe lives",
		Example: `  corral fs stat /www/example.org/index.html`, Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				if err := statPath(ctx, cl, p); err != nil {
					return err
				}
			}
			return nil
		})}

	var serversJSON bool
	var putSize, putCount string
	var putForce bool
	var putReplicas int
	var putLayout stripeFlags
	put := &cobra.Command{Use: "put LOCAL REMOTE", Short: "Copy a local file (- : standard input) into the file system", Args: cobra.ExactArgs(2),
		Long: `Copy LOCAL into the file system as REMOTE (or into REMOTE when it is a
directory); LOCAL - reads standard input. An existing REMOTE is replaced
only with --force. The new file takes its directory's layout unless
--stripe-size, --stripe-count or --replicas say otherwise (--stripe-count
all: every usable I/O server). The copy is written under a temporary name next to
REMOTE and renamed over it once on disk, so REMOTE is either the old file
or the whole new one; a put that fails leaves nothing behind.`,
		Example: `  corral fs put index.html /www/example.org/
  corral fs put -f index.html /www/example.org/index.html     # replace it
  tar c site | corral fs put - /backup/site.tar
  corral fs put --stripe-count all big.iso /data/`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("replicas") && (putReplicas < 1 || putReplicas > layout.MaxReplicas) {
				return usageError{fmt.Errorf("--replicas: %d out of range [1, %d]", putReplicas, layout.MaxReplicas)}
			}
			return putLayout.parse(cmd, putSize, putCount, false)
		},
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			var o client.CreateOpts
			o.StripeSize, o.StripeCount, o.Replicas = putLayout.size.v, putLayout.count.v, uint32(putReplicas)
			return putFile(ctx, cl, args[0], args[1], o, putForce)
		})}
	put.Flags().BoolVarP(&putForce, "force", "f", false, "replace REMOTE if it exists")
	put.Flags().StringVar(&putSize, "stripe-size", "", "stripe size of the new file (e.g. 64K, 1M)")
	put.Flags().StringVar(&putCount, "stripe-count", "", "number of I/O servers the new file spans, or all")
	put.Flags().IntVar(&putReplicas, "replicas", 0, "copies of each stripe unit of the new file, 1-5")

	get := &cobra.Command{Use: "get REMOTE LOCAL", Short: "Copy a file out of the file system (LOCAL - is stdout)",
		Example: `  corral fs get /www/example.org/index.html .
  corral fs get /backup/site.tar - | tar x`, Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return getFile(ctx, cl, args[0], args[1])
		})}

	cat := &cobra.Command{Use: "cat PATH...", Short: "Write files to standard output",
		Example: `  corral fs cat /www/example.org/index.html`, Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				if err := getFile(ctx, cl, p, "-"); err != nil {
					return err
				}
			}
			return nil
		})}

	var recursive, force bool
	rm := &cobra.Command{Use: "rm [-r] [-f] PATH...", Short: "Remove files (and with -r, directories)",
		Example: `  corral fs rm /www/example.org/old.html
  corral fs rm -r -f /www/example.org/tmp`, Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				if path.Clean("/"+p) == "/" {
					return &fs.PathError{Op: "rm", Path: p, Err: errors.New("refusing to remove the root directory")}
				}
				var err error
				if recursive {
					err = cl.RemoveAll(ctx, p)
				} else {
					var a proto.Attr
					if a, err = cl.Lstat(ctx, p); err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
						err = &fs.PathError{Op: "rm", Path: p, Err: errors.New("is a directory (use -r)")}
					} else if err == nil {
						err = cl.Remove(ctx, p)
					}
				}
				if err != nil && !(force && errors.Is(err, fs.ErrNotExist)) {
					return err
				}
			}
			return nil
		})}
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	rm.Flags().BoolVarP(&force, "force", "f", false, "ignore missing files")

	mv := &cobra.Command{Use: "mv SOURCE DEST", Short: "Move or rename (into DEST when it is a directory)",
		Example: `  corral fs mv /www/new.html /www/index.html
  corral fs mv /www/a.html /www/archive/`, Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return cl.RenamePath(ctx, args[0], args[1], true)
		})}

	var symbolic bool
	ln := &cobra.Command{Use: "ln [-s] TARGET LINK", Short: "Make a hard link (with -s, a symbolic link)", Args: cobra.ExactArgs(2),
		Long: `Make LINK a hard link to the file TARGET, or with -s a symbolic link whose
target is the text TARGET. When LINK is an existing directory, the link is
made in it under TARGET's last name. Directories cannot be hard-linked.`,
		Example: `  corral fs ln /www/a.org/logo.png /www/b.org/logo.png     # one file, two names
  corral fs ln -s ../a.org/index.html /www/b.org/index.html`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			target, link := args[0], args[1]
			if a, err := cl.Stat(ctx, link); err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				link = path.Join("/"+link, path.Base(target))
			}
			if symbolic {
				return cl.SymlinkPath(ctx, target, link)
			}
			return cl.LinkPath(ctx, target, link)
		})}
	ln.Flags().BoolVarP(&symbolic, "symbolic", "s", false, "make a symbolic link instead of a hard link")

	servers := &cobra.Command{Use: "servers [replace ID | lost ID]", Short: "List the I/O servers, their state, space, load and heal progress",
		Example: `  corral fs servers
  corral fs servers replace 2
  corral fs servers lost 2`, Args: cobra.NoArgs,
		Long: `List the I/O servers the metadata server knows, with their state:
  up         heard from lately, free space above the reserve: gets new files
  full       up, but free space is below the reserve (corral meta --reserve)
  down       not heard from since the metadata server started, or lately
  lost       came back without its objects (empty or replaced disk): no new
             files, and reads of its data fail with EIO
  replacing  'servers replace' was run: the next empty disk at its address
             takes it over

ZONE is the failure domain the iod gave (--zone; copies of one stripe unit
go to distinct zones when there are enough), LOAD the bytes it read and
wrote per second, as it last reported. STALE is the bytes of replicas on it that missed writes and wait
for heal, HEALED the bytes heal copied to it since the metadata leader
started, and HEAL how far heal is: HEALED / (HEALED + STALE). --json prints
the same as one JSON array (sizes in bytes, load in KiB/s, seen in ns since
the epoch), for scripts.`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			ss, err := cl.Servers(ctx)
			if err != nil {
				return err
			}
			if serversJSON {
				return printServersJSON(ss)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tZONE\tCAPACITY\tFREE\tLOAD\tSTALE\tHEALED\tHEAL\tLAST SEEN")
			for _, s := range ss {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s/s\t%s\t%s\t%s\t%s ago\n", s.ID, s.Addr, proto.StateName(s.State), orDash(s.Zone),
					human(int64(s.Capacity)), human(int64(s.Free)), human(int64(s.Load)<<10), human(int64(s.Stale)), human(int64(s.Healed)),
					healProgress(s.Stale, s.Healed), time.Since(time.Unix(0, s.Seen)).Round(time.Second))
			}
			return tw.Flush()
		})}
	servers.Flags().BoolVar(&serversJSON, "json", false, "print JSON instead of a table")
	servers.AddCommand(replaceCmd(run), lostCmd(run))

	c.AddCommand(mkdir, ls, stat, put, get, cat, rm, mv, ln, servers, layoutCmd(run), gcCmd(run), fsckCmd(run), secretCmd(&sf), metaAdminCmd(run))
	return c
}

// serverJSON is one line of `corral fs servers --json`.
type serverJSON struct {
	ID       uint32 `json:"id"`
	Addr     string `json:"addr"`
	State    string `json:"state"`
	Zone     string `json:"zone"`
	Capacity uint64 `json:"capacity"`
	Free     uint64 `json:"free"`
	LoadKiB  uint32 `json:"load_kib_per_s"`
	Stale    uint64 `json:"stale"`
	Healed   uint64 `json:"healed"`
	Seen     int64  `json:"seen_ns"`
}

func printServersJSON(ss []proto.ServerInfo) error {
	out := make([]serverJSON, 0, len(ss))
	for _, s := range ss {
		out = append(out, serverJSON{s.ID, s.Addr, proto.StateName(s.State), s.Zone, s.Capacity, s.Free, s.Load, s.Stale, s.Healed, s.Seen})
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(out)
}

// stripeFlags are --stripe-size and --stripe-count, parsed before anything
// is contacted: a bad value is a usage error.
type stripeFlags struct {
	size, count struct {
		set bool
		v   uint32
	}
}

// parse reads the two values ("" : not given). withInherit allows
// "inherit" (0: clear it here); "all" (and 0) is every usable server.
func (f *stripeFlags) parse(cmd *cobra.Command, size, count string, withInherit bool) error {
	bad := func(flag string, err error) error {
		return usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	switch {
	case size == "":
	case size == "inherit" && withInherit:
		f.size.set = true
	default:
		n, err := parseSize(size)
		if err == nil {
			err = layout.ValidStripeSize(n)
		}
		if err != nil {
			return bad("--stripe-size", err)
		}
		f.size.set, f.size.v = true, uint32(n)
	}
	switch {
	case count == "":
	case count == "inherit" && withInherit:
		f.count.set = true
	case count == "all" || count == "0":
		f.count.set, f.count.v = true, proto.AllServers
	default:
		n, err := parseCount(count)
		if err != nil {
			return bad("--stripe-count", err)
		}
		f.count.set, f.count.v = true, n
	}
	return nil
}

// metaReachTimeout bounds reaching the metadata server (dial and
// handshake): a wrong --meta fails in seconds, not after the minute the
// retries of a long call may take. Calls after it keep their own deadlines.
const metaReachTimeout = 4 * time.Second

// reachMeta connects to the metadata server with one cheap call, and says
// so plainly when it cannot.
func reachMeta(ctx context.Context, cl *client.Client) error {
	cctx, cancel := context.WithTimeout(ctx, metaReachTimeout)
	defer cancel()
	_, err := cl.Stat(cctx, "/")
	if err == nil || errors.Is(err, proto.ErrAuth) || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, proto.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || cctx.Err() != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		// The pool's "server unavailable: ADDR: " says again what this says.
		why := strings.TrimPrefix(err.Error(), proto.ErrUnavailable.Error()+": ")
		why = strings.TrimPrefix(why, cl.Meta()+": ")
		// The client's give-up error lists the members, named here already.
		why = strings.Replace(strings.TrimPrefix(why, "metadata: "), "members "+cl.Meta()+": ", "", 1)
		return fmt.Errorf("cannot reach metadata server at %s: %s (check --meta or CORRAL_META)", cl.Meta(), why)
	}
	return err
}

func parseCount(s string) (uint32, error) {
	var n uint32
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 1 || n > layout.MaxServers || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("invalid stripe count %q (want 1..%d, or all)", s, layout.MaxServers)
	}
	return n, nil
}

func layoutCmd(run func(func(context.Context, *client.Client, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	c := &cobra.Command{Use: "layout get|set PATH", Short: "Show or set a directory's striping and replica policy",
		Long: `A directory's layout policy says how files created below it are laid out:
the stripe size, how many I/O servers each spans, how many copies each
stripe unit has (--replicas) and how files are placed (--placement). A new
file takes each from the nearest directory, its own first, then up to /,
that sets it; none: the metadata server's defaults (its stripe size over
every server, its replica count, striped). The
policy is looked up when the file is created, so setting one on /www
applies to all of /www's subdirectories that set none of their own, old
and new. An existing file's layout is fixed.`,
		Example: `  corral fs layout set /www --stripe-size 1M --stripe-count 3
  corral fs layout get /www/example.org       # inherited from /www
  corral fs layout set /www/big --stripe-count all
  corral fs layout set /www/big --stripe-count inherit
  corral fs layout set /www --replicas 2 --placement whole`,
	}
	get := &cobra.Command{Use: "get PATH", Short: "Show the layout of a file or the policy of a directory, and where it comes from", Args: cobra.ExactArgs(1),
		Example: `  corral fs layout get /www
  corral fs layout get /www/index.html`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			a, err := cl.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				fmt.Println(layoutText(a) + " (fixed at creation)")
				return nil
			}
			src, err := layoutPolicySource(ctx, cl, args[0], a)
			if err != nil {
				return err
			}
			fmt.Println(src.String())
			return nil
		})}
	var size, count, placement string
	var replicas int
	var lf stripeFlags
	var place uint8
	set := &cobra.Command{Use: "set DIR [--stripe-size SIZE] [--stripe-count N] [--replicas R] [--placement striped|whole]", Short: "Set the layout new files below DIR take", Args: cobra.ExactArgs(1),
		Long: `Set the striping policy of directory DIR: files created below it afterwards,
in subdirectories too unless they set their own, get this stripe size and
span this many I/O servers. --stripe-count is 1 up to the number of I/O
servers, or all (also 0): every usable server. "inherit" for either clears
it here, so it comes from the directories above again. --replicas R (1-5)
keeps R copies of each stripe unit on distinct servers (distinct zones when
there are enough): the file stays readable and writable while R-1 of each
unit's servers are down. --placement striped spreads each file's stripe
units round-robin over its servers (PVFS); whole keeps each file whole on
the least-loaded server(s) (CASTOR), its copies on others. Replicas and
placement cannot be set back to inherit (the protocol's 0 means keep).
An existing file's layout is fixed; to restripe it, copy it.`,
		Example: `  corral fs layout set /www --stripe-size 1M --stripe-count 3
  corral fs layout set /www/small --stripe-count 1
  corral fs layout set /www/small --stripe-count inherit
  corral fs layout set /www/db --replicas 3
  corral fs layout set /archive --placement whole --replicas 2`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("replicas") && (replicas < 1 || replicas > layout.MaxReplicas) {
				return usageError{fmt.Errorf("--replicas: %d out of range [1, %d]", replicas, layout.MaxReplicas)}
			}
			if size == "" && count == "" && replicas == 0 && placement == "" {
				return usageError{errors.New("nothing to set: give --stripe-size, --stripe-count, --replicas and/or --placement")}
			}
			switch placement {
			case "":
			case "striped":
				place = proto.PlaceStriped
			case "whole":
				place = proto.PlaceWhole
			default:
				return usageError{fmt.Errorf("--placement: %q is not striped or whole", placement)}
			}
			return lf.parse(cmd, size, count, true)
		},
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			a, err := cl.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				return &fs.PathError{Op: "layout", Path: args[0], Err: errors.New("not a directory: a file's layout is fixed when it is created; set the policy of its directory, or copy it with 'corral fs put --stripe-size/--stripe-count'")}
			}
			ss, sc := a.StripeSize, a.StripeCount
			if lf.size.set {
				ss = lf.size.v
			}
			if lf.count.set {
				sc = lf.count.v
			}
			a, err = cl.SetLayoutPolicy(ctx, &proto.SetLayout{Ino: a.Ino, StripeSize: ss, StripeCount: sc, Replicas: uint32(replicas), Placement: place})
			if err != nil {
				return &fs.PathError{Op: "layout", Path: args[0], Err: err}
			}
			src, err := layoutPolicySource(ctx, cl, args[0], a)
			if err != nil {
				return err
			}
			fmt.Println(src.String())
			return nil
		})}
	set.Flags().StringVar(&size, "stripe-size", "", "stripe size (e.g. 64K, 1M), or inherit")
	set.Flags().StringVar(&count, "stripe-count", "", "number of I/O servers per file, all, or inherit")
	set.Flags().IntVar(&replicas, "replicas", 0, "copies of each stripe unit, 1-5")
	set.Flags().StringVar(&placement, "placement", "", "striped (round-robin over servers) or whole (each file on the least-loaded server)")
	c.AddCommand(get, set)
	return c
}

// layoutPolicy is a directory's effective striping policy and the directory each
// field comes from ("" : none sets it, the default).
type layoutPolicy struct {
	size, count         uint32
	sizeFrom, countFrom string
	replicas            uint32
	place               uint8
	replFrom, placeFrom string
	dir                 string
}

func (p layoutPolicy) String() string {
	from := func(at string) string {
		switch at {
		case "":
			return "default"
		case p.dir:
			return "set here"
		}
		return "inherited from " + at
	}
	size, count := layoutWords(p.size, p.count)
	return fmt.Sprintf("stripe-size %s (%s) stripe-count %s (%s) replicas %s (%s) placement %s (%s)", size, from(p.sizeFrom), count, from(p.countFrom),
		replicaWord(p.replicas), from(p.replFrom), placeWord(p.place), from(p.placeFrom))
}

// replicaWord says a replica count (0: the metadata server's default).
func replicaWord(r uint32) string {
	if r == 0 {
		return "default"
	}
	return fmt.Sprint(r)
}

// placeWord says a placement policy as --placement takes it.
func placeWord(p uint8) string {
	if p == proto.PlaceWhole {
		return "whole"
	}
	return "striped"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// healProgress is the share of a server's heal done: healed / (healed +
// stale), "-" when there was none.
func healProgress(stale, healed uint64) string {
	if stale == 0 && healed == 0 {
		return "-"
	}
	if stale == 0 {
		return "done"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(healed)/float64(healed+stale))
}

// layoutWords says a stripe size and count as layout commands take them.
func layoutWords(stripeSize, stripeCount uint32) (size, count string) {
	size, count = "default", "all"
	if stripeSize != 0 {
		size = human(int64(stripeSize))
	}
	if stripeCount != 0 && stripeCount != proto.AllServers {
		count = fmt.Sprint(stripeCount)
	}
	return size, count
}

// layoutPolicySource resolves directory dir's policy the way the metadata server
// does at create: field by field from the nearest directory up to / that
// sets it. It walks parents with "..", which the server resolves through
// each directory's real parent.
func layoutPolicySource(ctx context.Context, cl *client.Client, dir string, a proto.Attr) (layoutPolicy, error) {
	name := path.Clean("/" + dir)
	p := layoutPolicy{dir: name}
	walk := name
	for depth := 0; depth < 4096; depth++ {
		if p.size == 0 && a.StripeSize != 0 {
			p.size, p.sizeFrom = a.StripeSize, name
		}
		if p.count == 0 && a.StripeCount != 0 {
			p.count, p.countFrom = a.StripeCount, name
		}
		if p.replicas == 0 && a.Replicas != 0 {
			p.replicas, p.replFrom = a.Replicas, name
		}
		if p.place == proto.PlaceInherit && a.Placement != proto.PlaceInherit {
			p.place, p.placeFrom = a.Placement, name
		}
		if p.size != 0 && p.count != 0 && p.replicas != 0 && p.place != proto.PlaceInherit || name == "/" {
			break
		}
		walk += "/.."
		var err error
		if a, err = cl.Stat(ctx, walk); err != nil {
			return p, err
		}
		name = path.Dir(name)
	}
	return p, nil
}

func layoutText(a proto.Attr) string {
	size, count := layoutWords(a.StripeSize, a.StripeCount)
	s := fmt.Sprintf("stripe-size %s stripe-count %s", size, count)
	if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		s += fmt.Sprintf(" servers %v", a.Servers)
		if a.Replicas > 1 {
			lay := client.AttrLayout(a)
			s += fmt.Sprintf(" replicas %d", a.Replicas)
			if lay.Validate() == nil {
				cols := make([]string, len(a.Servers))
				for k := range cols {
					cols[k] = fmt.Sprint(lay.Column(k))
				}
				s += " copies " + strings.Join(cols, " ")
			}
			if a.Stale > 0 {
				s += fmt.Sprintf(" stale-records %d", a.Stale)
			}
		}
	}
	return s
}

func modeString(m uint32) string {
	fm := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		fm |= fs.ModeDir
	case syscall.S_IFLNK:
		fm |= fs.ModeSymlink
	}
	s := fm.String()
	if s[0] == 'L' {
		s = "l" + s[1:]
	}
	return s
}

func list(ctx context.Context, cl *client.Client, p string, long, all bool) error {
	a, err := cl.Stat(ctx, p)
	if err != nil {
		return err
	}
	ents := []proto.Entry{{Name: p, Attr: a}}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		if ents, err = cl.Readdir(ctx, a.Ino); err != nil {
			return &fs.PathError{Op: "ls", Path: p, Err: err}
		}
		if !all {
			ents = slices.DeleteFunc(ents, func(e proto.Entry) bool { return strings.HasPrefix(e.Name, ".") })
		}
	}
	if !long {
		for _, e := range ents {
			fmt.Println(e.Name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 1, 1, ' ', tabwriter.AlignRight)
	for _, e := range ents {
		name := e.Name
		if e.Attr.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if t, err := cl.Readlink(ctx, e.Attr.Ino); err == nil {
				name += " -> " + t
			}
		}
		fmt.Fprintf(tw, "%s\t %d\t %d\t %d\t %d\t %s\t %s\n", modeString(e.Attr.Mode), e.Attr.Nlink, e.Attr.Uid, e.Attr.Gid,
			e.Attr.Size, lsTime(time.Unix(0, e.Attr.Mtime), time.Now()), name)
	}
	return tw.Flush()
}

// ctxReader reads r through a pipe that ends with ctx: a read of standard
// input blocked in the kernel is not interrupted by a signal, and Ctrl-C
// must end the put (its temporary file removed) all the same.
func ctxReader(ctx context.Context, r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	go func() {
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return pr
}

// lsTime is a file's time as ls -l shows it: the time of day within
// the last 6 months, else (older, or in the future) the year.
func lsTime(t, now time.Time) string {
	if t.After(now.Add(-183*24*time.Hour)) && !t.After(now.Add(time.Hour)) {
		return t.Format("Jan _2 15:04")
	}
	return t.Format("Jan _2  2006")
}

// interrupted turns the error of a command a signal (Ctrl-C) ended into
// "interrupted" (exit status 130, as a shell reports SIGINT) instead of
// the "context canceled" the cancelled calls return.
func interrupted(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

func statPath(ctx context.Context, cl *client.Client, p string) error {
	a, err := cl.Lstat(ctx, p)
	if err != nil {
		return err
	}
	kind := map[uint32]string{syscall.S_IFREG: "regular file", syscall.S_IFDIR: "directory", syscall.S_IFLNK: "symbolic link"}[a.Mode&syscall.S_IFMT]
	fmt.Printf("  File: %s\n  Size: %d\t%s\n Inode: %d\tLinks: %d\n  Mode: %s (%04o)\tUid: %d\tGid: %d\n",
		p, a.Size, kind, a.Ino, a.Nlink, modeString(a.Mode), a.Mode&0o7777, a.Uid, a.Gid)
	for _, t := range []struct {
		n string
		v int64
	}{{"Access", a.Atime}, {"Modify", a.Mtime}, {"Change", a.Ctime}} {
		fmt.Printf("%6s: %s\n", t.n, time.Unix(0, t.v).Format("2006-01-02 15:04:05.000000000 -0700"))
	}
	fmt.Printf("Layout: %s\n", layoutText(a))
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	ss, err := cl.Servers(ctx)
	if err != nil {
		return err
	}
	addr := map[uint32]string{}
	for _, s := range ss {
		addr[s.ID] = s.Addr
		if s.State != proto.ServerUp {
			addr[s.ID] += " (" + proto.StateName(s.State) + ")"
		}
	}
	lay := client.AttrLayout(a)
	units := (int64(a.Size) + int64(a.StripeSize) - 1) / int64(a.StripeSize)
	n := int64(len(a.Servers))
	for k, id := range a.Servers {
		var which string
		switch mine := (units - int64(k) + n - 1) / n; {
		case mine <= 0:
			which = "no units yet"
		case mine == 1:
			which = fmt.Sprintf("unit %d", k)
		default:
			which = fmt.Sprintf("units %d, %d, ... every %d (%d units)", k, int64(k)+n, n, mine)
		}
		fmt.Printf("  stripe %d: server %d at %s, object %d bytes, %s\n", k, id, addr[id], lay.ObjectSize(k, int64(a.Size)), which)
		if lay.Copies() > 1 && lay.Validate() == nil {
			for c, cid := range lay.Column(k)[1:] {
				fmt.Printf("    copy %d: server %d at %s\n", c+2, cid, addr[cid])
			}
		}
	}
	return nil
}

func putFile(ctx context.Context, cl *client.Client, local, remote string, o client.CreateOpts, force bool) error {
	src, size, mode := os.Stdin, int64(-1), uint32(0o644)
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return &fs.PathError{Op: "put", Path: local, Err: fmt.Errorf("is a directory: fs put copies one file; for a tree: tar c %s | corral fs put - %s.tar, or corral mount and cp -r", local, path.Join("/"+remote, filepath.Base(local)))}
		}
		src, size, mode = f, fi.Size(), uint32(fi.Mode().Perm())
	}
	a, err := cl.Stat(ctx, remote)
	switch {
	case err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		if local == "-" {
			return &fs.PathError{Op: "put", Path: remote, Err: errors.New("is a directory: give the name of the file to write standard input to")}
		}
		remote = path.Join("/"+remote, filepath.Base(local))
	case strings.HasSuffix(remote, "/"):
		if err == nil {
			err = &fs.PathError{Op: "put", Path: remote, Err: syscall.ENOTDIR}
		}
		return err
	}
	// The directory it goes in: a missing one is said with what to run
	// (the write would say only "no such file or directory").
	if dir := path.Dir("/" + remote); dir != "/" {
		switch a, err := cl.Stat(ctx, dir); {
		case errors.Is(err, fs.ErrNotExist):
			return &fs.PathError{Op: "put", Path: remote, Err: fmt.Errorf("no such directory %s (corral fs mkdir -p %s first)", dir, dir)}
		case err == nil && a.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			return &fs.PathError{Op: "put", Path: remote, Err: fmt.Errorf("%s is not a directory", dir)}
		}
	}
	// Whatever holds the name counts, a dangling symbolic link too: the
	// rename below would replace it.
	switch a, err := cl.Lstat(ctx, remote); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case a.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		return &fs.PathError{Op: "put", Path: remote, Err: syscall.EISDIR}
	case !force:
		return errPutExists(remote)
	}
	// Checked again at the end, atomically: a file created at remote while
	// the bytes went up is not replaced either.
	o.Excl = !force
	// WriteFile writes under a temporary name, renamed over remote when on
	// disk: a failed put leaves neither a partial file nor its objects.
	bar := newProgress("put "+filepath.Base(local), size)
	var r io.Reader = src
	if local == "-" {
		r = ctxReader(ctx, src)
	}
	if err := cl.WriteFile(ctx, remote, r, mode, o, bar.set); err != nil {
		if !force && errors.Is(err, fs.ErrExist) {
			return errPutExists(remote)
		}
		return err
	}
	bar.done()
	return nil
}

// getFile copies remote to local ("-": standard output). A regular local
// file is replaced whole (safefile: a temporary file beside it, synced and
// renamed at the end), so a get that fails midway leaves the old file as it
// was; a replaced file keeps its mode and owner. A device or pipe (say
// /dev/null) is written in place.
func getFile(ctx context.Context, cl *client.Client, remote, local string) error {
	f, err := cl.Open(ctx, remote)
	if err != nil {
		return err
	}
	var dst io.Writer
	var out *safefile.File
	if local == "-" {
		dst = os.Stdout
	} else {
		if fi, err := os.Stat(local); err == nil && fi.IsDir() {
			local = filepath.Join(local, path.Base("/"+remote))
		}
		// Through a symbolic link to the file it names, as cp does.
		if t, err := filepath.EvalSymlinks(local); err == nil {
			local = t
		}
		switch fi, err := os.Stat(local); {
		case err == nil && !fi.Mode().IsRegular():
			w, err := os.OpenFile(local, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			defer w.Close()
			dst = w
		case err == nil:
			if out, err = safefile.Create(local, fi.Mode().Perm()); err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
				out.File.Chown(int(st.Uid), int(st.Gid)) // root replacing a user's file; best effort
			}
		case errors.Is(err, fs.ErrNotExist):
			if out, err = safefile.Create(local, 0o666&^umask()); err != nil {
				return err
			}
		default:
			return err
		}
		if out != nil {
			defer out.Abort() // nothing once committed
			dst = out
		}
	}
	size := f.Size()
	var bar *progress
	if local != "-" || !isTTYFile(os.Stdout) { // not over the data on the same terminal
		bar = newProgress("get "+path.Base("/"+remote), size)
	}
	buf := make([]byte, transferBuf)
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf, off)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			off += int64(n)
			bar.set(off)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return &fs.PathError{Op: "read", Path: remote, Err: err}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
	}
	bar.done()
	return nil
}

// umask is the process's file mode creation mask, read from /proc (setting
// it to read it would race with other goroutines creating files); 022
// when it cannot be read.
func umask() fs.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Umask:"); ok {
				var m uint32
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%o", &m); err == nil {
					return fs.FileMode(m) & 0o777
				}
			}
		}
	}
	return 0o022
}

func errPutExists(remote string) error {
	return &fs.PathError{Op: "put", Path: remote, Err: errors.New("file exists (use --force to replace it)")}
}
