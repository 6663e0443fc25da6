package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/node"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

func directorCmd() *cobra.Command {
	var cfgPath, secretFile string
	c := &cobra.Command{
		Use:   "director --config FILE",
		Short: "Run the director: virtual services spread over real servers",
		Long: `Run the director. FILE describes the virtual services (VIP, protocol,
dataplane l4, l7 or xdp, scheduler, persistence, health check, real servers); see
docs/director.md for the language. The director reloads FILE on SIGHUP and
when it changes, applying it live; a bad file is rejected with its line and
the running configuration stays. The admin API (JSON and /metrics) listens on
the configured loopback address; 'corral ctl' talks to it.`,
		Example: "  corral director --config /etc/corral/director.conf",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretFile != "" {
				// The director's file-system client (file sizes for
				// scheduling) takes its credential from the environment.
				if _, err := proto.LoadCredential(secretFile); err != nil {
					return err
				}
				os.Setenv(proto.SecretEnv, secretFile)
			}
			ctx, stop := signalContext()
			defer stop()
			return director.Run(ctx, cfgPath, daemonLog("director"), func(a string) { ready("director", a) })
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "director.conf", "configuration file")
	c.Flags().StringVar(&secretFile, "secret-file", os.Getenv(proto.SecretEnv), "file-system credential for the config's meta (the read-only one suffices; env "+proto.SecretEnv+")")
	return c
}

