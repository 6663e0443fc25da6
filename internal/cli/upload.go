package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/spf13/cobra"
)

// uploadCmd is `corral mgmt upload` (a subcommand of mgmt): a webmaster's
// upload into their domain through the station.
func uploadCmd() *cobra.Command {
	var (
		st     roStation
		to     string
		remove bool
	)
	cmd := &cobra.Command{
		Use:   "upload DOMAIN LOCAL...",
		Short: "upload files into your domain's directory through the station",
		Long: `Upload puts local files into a virtual domain's directory in the file system,
through the station: a webmaster needs only their API token (corral mgmt
login), no file-system credential, and may write only to their own domains
(an admin to any). Each file is written whole or not at all.

A LOCAL file goes to --to/NAME; a LOCAL directory's contents go under --to,
keeping their paths (like 'rsync -r DIR/'). --to is a directory inside the
domain (default its top). With --rm, the LOCAL arguments are instead paths
inside the domain to delete (a directory with everything in it).

One line per file on standard error. Exit status: 0 all uploaded, 1 on the
first error (named with its file).`,
		Example: `  corral mgmt upload www.example.test index.html style.css
  corral mgmt upload www.example.test ./site            # the site's tree at the top
  corral mgmt upload www.example.test ./img --to img
  corral mgmt upload www.example.test --rm old/ draft.html`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := st.client()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			domain := args[0]
			if domain == "" || strings.ContainsAny(domain, "/\\") {
				return usageError{fmt.Errorf("domain %q: give the domain's name, such as www.example.test", domain)}
			}
			if remove {
				for _, p := range args[1:] {
					if err := c.Do(ctx, "DELETE", filesRoute(domain, path.Join(to, p)), nil, nil); err != nil {
						return fmt.Errorf("%s/%s: %w", domain, path.Join(to, p), err)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "deleted %s/%s\n", domain, path.Join(to, p))
				}
				return nil
			}
			return uploadTree(ctx, c, cmd.ErrOrStderr(), domain, to, args[1:])
		},
	}
	st.flags(cmd)
	cmd.Flags().StringVar(&to, "to", "", "directory inside the domain to upload into (default its top)")
	cmd.Flags().BoolVar(&remove, "rm", false, "delete the given paths inside the domain instead")
	return cmd
}

// filesRoute is RouteFiles+DOMAIN/PATH with every segment escaped.
func filesRoute(domain, p string) string {
	var segs []string
	for _, s := range strings.Split(strings.Trim(p, "/"), "/") {
		segs = append(segs, url.PathEscape(s))
	}
	return api.RouteFiles + url.PathEscape(domain) + "/" + strings.Join(segs, "/")
}

// uploadTree uploads each local file or directory tree.
func uploadTree(ctx context.Context, c *api.Client, log io.Writer, domain, to string, locals []string) error {
	type job struct{ local, remote string }
	var jobs []job
	for _, l := range locals {
		fi, err := os.Stat(l)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			jobs = append(jobs, job{l, path.Join(to, filepath.Base(l))})
			continue
		}
		err = filepath.WalkDir(l, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			rel, err := filepath.Rel(l, p)
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 {
				if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
					fmt.Fprintf(log, "skipped %s: a link to no regular file\n", p)
					return nil
				}
			} else if !d.Type().IsRegular() {
				fmt.Fprintf(log, "skipped %s: not a regular file\n", p)
				return nil
			}
			jobs = append(jobs, job{p, path.Join(to, filepath.ToSlash(rel))})
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(jobs) == 0 {
		return errors.New("nothing to upload")
	}
	var total int64
	for i, j := range jobs {
		var fr api.FileReply
		if err := c.DoFile(ctx, "PUT", filesRoute(domain, j.remote), j.local, &fr); err != nil {
			return fmt.Errorf("%s -> %s/%s: %w", j.local, domain, j.remote, err)
		}
		total += fr.Size
		fmt.Fprintf(log, "[%d/%d] %s -> %s/%s (%d bytes)\n", i+1, len(jobs), j.local, domain, fr.Path, fr.Size)
	}
	fmt.Fprintf(log, "uploaded %d files, %d bytes, to %s\n", len(jobs), total, domain)
	return nil
}
