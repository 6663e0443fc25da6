package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/fusefs"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

func mountCmd() *cobra.Command {
	var metaAddr string
	var readOnly, unmount, debug bool
	var attrTimeout time.Duration
	var httpFlag string
	var sf secFlags
	c := &cobra.Command{
		Use:   "mount [--meta HOST:PORT[,HOST:PORT...]] [--read-only] MOUNTPOINT",
		Short: "Mount the file system with FUSE (runs until unmounted or Ctrl-C)",
		Long: `Mount the parallel file system at MOUNTPOINT so that ordinary tools work on
it. The command stays in the foreground serving the mount; Ctrl-C or SIGTERM
unmounts. A mount whose process was killed leaves a dead mount point: clean it
with 'corral mount --unmount MOUNTPOINT'. Started before the metadata server,
it waits for it ("waiting for meta at ADDR"), retrying with backoff. --meta
lists the metadata members; requests follow whichever leads.

Consistency is close-to-open: what one client wrote and closed, another sees
when it next opens the file. As root the mount is made directly (no
fusermount) and open to every user, with permissions checked by the kernel;
otherwise fusermount3 (Debian package fuse3) is needed.`,
		Example: `  mkdir -p /mnt/corral
  corral mount --meta 127.0.0.1:7400,127.0.0.1:7401,127.0.0.1:7402 /mnt/corral
  corral mount --unmount /mnt/corral`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if unmount {
				return forceUnmount(dir)
			}
			// statfs too: the kernel may answer a stat of a dead mount
			// from its cache (attributes are kept a minute), never statfs.
			var sfs syscall.Statfs_t
			if err := syscall.Statfs(dir, &sfs); errors.Is(err, syscall.ENOTCONN) {
				return fmt.Errorf("%s: a dead mount is still there; run 'corral mount --unmount %s' first", dir, dir)
			}
			if fi, err := os.Stat(dir); err != nil {
				if errors.Is(err, syscall.ENOTCONN) {
					return fmt.Errorf("%s: a dead mount is still there; run 'corral mount --unmount %s' first", dir, dir)
				}
				return err
			} else if !fi.IsDir() {
				return fmt.Errorf("%s: not a directory", dir)
			}
			sec, err := sf.security(false)
			if err != nil {
				return err
			}
			if sec.Cred.Kind() == proto.KindReadOnly {
				readOnly = true // the servers would refuse every change anyway
			}
			// The client caches metadata, kept coherent by meta (docs/meta.md,
			// "Client cache"), and the kernel caches too, dropped by the same
			// callbacks (docs/mount.md, "Kernel cache").
			cl := client.New(metaAddr, client.WithSecurity(sec), client.WithCache())
			defer cl.Close()
			ctx, stop := signalContext()
			defer stop()
			log := daemonLog("mount")
			if err := waitForMeta(ctx, metaAddr, log, func(ctx context.Context) error { _, err := cl.Statfs(ctx); return err }); err != nil {
				if ctx.Err() != nil {
					return nil // interrupted while waiting
				}
				return fmt.Errorf("metadata server: %w", err)
			}
			metrics, mounted, err := mountObs(ctx, httpFlag, dir, cl, log)
			if err != nil {
				return err
			}
			srv, err := fusefs.Mount(dir, cl, fusefs.Options{ReadOnly: readOnly, AttrTimeout: attrTimeout, Debug: debug, Log: log, Metrics: metrics})
			if err != nil {
				return fmt.Errorf("mount %s: %w", dir, err)
			}
			mounted(true)
			ready("mount", dir)
			done := make(chan struct{})
			go func() { srv.Wait(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
			}
			mounted(false) // no health check may statfs the mount from here on
			if err := srv.Unmount(); err != nil {
				// Busy (a shell sits in it): detach it lazily.
				fmt.Fprintf(os.Stderr, "corral mount: %v; detaching lazily\n", err)
				if err := forceUnmount(dir); err != nil {
					return err
				}
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
			return nil
		},
	}
	c.Flags().StringVar(&metaAddr, "meta", metaClientDefault(), metaClientHelp)
	c.Flags().BoolVar(&readOnly, "read-only", false, "mount read-only")
	c.Flags().BoolVar(&unmount, "unmount", false, "unmount MOUNTPOINT (also a dead one left by a killed mount) and exit")
	c.Flags().DurationVar(&attrTimeout, "attr-timeout", 0, "how long the kernel may cache what no callback drops: absent names, and answers given while the client cache's lease is not running (0: ask every time)")
	c.Flags().BoolVar(&debug, "debug", false, "log every FUSE request")
	sf.client = true
	sf.add(c.Flags(), true)
	c.Flags().StringVar(&httpFlag, "http", "", "address of /metrics and /healthz, e.g. 127.0.0.1:9500 (default: none)")
	return c
}

// forceUnmount detaches a mount, live or dead.
func forceUnmount(dir string) error {
	if syscall.Geteuid() == 0 {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			// The kernel's EINVAL: nothing is mounted there (or it is not
			// a mount point): say that, and what is.
			if errors.Is(err, syscall.EINVAL) {
				if _, serr := os.Lstat(dir); serr != nil {
					return fmt.Errorf("unmount %s: %v", dir, serr)
				}
				return fmt.Errorf("unmount %s: nothing is mounted there ('grep fuse /proc/mounts' lists the mounts)", dir)
			}
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		return nil
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(prog); err == nil {
			out, err := exec.Command(p, "-u", "-z", dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s -u %s: %v: %s", prog, dir, err, out)
			}
			return nil
		}
	}
	return errors.New("unmount needs root or fusermount3 (apt-get install fuse3)")
}

// waitForMeta calls probe until the metadata server at addr answers,
// logging "waiting for meta at ADDR" once and retrying quietly with backoff
// (up to 3 s). It returns probe's error only when it is not about reaching
// meta, or ctx's when interrupted.
func waitForMeta(ctx context.Context, addr string, log *slog.Logger, probe func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for logged := false; ; {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := probe(cctx)
		cancel()
		if err == nil {
			if logged {
				log.Info("metadata server reachable", "meta", addr)
			}
			return nil
		}
		if !errors.Is(err, proto.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if !logged {
			log.Warn("waiting for meta at "+addr, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 3*time.Second)
	}
}
