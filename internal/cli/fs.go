package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

// transferBuf is the size of one read or write of put/get: several stripes,
// so each call feeds every I/O server.
const transferBuf = 8 << 20

func fsCmd() *cobra.Command {
	var metaAddr string
	c := &cobra.Command{
		Use:   "fs [--meta HOST:PORT] COMMAND",
		Short: "Use the parallel file system from the command line",
		Long: `Commands on the parallel file system, like the coreutils of the same names.
Paths inside the file system are absolute (a missing leading / is added).
The metadata server comes from --meta or the CORRAL_META environment
variable (default 127.0.0.1:7400, where corral up runs it). Sizes accept units: 4096, 64K, 1M, 1G.`,
		Example: `  export CORRAL_META=127.0.0.1:7400
  corral fs mkdir -p /www/example.org
  corral fs put index.html /www/example.org/
  corral fs ls -l /www/example.org
  corral fs stat /www/example.org/index.html
  corral fs layout set /big --stripe-size 1M --stripe-count 3`,
	}
	c.PersistentFlags().StringVar(&metaAddr, "meta", metaFlagDefault(), "metadata server address (env CORRAL_META)")
	var sf secFlags
	sf.add(c.PersistentFlags(), true)
	// run gives a subcommand a client and turns its error into coreutils-style
	// output and exit status 1.
	run := func(f func(ctx context.Context, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext()
			defer stop()
			sec, err := sf.security(false)
			if err != nil {
				fmt.Fprintf(os.Stderr, "corral fs %s: %v\n", cmd.Name(), err)
				return exitError{1}
			}
			cl := client.New(metaAddr, client.WithSecurity(sec))
			cl.Uid, cl.Gid = uint32(os.Getuid()), uint32(os.Getgid())
			defer cl.Close()
			if err := f(ctx, cl, args); err != nil {
				fmt.Fprintf(os.Stderr, "corral fs %s: %s\n", cmd.Name(), errText(err))
				return exitError{1}
			}
			return nil
		}
	}
	var parents bool
	mkdir := &cobra.Command{Use: "mkdir [-p] PATH...", Short: "Make directories", Args: cobra.MinimumNArgs(1),
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

	var long bool
	ls := &cobra.Command{Use: "ls [-l] [PATH...]", Short: "List directory contents", Args: cobra.ArbitraryArgs,
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
				if err := list(ctx, cl, p, long); err != nil {
					return err
				}
			}
			return nil
		})}
	ls.Flags().BoolVarP(&long, "long", "l", false, "long listing: mode, links, owner, size, time")

	stat := &cobra.Command{Use: "stat PATH...", Short: "Show attributes and layout: where each stripe lives", Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				if err := statPath(ctx, cl, p); err != nil {
					return err
				}
			}
			return nil
		})}

	var putSize, putCount string
	put := &cobra.Command{Use: "put LOCAL REMOTE", Short: "Copy a local file into the file system", Args: cobra.ExactArgs(2),
		Long: `Copy LOCAL into the file system as REMOTE (or into REMOTE when it is a
directory). The new file takes its directory's layout unless --stripe-size or
--stripe-count say otherwise (--stripe-count all: every usable I/O server).
The copy is written under a temporary name next to REMOTE and renamed over
it once on disk, so REMOTE is either the old file or the whole new one; a
put that fails leaves nothing behind.`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			var o client.CreateOpts
			if putSize != "" {
				n, err := parseSize(putSize)
				if err != nil {
					return err
				}
				if err := layout.ValidStripeSize(n); err != nil {
					return err
				}
				o.StripeSize = uint32(n)
			}
			if putCount == "all" {
				o.StripeCount = proto.AllServers
			} else if putCount != "" {
				n, err := parseCount(putCount)
				if err != nil {
					return err
				}
				o.StripeCount = n
			}
			return putFile(ctx, cl, args[0], args[1], o)
		})}
	put.Flags().StringVar(&putSize, "stripe-size", "", "stripe size of the new file (e.g. 64K, 1M)")
	put.Flags().StringVar(&putCount, "stripe-count", "", "number of I/O servers the new file spans, or all")

	get := &cobra.Command{Use: "get REMOTE LOCAL", Short: "Copy a file out of the file system (LOCAL - is stdout)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return getFile(ctx, cl, args[0], args[1])
		})}

	cat := &cobra.Command{Use: "cat PATH...", Short: "Write files to standard output", Args: cobra.MinimumNArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			for _, p := range args {
				if err := getFile(ctx, cl, p, "-"); err != nil {
					return err
				}
			}
			return nil
		})}

	var recursive, force bool
	rm := &cobra.Command{Use: "rm [-r] [-f] PATH...", Short: "Remove files (and with -r, directories)", Args: cobra.MinimumNArgs(1),
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

	mv := &cobra.Command{Use: "mv SOURCE DEST", Short: "Move or rename (into DEST when it is a directory)", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return cl.RenamePath(ctx, args[0], args[1], true)
		})}

	ln := &cobra.Command{Use: "ln -s TARGET LINK", Short: "Make a symbolic link", Args: cobra.ExactArgs(2),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			return cl.SymlinkPath(ctx, args[0], args[1])
		})}
	ln.Flags().BoolP("symbolic", "s", true, "symbolic link (the only kind ln makes here)")

	servers := &cobra.Command{Use: "servers [replace ID]", Short: "List the I/O servers, their state and space", Args: cobra.NoArgs,
		Long: `List the I/O servers the metadata server knows, with their state:
  up         heard from lately, free space above the reserve: gets new files
  full       up, but free space is below the reserve (corral meta --reserve)
  down       not heard from since the metadata server started, or lately
  lost       came back without its objects (empty or replaced disk): no new
             files, and reads of its data fail with EIO
  replacing  'servers replace' was run: the next empty disk at its address
             takes it over`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			ss, err := cl.Servers(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tCAPACITY\tFREE\tLAST SEEN")
			for _, s := range ss {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s ago\n", s.ID, s.Addr, proto.StateName(s.State), human(int64(s.Capacity)), human(int64(s.Free)),
					time.Since(time.Unix(0, s.Seen)).Round(time.Second))
			}
			return tw.Flush()
		})}
	servers.AddCommand(replaceCmd(run))

	c.AddCommand(mkdir, ls, stat, put, get, cat, rm, mv, ln, servers, layoutCmd(run), gcCmd(run), secretCmd(&sf))
	return c
}

