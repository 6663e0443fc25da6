package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/node"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/spf13/cobra"
)

// fsSizes gives the director file sizes from the file system (mwlc).
type fsSizes struct{ c *client.Client }

func (f fsSizes) Size(ctx context.Context, p string) (int64, error) {
	a, err := f.c.Stat(ctx, p)
	return int64(a.Size), err
}
func (f fsSizes) Close() { f.c.Close() }

// configExit prints configuration errors (each file:line: field: why) as
// they are and makes them exit status 1, by their type; other errors go
// on to Main.
func configExit(err error) error {
	var ce config.Errors
	var one *config.Error
	if errors.As(err, &ce) || errors.As(err, &one) {
		fmt.Fprintln(os.Stderr, err)
		return exitError{1}
	}
	return err
}

func directorCmd() *cobra.Command {
	var cfgPath, secretFile, check string
	c := &cobra.Command{
		Use:   "director --config FILE",
		Short: "Run the director: virtual services spread over real servers",
		Long: `Run the director. FILE describes the virtual services (VIP, protocol,
dataplane l4, l7 or xdp, scheduler, persistence, health check, real servers); see
docs/director.md for the language. The director reloads FILE on SIGHUP and
when it changes, applying it all at once or not at all: a bad file is
rejected with every error's line and the running configuration stays
('corral ctl status' shows why). --check FILE validates a file and exits. The admin API (JSON and /metrics) listens on
the configured loopback address; 'corral ctl' talks to it.`,
		Example: `  corral director --config /etc/corral/director.conf
  corral director --check /etc/corral/director.conf.new   # validate only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check != "" {
				if err := director.Check(check); err != nil {
					return configExit(err)
				}
				fmt.Printf("%s: ok\n", check)
				return nil
			}
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
			return configExit(director.Run(ctx, cfgPath, daemonLog("director"), func(a string) { ready("director", a) },
				director.WithSizeSource(func(meta string) director.SizeSource { return fsSizes{client.New(meta)} })))
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "director.conf", "configuration file")
	c.Flags().StringVar(&check, "check", "", "validate this configuration file, print every error (file:line: field: why) and exit: 1 if any, else 0")
	c.Flags().StringVar(&secretFile, "secret-file", os.Getenv(proto.SecretEnv), "file-system credential for the config's meta (the read-only one suffices; env "+proto.SecretEnv+")")
	return c
}

func nodeCmd() *cobra.Command {
	var listen, metaAddr, docroot, defDomain, drVIP string
	var accessLog bool
	var sf secFlags
	c := &cobra.Command{
		Use:   "node --listen HOST:PORT --meta HOST:PORT",
		Short: "Run a cluster node: serves virtual domains from the file system over HTTP",
		Long: `Run a cluster node's web server. A request for http://HOST/PATH is answered
from DOCROOT/HOST/PATH in the parallel file system (read-only; a path ending
in / serves index.html; no directory listings). GET and HEAD, Range,
ETag/Last-Modified and conditional requests. /healthz answers "ok"; /load
reports active requests, bytes in flight and the load average as JSON.

With --dr VIP the node is a real server behind an XDP director doing direct
routing: it puts VIP on its loopback, stops answering ARP for it
(arp_ignore=1, arp_announce=2) and serves VIP on the listen port too, so it
answers clients straight back; all undone on exit.`,
		Example: `  corral node --listen 127.0.0.21:8080 --meta 127.0.0.10:7400 --default-domain www.example.test
  corral node --listen 10.77.0.21:80 --dr 10.77.0.100 --meta 10.77.0.10:7400`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext()
			defer stop()
			cfg := node.Config{Meta: metaAddr, Docroot: docroot, DefaultDomain: defDomain, Log: daemonLog("node")}
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
			return node.Run(ctx, listen, cfg, func(a string) { ready("node", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.21:8080", "address to serve HTTP on")
	c.Flags().StringVar(&metaAddr, "meta", envOr("CORRAL_META", "127.0.0.10:7400"), "metadata server address (env CORRAL_META)")
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
	status := &cobra.Command{Use: "status", Short: "The director itself: the last load of its configuration file (rejected reloads and why)", Args: cobra.NoArgs,
		Example: "  corral ctl status",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cx, cancel := ctx()
			defer cancel()
			st, err := cl().Status(cx)
			if err != nil {
				return err
			}
			printReload(os.Stdout, st.Reload)
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
	c.AddCommand(services, status,
		set("drain SERVICE ADDR", "Stop sending new connections to a real server (existing ones finish)", "drain", 2),
		set("weight SERVICE ADDR N", "Set a real server's weight at run time", "weight", 3),
		set("enable SERVICE ADDR", "Undo drain/weight: back to the configured weight", "enable", 2))
	return c
}

// printReload shows the last load of the director's configuration: ok, or
// rejected with every error (file:line: field: why), the running
// configuration then being the one before.
func printReload(w io.Writer, r *director.ReloadStatus) {
	if r == nil {
		fmt.Fprintln(w, "configuration: not loaded yet")
		return
	}
	if r.OK {
		fmt.Fprintf(w, "configuration: %s loaded %s\n", r.File, r.Time.Local().Format(time.DateTime))
		return
	}
	fmt.Fprintf(w, "configuration: %s REJECTED %s; the previous one runs:\n", r.File, r.Time.Local().Format(time.DateTime))
	for _, line := range strings.Split(r.Error, "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
}
