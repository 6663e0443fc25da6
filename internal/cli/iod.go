package cli

import (
	"os"

	"github.com/corral-cluster/corral/internal/pfs/iod"
	"github.com/spf13/cobra"
)

func iodCmd() *cobra.Command {
	var listen, data, metaAddr, advertise string
	var sf secFlags
	var lf limitFlags
	c := &cobra.Command{
		Use:   "iod --listen HOST:PORT --data DIR --meta HOST:PORT",
		Short: "Run an I/O server: stores file stripes on local disk",
		Long: `Run an I/O server. It registers with the metadata server (keeping the ID it
is given in DIR/id), stores each file's stripe units as one object under
DIR/objects, serves byte ranges, and syncs to disk when a client fsyncs or
closes. It re-registers every few seconds, so it may start before or after
the metadata server restarts. It needs the cluster secret (--secret-file
META_DATA/cluster.secret): to register, and to check its clients.`,
		Example: "  corral iod --listen 127.0.0.11:7410 --data /var/lib/corral/iod1 --meta 127.0.0.10:7400",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(data, 0o755); err != nil {
				return err
			}
			sec, err := sf.security(false)
			if err != nil {
				return err
			}
			lim, err := lf.limits()
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			return iod.Run(ctx, listen, iod.Config{Data: data, Meta: metaAddr, Advertise: advertise, Log: daemonLog("iod"),
				Security: sec, Limits: lim},
				func(a string, _ uint32) { ready("iod", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:7410", "address to serve on")
	c.Flags().StringVar(&data, "data", "corral-data/iod", "directory for stripe objects")
	c.Flags().StringVar(&metaAddr, "meta", envOr("CORRAL_META", "127.0.0.10:7400"), "metadata server address (env CORRAL_META)")
	c.Flags().StringVar(&advertise, "advertise", "", "address clients should use (default: the listening address)")
	sf.add(c.Flags(), true)
	lf.add(c.Flags(), "256M")
	return c
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