func parseCount(s string) (uint32, error) {
	var n uint32
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 1 || n > layout.MaxServers || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("invalid stripe count %q (want 1..%d, or all)", s, layout.MaxServers)
	}
	return n, nil
}

func layoutCmd(run func(func(context.Context, *client.Client, []string) error) func(*cobra.Command, []string) error) *cobra.Command {
	c := &cobra.Command{Use: "layout get|set PATH", Short: "Show or set a directory's striping policy"}
	get := &cobra.Command{Use: "get PATH", Short: "Show the layout of a file or the policy of a directory", Args: cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			a, err := cl.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Println(layoutText(a))
			return nil
		})}
	var size, count string
	set := &cobra.Command{Use: "set DIR --stripe-size SIZE --stripe-count N", Short: "Set the layout new files in DIR take", Args: cobra.ExactArgs(1),
		Long: `Set the striping policy of directory DIR: files created in it afterwards get
this stripe size and span this many I/O servers (0 or "all": every server).
An existing file's layout is fixed; to restripe it, copy it.`,
		RunE: run(func(ctx context.Context, cl *client.Client, args []string) error {
			a, err := cl.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			ss, sc := a.StripeSize, a.StripeCount
			if size != "" {
				n, err := parseSize(size)
				if err != nil {
					return err
				}
				if err := layout.ValidStripeSize(n); err != nil {
					return err
				}
				ss = uint32(n)
			}
			if count == "all" || count == "0" {
				sc = 0
			} else if count != "" {
				if sc, err = parseCount(count); err != nil {
					return err
				}
			}
			if size == "" && count == "" {
				return errors.New("nothing to set: give --stripe-size and/or --stripe-count")
			}
			a, err = cl.SetLayout(ctx, a.Ino, ss, sc)
			if err != nil {
				return &fs.PathError{Op: "layout", Path: args[0], Err: err}
			}
			fmt.Println(layoutText(a))
			return nil
		})}
	set.Flags().StringVar(&size, "stripe-size", "", "stripe size (e.g. 64K, 1M)")
	set.Flags().StringVar(&count, "stripe-count", "", "number of I/O servers per file, or all")
	c.AddCommand(get, set)
	return c
}

