package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
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

// newSizeClient is the director's file-system client, with the credential
// of $CORRAL_SECRET_FILE.
func newSizeClient(meta string, insecure bool) *client.Client {
	if insecure {
		slog.Warn(insecureWarning)
		return client.New(meta, client.WithInsecure())
	}
	return client.New(meta)
}

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
	var cfgPath, secretFile, check, tokenFile, adminAddr string
	var insecure bool
	var jf joinFlags
	c := &cobra.Command{
		Use:   "director --config FILE | --join STATION --token T",
		Short: "Run the director: virtual services spread over real servers",
		Long: `Run the director. FILE describes the virtual services (VIP, protocol,
dataplane l4, l7 or xdp, scheduler, persistence, health check, real servers); see
docs/director.md for the language. The director reloads FILE on SIGHUP and
when it changes, applying it all at once or not at all: a bad file is
rejected with every error's line and the running configuration stays
('corral ctl status' shows why). --check FILE validates a file and exits. The
admin API (JSON and /metrics) listens on the configured address (keep it on
loopback); 'corral ctl' talks to it. Changes through the admin API need the
bearer token the director writes on first start to --token-file (mode 0600).

High availability: an 'ha { }' block in FILE makes the director one of a
group of directors with the same services. Active-standby: one is elected
through the station's etcd and forwards; its XDP program stops by itself if
its lease is not renewed, and the others take over with the connection table
it streamed to them. Active-active: all forward behind an ECMP router.
'corral ctl ha' shows the group; docs/ha.md explains it all. Stopping an
active director cleanly (SIGTERM) hands over first.

With --join the director takes its configuration from a management station
instead of FILE: it joins with the token (once; the credential is kept in
--state), starts with no services, and applies every version the station
hands out (atomic swap, connections kept; a version it refuses leaves the
running one and the error shows at the station). Restarted while the station
is away, it runs the version it last applied (kept in --state) until the
station answers. Its admin API is on --admin.`,
		Example: `  corral director --config /etc/corral/director.conf
  corral director --check /etc/corral/director.conf.new   # validate only
  corral director --join https://127.0.0.1:7600 --join-token-file director.token --name director1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check != "" {
				if err := director.Check(check); err != nil {
					return configExit(err)
				}
				fmt.Printf("%s: ok\n", check)
				return nil
			}
			if jf.enabled() && !cmd.Flags().Changed("secret-file") {
				// Joined, the credential is the join's: a CORRAL_SECRET_FILE
				// inherited from a parent (corral up, a test) is not asked
				// for, and may name a file long gone.
				secretFile = ""
			}
			if secretFile != "" {
				// The director's file-system client (file sizes for
				// scheduling) takes its credential from the environment.
				if _, err := proto.LoadCredential(secretFile); err != nil {
					return err
				}
				os.Setenv(proto.SecretEnv, secretFile)
			}
			if jf.enabled() {
				if cmd.Flags().Changed("config") {
					return usageError{errors.New("--config and --join exclude each other: the configuration comes from the file or from the station")}
				}
				if tokenFile == "" {
					tokenFile = director.DefaultTokenFile(cfgPath)
				}
				return directorJoined(cmd, &jf, adminAddr, tokenFile, secretFile != "", insecure)
			}
			if cmd.Flags().Changed("admin") {
				return usageError{errors.New("--admin goes with --join; with --config the file's admin line sets it")}
			}
			ctx, stop := signalContext()
			defer stop()
			opts := []director.RunOption{director.WithTokenFile(tokenFile),
				director.WithSizeSource(func(meta string) director.SizeSource { return fsSizes{newSizeClient(meta, insecure)} })}
			if insecure {
				opts = append(opts, director.WithInsecureSync())
			}
			return configExit(director.Run(ctx, cfgPath, daemonLog("director"), func(a string) { ready("director", a) }, opts...))
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "director.conf", "configuration file")
	c.Flags().StringVar(&check, "check", "", "validate this configuration file, print every error (file:line: field: why) and exit: 1 if any, else 0")
	c.Flags().StringVar(&tokenFile, "token-file", "", "admin API bearer token, created (mode 0600) if missing; 'corral ctl' reads it (default: admin.token beside --config)")
	c.Flags().StringVar(&secretFile, "secret-file", os.Getenv(proto.SecretEnv), "file-system credential for the config's meta (the read-only one suffices; env "+proto.SecretEnv+")")
	c.Flags().StringVar(&adminAddr, "admin", "127.0.0.1:7500", "with --join: the admin API's address (keep it on loopback)")
	c.Flags().BoolVar(&insecure, "insecure", false, "plain text: HA sync streams and the file-system client (file sizes) without TLS, and accept plain-text sync peers")
	jf.add(c.Flags(), api.RoleDirector, "join-token-file")
	return c
}

// directorJoined runs a director whose configuration comes from the
// station: the admin API, the agent applying each version, until a signal.
func directorJoined(cmd *cobra.Command, jf *joinFlags, admin, tokenFile string, haveSecret, insecure bool) error {
	log := daemonLog("director")
	name := "director-" + admin
	o, err := jf.options(api.RoleDirector, name, defaultState(cmp.Or(jf.name, name)), log)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	d := director.New(log)
	defer d.Close()
	d.SetSizeSource(func(meta string) director.SizeSource { return fsSizes{newSizeClient(meta, insecure)} })
	d.SetInsecureSync(insecure)
	if err := d.SetOverridesFile(director.OverridesFile(tokenFile)); err != nil {
		return err
	}
	o.Addr = admin
	o.Metrics = "http://" + admin + "/metrics"
	o.Apply = func(_ context.Context, cfg *clustercfg.Config, version int64, drained []string) error {
		ha, err := agent.LoadHAState(o.State)
		if err != nil {
			return err
		}
		return d.ApplyCluster(cfg, version, o.Name, drained, ha)
	}
	o.Report = func() any { return d.Status() }
	// The station's feedback weights (its configuration's feedback
	// section): applied as the director's own monitor would.
	o.Feedback = func(b []byte) error {
		st, err := director.DecodeStationFeedback(b)
		if err != nil {
			return err
		}
		return d.ApplyStationFeedback(st)
	}
	a, reply, err := agent.Join(ctx, o)
	if err != nil {
		return err
	}
	if !haveSecret && len(reply.Secret) > 0 {
		// mwlc's file sizes: the file-system client takes its credential
		// from the environment, as with --secret-file.
		_, p, err := joinSecret(o.State, reply.Secret)
		if err != nil {
			return err
		}
		os.Setenv(proto.SecretEnv, p)
	}
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- director.Serve(ctx, d, admin, tokenFile, func(a string) { ready("director", a) })
		stop()
	}()
	runAgent(ctx, a)()
	return <-srvErr
}

func nodeCmd() *cobra.Command {
	var listen, metaAddr, docroot, defDomain, drVIP, adminAddr, raBudget string
	var writeTimeout, idleTimeout, cacheMaxAge time.Duration
	var accessLog, healthzOnService bool
	var dataCache, cacheFileMax string
	var qosWorkers int
	var qosTrust []string
	var sf secFlags
	var jf joinFlags
	c := &cobra.Command{
		Use:   "node --listen HOST:PORT --meta HOST:PORT[,HOST:PORT...] | --join STATION --token T --name NAME",
		Short: "Run a cluster node: serves virtual domains from the file system over HTTP",
		Long: `Run a cluster node's web server. A request for http://HOST/PATH is answered
from DOCROOT/HOST/PATH in the parallel file system (read-only; a path ending
in / serves index.html; no directory listings). GET and HEAD, Range,
ETag/Last-Modified and conditional requests. Symbolic links resolve inside
the domain's directory only; a URL path over 4096 bytes is 414.

The internal endpoints are on a separate admin listener (--admin, default
the --listen host with port 9080; loopback when --listen is the wildcard
address), never on the service port: /healthz
answers "ok" while the node can serve content (503 with the reason when the
file system is unreachable); /load reports active requests, bytes in flight
and the load average as JSON.

A client that stops reading is disconnected after --write-timeout without
progress; a kept-alive connection without a request after --idle-timeout.

Small files (up to --cache-file-max) are kept in a memory cache of
--data-cache bytes, admitted by popularity (TinyLFU), and used only while
the file's size, mtime and ctime are those it was read under, and for at
most --data-cache-max-age (content written without a close, which leaves
those unchanged, shows within it).

With --dr VIP the node is a real server behind an XDP director doing direct
routing: it puts VIP on its loopback, stops answering ARP for it
(arp_ignore=1, arp_announce=2) and serves VIP on the listen port too, so it
answers clients straight back; all undone on exit.

With --join the node joins a management station with the token (once; the
credential is kept in --state): the join hands over the file system's
read-only credential and its metadata members (no --secret-file or --meta
needed), and the node applies its part of every configuration version live:
docroot, default domain and the domains' own docroots, for the requests that
start after the change.`,
		Example: `  corral node --listen 127.0.0.21:8080 --meta 127.0.0.1:7400 --default-domain www.example.test
  curl http://127.0.0.21:9080/healthz     # the admin listener: ok, or 503 and why
  corral node --listen 127.0.0.21:8080 --admin 127.0.0.1:9121 --write-timeout 30s
  corral node --listen 127.0.0.21:8080 --data-cache 256M --cache-file-max 128K
  corral node --listen 10.77.0.21:80 --dr 10.77.0.100 --meta 10.77.0.10:7400
  corral node --listen 127.0.0.21:8080 --join https://127.0.0.1:7600 --token-file node.token --name node1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			budget, err := parseSize(raBudget)
			if err != nil || budget <= 0 {
				return usageError{fmt.Errorf("--read-ahead-budget %q: want a size such as 32M", raBudget)}
			}
			dcache, err := parseSize(dataCache)
			if err != nil {
				return usageError{fmt.Errorf("--data-cache %q: want a size such as 64M (0: no cache)", dataCache)}
			}
			fileMax, err := parseSize(cacheFileMax)
			if err != nil || fileMax <= 0 {
				return usageError{fmt.Errorf("--cache-file-max %q: want a positive size such as 64K", cacheFileMax)}
			}
			if err := node.CheckDataCache(dcache, fileMax); err != nil {
				return usageError{err}
			}
			ctx, stop := signalContext()
			defer stop()
			cfg := node.Config{Meta: metaAddr, Docroot: docroot, DefaultDomain: defDomain, Log: daemonLog("node"),
				Admin: adminAddr, WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, HealthzOnService: healthzOnService,
				ReadAheadBudget: budget}
			cfg.DataCache, cfg.CacheFileMax = dcache, fileMax
			switch {
			case cacheMaxAge < 0:
				return usageError{fmt.Errorf("--data-cache-max-age %v: want a duration such as 5s (0: no limit)", cacheMaxAge)}
			case cacheMaxAge == 0:
				cfg.DataCacheMaxAge = -1 // no limit (Config's zero is the default)
			default:
				cfg.DataCacheMaxAge = cacheMaxAge
			}
			if writeTimeout <= 0 || idleTimeout <= 0 {
				return fmt.Errorf("--write-timeout and --idle-timeout must be positive (got %v, %v)", writeTimeout, idleTimeout)
			}
			var a *agent.Agent
			var nodeAgent atomic.Pointer[node.Server]
			if jf.enabled() {
				// The join hands over the credential and meta list unless
				// the flags give them.
				if a, err = nodeJoin(ctx, cmd, &jf, listen, &cfg, &sf, &nodeAgent); err != nil {
					return err
				}
			} else if cfg.Security, err = sf.security(false); err != nil {
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
			if qosWorkers < 0 {
				return usageError{fmt.Errorf("--qos-workers %d: want 0 (off) or more", qosWorkers)}
			}
			cfg.QoSWorkers = qosWorkers
			for _, v := range qosTrust {
				p, err := netip.ParsePrefix(v)
				if err != nil {
					a, aerr := netip.ParseAddr(v)
					if aerr != nil {
						return usageError{fmt.Errorf("--qos-trust %q: want a network (10.0.0.0/24) or an address", v)}
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				cfg.QoSTrust = append(cfg.QoSTrust, p.Masked())
			}
			s := node.New(cfg)
			defer s.Close()
			if a != nil {
				nodeAgent.Store(s)
				actx, cancel := context.WithCancel(ctx)
				wait := runAgent(actx, a)
				defer func() { cancel(); wait() }()
			}
			return s.Serve(ctx, listen, func(a string) { ready("node", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.21:8080", "address to serve HTTP on")
	c.Flags().StringVar(&metaAddr, "meta", metaFlagDefault(), metaFlagHelp)
	c.Flags().StringVar(&adminAddr, "admin", "", "address of the admin endpoints /healthz, /load and /metrics (default: the --listen host, port 9080; 127.0.0.1 for a wildcard --listen)")
	c.Flags().BoolVar(&healthzOnService, "healthz-on-service", false, "also answer /healthz on the service port (then reachable through a VIP; for checkers that cannot reach --admin)")
	c.Flags().StringVar(&raBudget, "read-ahead-budget", "32M", "read-ahead of all requests together; past it a request reads without (bounds memory under many slow clients)")
	c.Flags().StringVar(&dataCache, "data-cache", "64M", "memory for whole small files served without asking the I/O servers (at most 64G); 0: no cache")
	c.Flags().DurationVar(&cacheMaxAge, "data-cache-max-age", node.DefaultDataCacheMaxAge, "read a cached file again after this long even if its attributes are unchanged (shows content written without a close); 0: no limit")
	c.Flags().StringVar(&cacheFileMax, "cache-file-max", "64K", "largest file the data cache holds (at most 512K; with its 128 bytes of bookkeeping it must fit in --data-cache)")
	c.Flags().DurationVar(&writeTimeout, "write-timeout", node.DefaultWriteTimeout, "disconnect a client that accepts no byte of a response for this long")
	c.Flags().DurationVar(&idleTimeout, "idle-timeout", node.DefaultIdleTimeout, "disconnect a kept-alive connection without a request for this long (also bounds reading a request header)")
	c.Flags().IntVar(&qosWorkers, "qos-workers", 0, "serve at most this many requests at once, the director's higher classes first, each on a thread with its class's nice (0: off; docs/qos.md)")
	c.Flags().StringSliceVar(&qosTrust, "qos-trust", nil, "the directors' addresses or networks: only their X-Corral-Class is believed")
	c.Flags().StringVar(&docroot, "docroot", "/www", "directory of the virtual domains in the file system")
	c.Flags().StringVar(&defDomain, "default-domain", "", "domain for requests whose Host has no directory (e.g. a bare IP)")
	c.Flags().BoolVar(&accessLog, "access-log", true, "write an access log line per request to stderr")
	sf.add(c.Flags(), true)
	c.Flags().StringVar(&drVIP, "dr", "", "be a direct-routing real server for this VIP (dataplane xdp): VIP on lo, arp_ignore=1, arp_announce=2 (root)")
	jf.add(c.Flags(), api.RoleNode, "token-file")
	return c
}

// nodeJoin joins the station for a node: the credential and meta members
// from the join unless given by flag; the agent's Apply sets the sites.
// The agent applies to the server in nodeAgent, set once it is made
// (after the join, which hands over what it needs).
func nodeJoin(ctx context.Context, cmd *cobra.Command, jf *joinFlags, listen string, cfg *node.Config, sf *secFlags, nodeAgent *atomic.Pointer[node.Server]) (*agent.Agent, error) {
	name := "node-" + listen
	o, err := jf.options(api.RoleNode, name, defaultState(cmp.Or(jf.name, name)), cfg.Log)
	if err != nil {
		return nil, err
	}
	o.Addr = listen
	admin := cfg.Admin
	if admin == "" {
		if admin, err = node.DefaultAdminAddr(listen); err != nil {
			return nil, err
		}
	}
	o.Metrics = "http://" + admin + "/metrics"
	o.Apply = func(_ context.Context, c *clustercfg.Config, version int64, _ []string) error {
		s := nodeAgent.Load()
		if s == nil {
			return errors.New("node not started yet")
		}
		v, err := clustercfg.NodeView(c, o.Name)
		if err != nil {
			return fmt.Errorf("version %d: %w", version, err)
		}
		return s.SetSites(node.Sites{Docroot: v.Docroot, DefaultDomain: v.DefaultDomain, Domains: v.Domains})
	}
	o.Health = func() error {
		if s := nodeAgent.Load(); s != nil {
			return s.Health()
		}
		return errors.New("starting")
	}
	o.Report = func() any {
		if s := nodeAgent.Load(); s != nil {
			return s.Load()
		}
		return nil
	}
	a, reply, err := agent.Join(ctx, o)
	if err != nil {
		return nil, err
	}
	if !cmd.Flags().Changed("meta") && len(reply.Meta) > 0 {
		cfg.Meta = strings.Join(reply.Meta, ",")
	}
	if cmd.Flags().Changed("secret-file") {
		cfg.Security, err = sf.security(false)
	} else {
		// Not the default file (env, corral up's): the join's credential.
		sf.secretFile = ""
		cfg.Security, err = sf.security(true)
		if err == nil {
			cfg.Security.Cred, _, err = joinSecret(o.State, reply.Secret)
		}
	}
	return a, err
}

func ctlCmd() *cobra.Command {
	var admin, tokenFile string
	var asJSON bool
	c := &cobra.Command{
		Use:   "ctl COMMAND",
		Short: "Look at and steer a running director (like ipvsadm)",
		Long: `Look at and steer a running director through its admin API (--admin).
Listings (services, conns) are open on loopback; changes (drain, weight,
enable, add, remove) send the director's admin token, which it writes on first
start beside its configuration as admin.token (mode 0600). ctl reads it from
--token-file, else $CORRAL_ADMIN_TOKEN_FILE, else ./corral-data/admin.token
(the one 'corral up' makes), else ./admin.token, else the client
configuration's (~/.config/corral/client.yaml, which 'corral up' writes: ctl
then works from any directory; docs/client.md). drain and weight last until
enable, across director restarts. Every listing takes --json. 'ha' and 'handover' are for a
director in a high-availability group (docs/ha.md).`,
		Example: `  corral ctl services
  corral ctl services --json
  corral ctl conns
  corral ctl drain www 127.0.0.21:8080
  corral ctl weight www 127.0.0.22:8080 3
  corral ctl enable www 127.0.0.21:8080
  corral ctl add www 127.0.0.24:8080 --weight 2
  corral ctl remove www 127.0.0.24:8080
  corral ctl ha
  corral ctl handover --to d2
  corral ctl feedback
  corral ctl --token-file /etc/corral/admin.token drain www 127.0.0.21:8080`,
	}
	c.PersistentFlags().StringVar(&admin, "admin", clientcfg.DirectorAdmin.Value(), "director admin API address (env CORRAL_ADMIN; else the client configuration's director-admin, which corral up writes)")
	c.PersistentFlags().StringVar(&tokenFile, "token-file", os.Getenv("CORRAL_ADMIN_TOKEN_FILE"), "the director's admin token (env CORRAL_ADMIN_TOKEN_FILE; default ./corral-data/admin.token if it exists, else ./admin.token, else the client configuration's director-token-file)")
	c.PersistentFlags().BoolVar(&asJSON, "json", false, "print listings as JSON")
	// cl is the admin API client. An unreadable token is an error for
	// changes (need) or when --token-file names it; listings go without
	// one, as they are open on loopback.
	cl := func(need bool) (director.Client, error) {
		tf := ctlTokenFile(tokenFile)
		cl := director.Client{Base: "http://" + admin, TokenFile: tf}
		if tf == "" {
			if need {
				return cl, clientcfg.DirectorToken.Missing()
			}
			return cl, nil
		}
		tok, err := director.LoadToken(tf)
		switch {
		case err == nil:
			cl.Token = tok
		case need || tokenFile != "":
			return cl, fmt.Errorf("%v: pass --token-file with the director's admin.token (written beside its configuration)", err)
		}
		return cl, nil
	}
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}
	printJSON := func(v any) error {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		return e.Encode(v)
	}
	// listing runs a listing: the JSON of what fetch got, or its table.
	listing := func(fetch func(context.Context, director.Client) (v any, table func() error, err error)) func(*cobra.Command, []string) error {
		return func(*cobra.Command, []string) error {
			a, err := cl(false)
			if err != nil {
				return err
			}
			cx, cancel := ctx()
			defer cancel()
			v, table, err := fetch(cx, a)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(v)
			}
			return table()
		}
	}
	services := &cobra.Command{Use: "services", Short: "The live table: services, real servers, weights, health, connections, bytes and rates",
		Long: `The live table, like 'ipvsadm -Ln --stats --rate': each service with its VIP,
scheduler, dataplane and new connections; each real server with its effective
weight, health, active and inactive connections, connections, requests and
bytes both ways. Conn/s, InB/s and OutB/s are rates over the director's last
2 s sample.`,
		Example: `  corral ctl services
  corral ctl services --json | jq '.[].servers[] | {addr, healthy, rate}'`,
		Args: cobra.NoArgs,
		RunE: listing(func(cx context.Context, a director.Client) (any, func() error, error) {
			v, err := a.Services(cx)
			return v, func() error { return printServices(v) }, err
		})}
	var stationSF stationFlags // cfg.go: the station's members table, appended when a station answers
	status := &cobra.Command{Use: "status", Short: "The director itself: the last load of its configuration file (rejected reloads and why); the station's members when one answers", Args: cobra.NoArgs,
		Example: "  corral ctl status\n  corral ctl status --station https://10.0.0.5:7600",
		RunE: listing(func(cx context.Context, a director.Client) (any, func() error, error) {
			v, err := a.Status(cx)
			return v, func() error {
				printReload(os.Stdout, v.Reload)
				appendStationMembers(os.Stdout, &stationSF)
				return nil
			}, err
		})}
	stationSF.addNamed(status.Flags(), "station", "station-token-file", "station-ca")
	conns := &cobra.Command{Use: "conns", Short: "The connection table (like ipvsadm -Lnc)",
		Long: `The connection table, like 'ipvsadm -Lnc': protocol, time until the entry
expires (mm:ss), state, client (source), virtual (VIP) and destination (real
server) addresses.`,
		Example: `  corral ctl conns
  corral ctl conns --json`,
		Args: cobra.NoArgs,
		RunE: listing(func(cx context.Context, a director.Client) (any, func() error, error) {
			v, err := a.Conns(cx)
			return v, func() error { return printConns(v) }, err
		})}
	set := func(use, short, action string, nargs int, example string) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Example: example, Args: cobra.ExactArgs(nargs),
			RunE: func(cmd *cobra.Command, args []string) error {
				w := 0
				if action == "weight" {
					var err error
					if w, err = strconv.Atoi(args[2]); err != nil || w < 0 || w > 65535 {
						return usageError{fmt.Errorf("weight %q: want 0..65535", args[2])}
					}
				}
				a, err := cl(true)
				if err != nil {
					return err
				}
				cx, cancel := ctx()
				defer cancel()
				if err := a.SetServer(cx, args[0], args[1], action, w); err != nil {
					return err
				}
				// Say what happened and that it lasts: the director keeps
				// it across restarts (director.OverridesFile).
				switch action {
				case "drain":
					fmt.Printf("%s %s: drained (no new connections); kept across director restarts until 'corral ctl enable %s %s'\n", args[0], args[1], args[0], args[1])
				case "weight":
					fmt.Printf("%s %s: weight %d; kept across director restarts until 'corral ctl enable %s %s'\n", args[0], args[1], w, args[0], args[1])
				default:
					fmt.Printf("%s %s: back to its configured weight\n", args[0], args[1])
				}
				return nil
			}}
	}
	var addWeight int
	add := &cobra.Command{Use: "add SERVICE ADDR", Short: "Add a real server to a running service (like ipvsadm -a)",
		Long: `Add a real server to a running service (like 'ipvsadm -a'). The director
applies it as it applies a reload, and health checks start at once. The
configuration file is not changed: the next reload of the file (SIGHUP, or
the file changing) replaces run-time additions and removals, as a keepalived
reload replaces ipvsadm's changes.`,
		Example: `  corral ctl add www 127.0.0.24:8080
  corral ctl add www 127.0.0.24:8080 --weight 3`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if addWeight < 0 || addWeight > 65535 {
				return usageError{fmt.Errorf("--weight %d: want 0..65535", addWeight)}
			}
			a, err := cl(true)
			if err != nil {
				return err
			}
			cx, cancel := ctx()
			defer cancel()
			return a.AddServer(cx, args[0], args[1], addWeight)
		}}
	add.Flags().IntVar(&addWeight, "weight", 1, "the server's weight (0..65535)")
	remove := &cobra.Command{Use: "remove SERVICE ADDR", Short: "Remove a real server from a running service (like ipvsadm -d)",
		Long: `Remove a real server from a running service (like 'ipvsadm -d'): it gets no
new connections and its established ones finish. Until the next reload of the
configuration file, like 'add'.`,
		Example: `  corral ctl remove www 127.0.0.24:8080`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := cl(true)
			if err != nil {
				return err
			}
			cx, cancel := ctx()
			defer cancel()
			return a.RemoveServer(cx, args[0], args[1])
		}}
	c.AddCommand(services, status, conns,
		set("drain SERVICE ADDR", "Stop sending new connections to a real server (existing ones finish)", "drain", 2,
			"  corral ctl drain www 127.0.0.21:8080"),
		set("weight SERVICE ADDR N", "Set a real server's weight at run time", "weight", 3,
			"  corral ctl weight www 127.0.0.22:8080 3"),
		set("enable SERVICE ADDR", "Undo drain/weight: back to the configured weight", "enable", 2,
			"  corral ctl enable www 127.0.0.21:8080"),
		add, remove)
	c.AddCommand(ctlHACmds(listing, cl, &asJSON)...)
	c.AddCommand(ctlFeedbackCmd(listing))
	return c
}