func nodeCmd() *cobra.Command {
	var listen, metaAddr, docroot, defDomain, drVIP, adminAddr string
	var writeTimeout, idleTimeout time.Duration
	var accessLog, healthzOnService bool
	var sf secFlags
	c := &cobra.Command{
		Use:   "node --listen HOST:PORT --meta HOST:PORT",
		Short: "Run a cluster node: serves virtual domains from the file system over HTTP",
		Long: `Run a cluster node's web server. A request for http://HOST/PATH is answered
from DOCROOT/HOST/PATH in the parallel file system (read-only; a path ending
in / serves index.html; no directory listings). GET and HEAD, Range,
ETag/Last-Modified and conditional requests. Symbolic links resolve inside
the domain's directory only; a URL path over 4096 bytes is 414.

The internal endpoints are on a separate admin listener (--admin, default
the --listen host with port 9080), never on the service port: /healthz
answers "ok" while the node can serve content (503 with the reason when the
file system is unreachable); /load reports active requests, bytes in flight
and the load average as JSON.

A client that stops reading is disconnected after --write-timeout without
progress; a kept-alive connection without a request after --idle-timeout.

With --dr VIP the node is a real server behind an XDP director doing direct
routing: it puts VIP on its loopback, stops answering ARP for it
(arp_ignore=1, arp_announce=2) and serves VIP on the listen port too, so it
answers clients straight back; all undone on exit.`,
		Example: `  corral node --listen 127.0.0.21:8080 --meta 127.0.0.10:7400 --default-domain www.example.test
  curl http://127.0.0.21:9080/healthz     # the admin listener: ok, or 503 and why
  corral node --listen 127.0.0.21:8080 --admin 127.0.0.1:9121 --write-timeout 30s
  corral node --listen 10.77.0.21:80 --dr 10.77.0.100 --meta 10.77.0.10:7400`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			cfg := node.Config{Meta: metaAddr, Docroot: docroot, DefaultDomain: defDomain, Log: daemonLog("node"),
				Admin: adminAddr, WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, HealthzOnService: healthzOnService}
			if writeTimeout <= 0 || idleTimeout <= 0 {
				return fmt.Errorf("--write-timeout and --idle-timeout must be positive (got %v, %v)", writeTimeout, idleTimeout)
			}
			var err error
			if cfg.Security, err = sf.security(false); err != nil {
				return err
			}
			if accessLog {
				cfg.AccessLog = os.Stderr
			}
			if drVIP != "" {
				a, err := netip.ParseAddr(drVIP)
				if err != nil {
					return fmt.Errorf("--dr %q: not an IP address", drVIP)
				}
				cfg.DRVIP = a
			}
			s := node.New(cfg)
			defer s.Close()
			// More admin endpoints (e.g. /metrics) go on s.AdminMux() here.
			return s.Serve(ctx, listen, func(a string) { ready("node", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.21:8080", "address to serve HTTP on")
	c.Flags().StringVar(&metaAddr, "meta", envOr("CORRAL_META", "127.0.0.10:7400"), "metadata server address (env CORRAL_META)")
	c.Flags().StringVar(&adminAddr, "admin", "", "address of the admin endpoints /healthz and /load (default: the --listen host, port 9080)")
	c.Flags().BoolVar(&healthzOnService, "healthz-on-service", false, "also answer /healthz on the service port (then reachable through a VIP; for checkers that cannot reach --admin)")
	c.Flags().DurationVar(&writeTimeout, "write-timeout", node.DefaultWriteTimeout, "disconnect a client that accepts no byte of a response for this long")
	c.Flags().DurationVar(&idleTimeout, "idle-timeout", node.DefaultIdleTimeout, "disconnect a kept-alive connection without a request for this long (also bounds reading a request header)")
	c.Flags().StringVar(&docroot, "docroot", "/www", "directory of the virtual domains in the file system")
	c.Flags().StringVar(&defDomain, "default-domain", "", "domain for requests whose Host has no directory (e.g. a bare IP)")
	c.Flags().BoolVar(&accessLog, "access-log", true, "write an access log line per request to stderr")
	sf.add(c.Flags(), true)
	c.Flags().StringVar(&drVIP, "dr", "", "be a direct-routing real server for this VIP (dataplane xdp): VIP on lo, arp_ignore=1, arp_announce=2 (root)")
	return c
}

func ctlCmd() *cobra.Command {
	var admin string
	c := &cobra.Command{
		Use:   "ctl COMMAND",
		Short: "Look at and steer a running director (like ipvsadm)",
		Example: `  corral ctl services
  corral ctl drain www 127.0.0.21:8080
  corral ctl weight www 127.0.0.22:8080 3
  corral ctl enable www 127.0.0.21:8080`,
	}
	c.PersistentFlags().StringVar(&admin, "admin", envOr("CORRAL_ADMIN", "127.0.0.1:7500"), "director admin API address (env CORRAL_ADMIN)")
	cl := func() director.Client { return director.Client{Base: "http://" + admin} }
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}
	services := &cobra.Command{Use: "services", Short: "The live table: services, real servers, weights, health, connections, bytes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cx, cancel := ctx()
			defer cancel()
			st, err := cl().Services(cx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			var notes []string // below the table: one line per xdp service
			fmt.Fprintln(tw, "Prot\tLocalAddress:Port / RemoteAddress:Port\tScheduler / Weight\tHealth\tActiveConn\tInActConn\tConns\tRequests\tInBytes\tOutBytes")
			for _, s := range st {
				fmt.Fprintf(tw, "%s\t%s %s\t%s %s\t\t\t\t%d\t\t\t\n", s.Protocol, s.Name, s.VIP, s.Scheduler, s.Dataplane, s.NewConns)
				if x := s.XDP; x != nil {
					// Direct routing: replies go from the servers to the
					// clients, so the director counts only what comes in.
					var drops []string
					for _, reason := range xdp.DropReasons {
						drops = append(drops, fmt.Sprintf("%s=%d", reason, x.Drops[reason]))
					}
					notes = append(notes, fmt.Sprintf("%s: xdp %s on %s, %d packets, %s in; drops %s", s.Name, x.Mode, x.Interface, x.Packets, human(int64(x.Bytes)), strings.Join(drops, " ")))
				}
				for _, r := range s.Servers {
					h := "up"
					if !r.Healthy {
						h = "DOWN"
						if r.LastError != "" {
							h += " (" + r.LastError + ")"
						}
					} else if r.Override == 0 {
						h = "drained"
					}
					w := strconv.Itoa(r.Weight)
					if r.Override >= 0 && r.Override != r.ConfigWeight {
						w += fmt.Sprintf(" (config %d)", r.ConfigWeight)
					}
					out := human(r.BytesOut)
					if s.XDP != nil {
						out = "-" // not seen: replies bypass the director
					}
					fmt.Fprintf(tw, "\t  -> %s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Addr, w, h, r.Active, r.Inactive, r.Connections, r.Requests, human(r.BytesIn), out)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Println(n)
			}
			return nil
		}}
	set := func(use, short, action string, nargs int) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(nargs),
			RunE: func(cmd *cobra.Command, args []string) error {
				w := 0
				if action == "weight" {
					var err error
					if w, err = strconv.Atoi(args[2]); err != nil || w < 0 || w > 65535 {
						return fmt.Errorf("weight %q: want 0..65535", args[2])
					}
				}
				cx, cancel := ctx()
				defer cancel()
				return cl().SetServer(cx, args[0], args[1], action, w)
			}}
	}
	c.AddCommand(services,
		set("drain SERVICE ADDR", "Stop sending new connections to a real server (existing ones finish)", "drain", 2),
		set("weight SERVICE ADDR N", "Set a real server's weight at run time", "weight", 3),
		set("enable SERVICE ADDR", "Undo drain/weight: back to the configured weight", "enable", 2))
	return c
}