func layoutText(a proto.Attr) string {
	size := "default"
	if a.StripeSize != 0 {
		size = human(int64(a.StripeSize))
	}
	count := "all"
	if a.StripeCount != 0 {
		count = fmt.Sprint(a.StripeCount)
	}
	s := fmt.Sprintf("stripe-size %s stripe-count %s", size, count)
	if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
		s += fmt.Sprintf(" servers %v", a.Servers)
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

func list(ctx context.Context, cl *client.Client, p string, long bool) error {
	a, err := cl.Stat(ctx, p)
	if err != nil {
		return err
	}
	ents := []proto.Entry{{Name: p, Attr: a}}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		if ents, err = cl.Readdir(ctx, a.Ino); err != nil {
			return &fs.PathError{Op: "ls", Path: p, Err: err}
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
			e.Attr.Size, time.Unix(0, e.Attr.Mtime).Format("Jan _2 15:04"), name)
	}
	return tw.Flush()
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
	lay := layout.Layout{StripeSize: a.StripeSize, Servers: a.Servers}
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
	}
	return nil
}

func putFile(ctx context.Context, cl *client.Client, local, remote string, o client.CreateOpts) error {
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return &fs.PathError{Op: "put", Path: local, Err: syscall.EISDIR}
	}
	if a, err := cl.Stat(ctx, remote); err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		remote = path.Join("/"+remote, filepath.Base(local))
	} else if strings.HasSuffix(remote, "/") {
		if err == nil {
			err = &fs.PathError{Op: "put", Path: remote, Err: syscall.ENOTDIR}
		}
		return err
	}
	// WriteFile writes under a temporary name, renamed over remote when on
	// disk: a failed put leaves neither a partial file nor its objects.
	bar := newProgress("put "+filepath.Base(local), fi.Size())
	if err := cl.WriteFile(ctx, remote, src, uint32(fi.Mode().Perm()), o, bar.set); err != nil {
		return err
	}
	bar.done()
	return nil
}

func getFile(ctx context.Context, cl *client.Client, remote, local string) error {
	f, err := cl.Open(ctx, remote)
	if err != nil {
		return err
	}
	var dst *os.File
	if local == "-" {
		dst = os.Stdout
	} else {
		if fi, err := os.Stat(local); err == nil && fi.IsDir() {
			local = filepath.Join(local, path.Base("/"+remote))
		}
		if dst, err = os.Create(local); err != nil {
			return err
		}
		defer dst.Close()
	}
	size := f.Size()
	var bar *progress
	if dst != os.Stdout {
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
	if dst != os.Stdout {
		if err := dst.Close(); err != nil {
			return err
		}
	}
	bar.done()
	return nil
}

// progress draws a one-line progress bar when stdout is a terminal.
type progress struct {
	label      string
	total, cur int64
	start      time.Time
	last       time.Time
}

func newProgress(label string, total int64) *progress {
	fi, err := os.Stdout.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 || total < 8<<20 {
		return nil
	}
	return &progress{label: label, total: total, start: time.Now()}
}

func (p *progress) set(n int64) {
	if p == nil {
		return
	}
	p.cur = n
	if time.Since(p.last) < 200*time.Millisecond && n < p.total {
		return
	}
	p.last = time.Now()
	pct := float64(n) / float64(max(p.total, 1))
	w := 30
	fill := int(pct * float64(w))
	rate := float64(n) / max(time.Since(p.start).Seconds(), 1e-3)
	fmt.Printf("\r%s [%s%s] %3.0f%% %s/%s %s/s ", p.label, strings.Repeat("=", fill), strings.Repeat(" ", w-fill),
		pct*100, human(n), human(p.total), human(int64(rate)))
}

func (p *progress) done() {
	if p == nil {
		return
	}
	p.last = time.Time{}
	p.set(p.total)
	fmt.Println()
}
