package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/iod"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

func iodCmd() *cobra.Command {
	var listen, data, metaAddr, advertise string
	var sf secFlags
	var lf limitFlags
	var heartbeat, grace time.Duration
	var httpFlag, zone string
	var raid int
	var jf joinFlags
	c := &cobra.Command{
		Use:   "iod --listen HOST:PORT --data DIR --meta HOST:PORT[,HOST:PORT...]",
		Short: "Run an I/O server: stores file stripes on local disk",
		Long: `Run an I/O server. It registers with the metadata server, keeping its
identity (cluster ID and server ID) in DIR/identity and DIR/objects/STORE,
stores each file's stripe units as one object under DIR/objects, serves byte
ranges, and syncs to disk when a client fsyncs or closes. It re-registers
every few seconds, so it may start before or after the metadata server:
started first, it logs "waiting for meta at ADDR" and retries with backoff.
With several metadata members (--meta a,b,c) it registers with the leader
and follows it when leadership moves.

Started on an empty DIR at the address of a known server, or with its
objects directory wiped, it waits: the metadata server marks that server
lost until 'corral fs servers replace ID' accepts the empty disk. A DIR of
another cluster, or an address that belongs to another server, is refused
with an error. At start it removes objects older than --gc-grace that no
file references (left by crashes).

For replicated files it is the head of some columns: it applies a write,
forwards it to the other copies and reports those that missed it; and it
heals its own stale copies from current ones when meta asks. --zone names
its failure domain (a rack, a room): meta puts the copies of a file in
different zones.

It needs the cluster secret (--secret-file META_DATA/cluster.secret): to
register, and to check its clients.

Several data directories (--data A,B,C, one per disk) need --raid: 0 stripes
each object's 64 KiB blocks over them (a missing directory refuses to
start), 1 mirrors every object in each (a missing one runs degraded and is
copied back when it returns). The identity and LOCK live in the first.

With --join it joins a management station with the token (once; the
credential is kept in --state, default DIR-agent beside the first --data): the
join hands over the cluster secret and the metadata members (no --secret-file
or --meta needed), and the station shows it among the members.`,
		Example: `  corral iod --listen 127.0.0.11:7410 --data /var/lib/corral/iod1 --meta 127.0.0.1:7400
  corral iod --listen 127.0.0.11:7410 --data /var/lib/corral/iod1 --join https://127.0.0.1:7600 --token-file iod.token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dirs := strings.Split(data, ",")
			raidSet := cmd.Flags().Changed("raid")
			switch {
			case slices.Contains(dirs, ""):
				return usageError{fmt.Errorf("--data %q: an empty directory name in the list", data)}
			case raidSet && raid != iod.RAID0 && raid != iod.RAID1:
				return usageError{fmt.Errorf("--raid %d: want 0 (striping) or 1 (mirroring)", raid)}
			case raidSet && len(dirs) == 1:
				return usageError{fmt.Errorf("--raid %d needs several --data directories (comma-separated, one per disk), got one: %s", raid, data)}
			case !raidSet && len(dirs) > 1:
				return usageError{fmt.Errorf("--data with %d directories needs --raid 0 (striping) or --raid 1 (mirroring)", len(dirs))}
			}
			if err := os.MkdirAll(dirs[0], 0o700); err != nil {
				return err
			}
			lim, err := lf.limits()
			if err != nil {
				return err
			}
			httpListen, httpDerived, err := httpAddr(httpFlag, listen, iodHTTPOffset)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			var sec proto.Security
			if jf.enabled() {
				a, reply, err := memberJoin(ctx, &jf, api.RoleIOD, cmp.Or(advertise, listen), httpListen, dirs[0], daemonLog("iod"))
				if err != nil {
					return err
				}
				if !cmd.Flags().Changed("meta") && len(reply.Meta) > 0 {
					metaAddr = strings.Join(reply.Meta, ",")
				}
				if !cmd.Flags().Changed("secret-file") {
					sf.secretFile = "" // not the default file: the join's secret
				}
				if sec, err = sf.security(!cmd.Flags().Changed("secret-file")); err != nil {
					return err
				}
				if !cmd.Flags().Changed("secret-file") {
					if sec.Cred, _, err = joinSecret(a.State(), reply.Secret); err != nil {
						return err
					}
				}
				if err := sf.joinedCert(&sec, a.State()); err != nil {
					return err
				}
				actx, cancel := context.WithCancel(ctx)
				wait := runAgent(actx, a)
				defer func() { cancel(); wait() }()
			} else if sec, err = sf.security(false); err != nil {
				return err
			}
			return iod.Run(ctx, listen, iod.Config{Data: data, Meta: metaAddr, Advertise: advertise, Log: daemonLog("iod"),
				Heartbeat: heartbeat, SweepGrace: grace, Security: sec, Limits: lim, HTTP: httpListen, HTTPDerived: httpDerived, Zone: zone, RAID: raid},
				func(a string, _ uint32) { ready("iod", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:7410", "address to serve on")
	c.Flags().StringVar(&data, "data", "corral-data/iod", "directory for stripe objects, or several comma-separated (one per disk, with --raid)")
	c.Flags().IntVar(&raid, "raid", -1, "with several --data directories: 0 stripes blocks over them, 1 mirrors objects in each")
	c.Flags().StringVar(&metaAddr, "meta", metaFlagDefault(), metaFlagHelp)
	c.Flags().StringVar(&advertise, "advertise", "", "address clients should use (default: the listening address)")
	sf.add(c.Flags(), true)
	lf.add(c.Flags(), "256M")
	c.Flags().DurationVar(&heartbeat, "heartbeat", 0, fmt.Sprintf("interval of re-registration, which carries free space (0: %v, or %v with several metadata members, so that a new leader hears from this server soon)", iod.Heartbeat, iod.ReplicatedHeartbeat))
	c.Flags().DurationVar(&grace, "gc-grace", iod.DefaultGrace, "start-up sweep: remove unreferenced objects older than this (negative: no sweep)")
	c.Flags().StringVar(&zone, "zone", "", "failure domain of this server (rack, room): the copies of a replicated file go to different zones")
	addHTTPFlag(c.Flags(), &httpFlag, "the host of --listen, its port + 2000")
	jf.add(c.Flags(), api.RoleIOD, "token-file")
	return c
}

// memberJoin joins the station for a role whose Apply only accepts
// (iod; meta sets its own): named role-ADDR by default, state beside
// its data directory.
func memberJoin(ctx context.Context, jf *joinFlags, role, addr, httpListen, data string, log *slog.Logger) (*agent.Agent, *api.JoinReply, error) {
	name := role + "-" + addr
	o, err := jf.options(role, name, filepath.Clean(data)+"-agent", log)
	if err != nil {
		return nil, nil, err
	}
	o.Addr = addr
	if httpListen != "" {
		o.Metrics = "http://" + httpListen + "/metrics"
	}
	return agent.Join(ctx, o)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