// ctlTokenFile is where ctl reads the admin token: the flag, else the one
// 'corral up' makes in ./corral-data, else ./admin.token, else the client
// configuration's; "" if none.
func ctlTokenFile(flag string) string {
	if flag != "" {
		return flag
	}
	return clientcfg.DirectorToken.Value()
}

// printServices prints the live table in at most 100 columns for the
// usual addresses: the service's protocol beside its name, bytes and
// byte rates as IN/OUT pairs in short units, a down server's check error
// below the table.
func printServices(st []director.ServiceStatus) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	var notes []string // below the table: xdp, l4 limits, check errors
	fmt.Fprintln(tw, "Service / Server\tWeight\tHealth\tAct\tInAct\tConns\tReqs\tIn/Out\tConn/s\tIn/Out/s")
	for _, s := range st {
		vip := s.VIP
		if s.Protocol != "" && s.Protocol != "tcp" {
			vip += "/" + s.Protocol // tcp is the usual: said only otherwise
		}
		fmt.Fprintf(tw, "%s %s\t%s %s\t\t\t\t%s\t\t\t%s\t%s/%s\n", s.Name, vip, s.Scheduler, s.Dataplane, count(int64(s.NewConns)),
			rate(s.Rate.CPS), short(int64(s.Rate.InBPS+0.5)), outShort(s.XDP != nil, s.Rate.OutBPS))
		if x := s.XDP; x != nil {
			// Direct routing: replies go from the servers to the
			// clients, so the director counts only what comes in.
			var drops []string
			for _, reason := range xdp.DropReasons {
				drops = append(drops, fmt.Sprintf("%s=%d", reason, x.Drops[reason]))
			}
			notes = append(notes, fmt.Sprintf("%s: xdp %s on %s, %d packets (%s/s), %s in; drops %s", s.Name, x.Mode, x.Interface, x.Packets, rate(s.Rate.InPPS), human(int64(x.Bytes)), strings.Join(drops, " ")))
		}
		notes = append(notes, l4Notes(s)...)
		for _, r := range s.Servers {
			h := "up"
			if !r.Healthy {
				h = "DOWN"
				if r.LastError != "" {
					notes = append(notes, fmt.Sprintf("%s %s DOWN: %s", s.Name, r.Addr, r.LastError))
				}
			} else if r.Override == 0 {
				h = "drained"
			}
			w := strconv.Itoa(r.Weight)
			if r.Override >= 0 && r.Override != r.ConfigWeight {
				w += fmt.Sprintf(" (cfg %d)", r.ConfigWeight)
			} else if r.Override < 0 && r.Feedback >= 0 {
				w += fmt.Sprintf(" (fb %d)", r.ConfigWeight)
			}
			out := short(r.BytesOut)
			if s.XDP != nil {
				out = "-" // not seen: replies bypass the director
			}
			fmt.Fprintf(tw, "  -> %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%s/%s\n", r.Addr, w, h, count(r.Active), count(r.Inactive), count(r.Connections), count(r.Requests), short(r.BytesIn), out,
				rate(r.Rate.CPS), short(int64(r.Rate.InBPS+0.5)), outShort(s.XDP != nil, r.Rate.OutBPS))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	return nil
}

// short is a byte count in at most 5 characters: 999, 1.5K, 12M, 3.2G
// (powers of 1024).
func short(n int64) string {
	if n < 1000 {
		return strconv.FormatInt(n, 10)
	}
	f := float64(n)
	for _, u := range "KMGTPE" {
		f /= 1024
		if f < 999.5 {
			if f < 9.95 {
				return strconv.FormatFloat(f, 'f', 1, 64) + string(u)
			}
			return strconv.FormatFloat(f, 'f', 0, 64) + string(u)
		}
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "E"
}

// count is a count in at most 5 characters: 9999, 12K, 123M (powers of
// 1000).
func count(n int64) string {
	if n < 10000 {
		return strconv.FormatInt(n, 10)
	}
	f := float64(n)
	for _, u := range "KMGTPE" {
		f /= 1000
		if f < 999.5 {
			return strconv.FormatFloat(f, 'f', 0, 64) + string(u)
		}
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "E"
}

func outShort(xdp bool, v float64) string {
	if xdp {
		return "-"
	}
	return short(int64(v + 0.5))
}

// l4Notes are an l4 service's lines below the table: its flows against
// max-conns, the busiest client address against max-conns-per-source, the
// idle timeouts, and the flows refused at each cap (kept apart from the
// table, which is wide already).
func l4Notes(s director.ServiceStatus) []string {
	l := s.L4
	if l == nil {
		return nil
	}
	idle, refused := "idle "+l.UDPTimeout, "dropped"
	if s.Protocol == "tcp" {
		idle, refused = fmt.Sprintf("idle %s, half-closed %s", l.TCPTimeout, l.TCPFinTimeout), "refused"
	}
	out := []string{
		fmt.Sprintf("%s: l4 %d/%d flows, busiest source %d/%d; %s", s.Name, l.Flows, l.MaxConns, l.Busiest, l.MaxPerSource, idle),
		fmt.Sprintf("%s: %s %d at max-conns, %d at max-conns-per-source", s.Name, refused, l.RefusedService, l.RefusedSource),
	}
	if s.Protocol == "tcp" {
		out[1] += fmt.Sprintf("; %d ended idle", l.IdleClosed)
	}
	return out
}

func rate(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return count(int64(v + 0.5))
}

func humanRate(v float64) string { return human(int64(v + 0.5)) }

func outRate(xdp bool, v float64) string {
	if xdp {
		return "-"
	}
	return humanRate(v)
}

func printConns(cs []director.ConnStatus) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "pro\texpire\tstate\tsource\tvirtual\tdestination\tservice")
	for _, c := range cs {
		e := int64(c.Expires + 0.5)
		fmt.Fprintf(tw, "%s\t%02d:%02d\t%s\t%s\t%s\t%s\t%s\n", strings.ToUpper(c.Proto), e/60, e%60, c.State, c.Client, c.VIP, c.Real, c.Service)
	}
	return tw.Flush()
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
