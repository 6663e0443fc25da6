package cli

import (
	"fmt"
	"os"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/meta"
	"github.com/spf13/cobra"
)

func metaCmd() *cobra.Command {
	var listen, data, stripe string
	var sf secFlags
	var lf limitFlags
	var reserve float64
	var httpFlag string
	c := &cobra.Command{
		Use:   "meta --listen HOST:PORT --data DIR",
		Short: "Run the file system's metadata server (name space, attributes, layouts)",
		Long: `Run the metadata server: directories, files, symbolic links, their attributes
and each file's layout, in an embedded store (DIR/meta.db, bbolt). Every
acknowledged change is on disk before the reply leaves.

I/O servers register with it; clients ask it once per file, then talk to the
I/O servers directly.

At its first start it writes the cluster secret to DIR/cluster.secret (mode
0600): iods, mounts, nodes and 'corral fs' must be given it (--secret-file or
CORRAL_SECRET_FILE), or the read-only credential derived from it ('corral fs
secret --read-only'), to be served.

New files go only to I/O servers heard from since it started whose free
space is above --reserve percent of their capacity. Its first start makes the
cluster ID that every I/O server's data directory records, so a directory of
another file system is refused.`,
		Example: "  corral meta --listen 127.0.0.1:7400 --data /var/lib/corral/meta",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := parseSize(stripe)
			if err != nil {
				return err
			}
			if err := layout.ValidStripeSize(size); err != nil {
				return err
			}
			if reserve < 0 || reserve >= 100 {
				return fmt.Errorf("--reserve %g: want a percentage in [0, 100)", reserve)
			}
			if reserve == 0 {
				reserve = -1 // meta.Config: 0 means the default, negative none
			}
			if reserve == 0 {
				reserve = -1 // Config's 0 means the default
			}
			if err := os.MkdirAll(data, 0o755); err != nil {
				return err
			}
			sec, err := sf.security(true)
			if err != nil {
				return err
			}
			lim, err := lf.limits()
			if err != nil {
				return err
			}
			httpListen, httpDerived, err := httpAddr(httpFlag, listen, metaHTTPOffset)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			return meta.Run(ctx, listen, meta.Config{Data: data, DefaultStripeSize: uint32(size), Log: daemonLog("meta"),
				Security: sec, Limits: lim, Reserve: reserve, HTTP: httpListen, HTTPDerived: httpDerived},
				func(a string) { ready("meta", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", defaultMeta, "address to serve on")
	c.Flags().StringVar(&data, "data", "corral-data/meta", "directory for the metadata store")
	c.Flags().StringVar(&stripe, "default-stripe-size", "64K", "stripe size of files whose directories set none")
	sf.add(c.Flags(), false)
	lf.add(c.Flags(), "64M")
	c.Flags().Float64Var(&reserve, "reserve", meta.DefaultReserve, "percent of each I/O server's capacity kept free: below it a server gets no new files")
	addHTTPFlag(c.Flags(), &httpFlag, "the host of --listen, its port + 2000")
	return c
}
