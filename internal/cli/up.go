package cli

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/clientcfg"
	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/launch/managed"
	"github.com/corral-cluster/corral/internal/sched"
	"github.com/corral-cluster/corral/internal/testbed"
	"github.com/spf13/cobra"
)

func upCmd() *cobra.Command {
	var data, vip, dataplane, scheduler, rate, netFlag string
	var iods, nodes, metaMembers int
	var onTestbed, reset, noStation, writeClient bool
	c := &cobra.Command{
		Use:   "up [--data DIR] [--meta-members 1|3|5] [--nodes N] [--iods M] [--dataplane l4|l7|xdp] [--vip HOST:PORT] [--reset] [--testbed [--rate 100mbit]]",
		Short: "Run a whole Corral cluster on this machine",
		Long: `Run every role on this machine as child processes on loopback addresses
(no root needed): three replicated metadata members on 127.0.0.1:7400, 7401
and 7402 (where every --meta points by default; --meta-members 1 runs a
single metadata server on 7400, 5 runs five up to 7404; data in
DATA/meta/1, 2, ...), I/O servers on 127.0.0.11:7410, ..., cluster nodes on
127.0.0.21:8080, ..., and a director with its admin API on 127.0.0.1:7500
and two services over the nodes: "www" on the VIP (default
127.0.0.100:8080) with --dataplane, and one on the VIP's next port (8081)
with the other dataplane (l7 or l4), to compare them. A sample site for the
virtual domain www.example.test is uploaded on the first run.

A management station (corral mgmt) starts first, on NET.1:7600 (HTTPS; its
embedded etcd on 7601 and 7602; data in DATA/mgmt): it keeps the cluster's
one versioned configuration and serves the dashboard. On the first run up
gives it a configuration made from the flags (version 1: the logical cluster
"web" of every node, the director, the services, the sample domain, the
file system), or imports DATA/director.conf if an older up left one (renamed
director.conf.imported). After that the configuration is the station's:
change it with corral cfg get / corral cfg apply, and every member applies
each new version live; --reset applies the flags' configuration again as a
new version. Every role joins the station (join tokens made at each start,
valid 1h; credentials kept in DATA/state/ROLE so restarts need none) and
runs its own copy of the binary, DATA/bin/ROLE/corral, which a rolling
upgrade (corral mgmt rollout) swaps one member at a time.

With --no-station (and with --testbed) up runs as before the station:
DATA/director.conf, written on the first run only and yours to edit after
that (--reset writes it anew).

Data and logs go under --data; a second run reuses them (the file system's
data, the secrets, the station's versions and the logs are kept).

up supervises: a role that dies is logged and restarted at the same address
with the same data, after a delay that starts at 100ms and doubles up to 10s
(back to 100ms once it has run for 30s), while the others keep serving.
Ctrl-C stops everything.

With --testbed (root), each role runs on its own host of a test bed (network
namespaces on a bridge, 10.77.0.0/24: client, director, node1.., meta,
iod1..), links shaped to --rate; Ctrl-C also removes the test bed. With
--dataplane xdp the director does LVS direct routing in the kernel: the VIP is
10.77.0.100:80, the nodes hold it on their loopback and answer the client
straight back. Each node host also runs net-snmp's snmpd (port 161, eth0's
speed set to --rate; a random community generated into DATA/snmp.community,
mode 0600: give the feedback block 'community file:/ABS/DATA/snmp.community'),
for a director's feedback block (docs/feedback.md).`,
		Example: `  corral up
  corral up --nodes 5 --dataplane l7 --scheduler mwlc
  corral up --reset      # apply the flags' configuration as a new version
  corral up --no-station # no station: the director reads corral-data/director.conf
  sudo corral up --testbed --rate 100mbit --dataplane xdp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iods < 1 || iods > 50 || nodes < 1 || nodes > 50 {
				return fmt.Errorf("--iods and --nodes: want 1..50")
			}
			if metaMembers != 1 && metaMembers != 3 && metaMembers != 5 {
				return usageError{fmt.Errorf("--meta-members %d: want 1, 3 or 5 (a majority must survive a failure)", metaMembers)}
			}
			if err := sched.Supports(scheduler, dataplane); err != nil {
				return usageError{fmt.Errorf("--scheduler %s --dataplane %s: %v", scheduler, dataplane, err)}
			}
			if dataplane == "xdp" && !onTestbed {
				return usageError{fmt.Errorf("--dataplane xdp needs --testbed: direct routing needs the director and the nodes on separate hosts of one link")}
			}
			if rate != "" && !onTestbed {
				return fmt.Errorf("--rate shapes test-bed links: add --testbed")
			}
			net, err := upNet(netFlag)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("vip") {
				vip = net + ".100:8080"
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(data)
			if err != nil {
				return err
			}
			if err := privateDir(abs); err != nil {
				return fmt.Errorf("--data: %w", err)
			}
			ctx, stop := signalContext()
			defer stop()
			cfg := launch.ClusterConfig{Bin: bin, Data: abs, MetaListen: upMetaMembers(net, metaMembers), VIP: vip, Admin: net + ".1:7500",
				Dataplane: dataplane, Scheduler: scheduler, KeepConfig: !reset}
			for i := 0; i < iods; i++ {
				cfg.IODListens = append(cfg.IODListens, fmt.Sprintf("%s.%d:7410", net, 11+i))
			}
			for i := 0; i < nodes; i++ {
				cfg.NodeListen = append(cfg.NodeListen, fmt.Sprintf("%s.%d:8080", net, 21+i))
			}
			var bed *testbed.Bed
			if onTestbed {
				if bed, err = upTestbed(&cfg, rate); err != nil {
					return err
				}
				defer testbed.Down(bed.Name)
			}
			// The other dataplane on the VIP's next port, to compare both.
			other := ""
			if dataplane != "xdp" {
				if other, err = nextPort(cfg.VIP); err != nil {
					return fmt.Errorf("--vip: %v", err)
				}
				if dataplane == "l4" {
					cfg.L7VIP = other
				} else {
					cfg.L4VIP = other
				}
			}
			managedUp := !noStation && bed == nil
			var cl *launch.Cluster
			var started *managed.Started
			if managedUp {
				cl, started, err = managed.Start(ctx, cfg, managed.Options{Station: net + ".1:7600", Reset: reset,
					Log: func(format string, a ...any) { fmt.Printf("corral up: "+format+"\n", a...) }})
			} else {
				cl, err = launch.StartCluster(ctx, cfg)
			}
			if err != nil {
				return err
			}
			// What the user types: bin itself is go run's temporary build,
			// gone once up exits.
			self := userCommand(bin)
			// The services the cluster runs: a second start runs the
			// stored configuration, not the flags'.
			if managedUp && started != nil {
				for _, sv := range started.Services {
					if sv.Name == "www" {
						vip, dataplane, scheduler = sv.VIP, cmp.Or(sv.Dataplane, "l4"), cmp.Or(sv.Scheduler, "wlc")
					} else if sv.Name == "www-l7" || sv.Name == "www-l4" {
						other = sv.VIP
					}
				}
				cfg.VIP = vip
			}
			var ccPath string
			if writeClient && bed == nil {
				p, err := recordClient(cl, cfg.Admin, managedUp)
				if err != nil {
					fmt.Fprintf(os.Stderr, "corral up: the client configuration was not written (commands find this cluster only from %s): %v\n", filepath.Dir(abs), err)
				}
				ccPath = p
			}
			fmt.Printf("corral is up (data and logs in %s)\n\n", abs)
			for _, p := range cl.Procs() {
				fmt.Printf("  %-9s %-20s log %s\n", p.Name, p.Addr, p.Log)
			}
			if managedUp {
				var stFlags string
				if cl.StationURL() != "https://127.0.0.1:7600" {
					stFlags = " --station " + cl.StationURL()
				}
				login := ""
				if started.AdminPassword != "" {
					login = "\n            dashboard login: user admin, password in " + started.AdminPassword
				}
				fmt.Printf(`
  station   %[1]s/   (dashboard; configuration version %[2]d)
            admin token %[3]s, CA %[4]s%[7]s
  roles run DATA/bin/ROLE/corral (rolling upgrades swap one at a time)

  %[5]s cfg get%[6]s > cluster.yaml      # the configuration, "# version N" first
  %[5]s cfg apply%[6]s cluster.yaml      # edit, apply: every member applies it live
  %[5]s cfg status%[6]s                  # each member's applied version
`, cl.StationURL(), started.Version, mustAbs(cl.AdminTokenFile()), mustAbs(cl.StationCA()), self, stFlags, login)
				if abs != mustAbs("corral-data") && ccPath == "" {
					fmt.Printf("  (run them with --token-file %s --ca %s, or from the directory above %s)\n", cl.AdminTokenFile(), cl.StationCA(), abs)
				}
			} else if cl.ConfKept {
				fmt.Printf("\n  director.conf: %s as you left it (corral up --reset writes it anew from the flags)\n", cl.ConfPath)
				if m := confMeta(cl.ConfPath); m != "" && m != cl.MetaAddr() {
					fmt.Printf("  warning: it names meta %s, but meta runs on %s: edit its meta line, or corral up --reset\n", m, cl.MetaAddr())
				}
			} else {
				fmt.Printf("\n  director.conf: %s, written now; yours to edit, the director applies changes live\n", cl.ConfPath)
			}
			// What the commands below need beyond their defaults.
			var fsFlags, ctlFlags, env string
			if cl.MetaAddr() != defaultMetaMembers {
				fsFlags = " --meta " + cl.MetaAddr()
			}
			if cfg.Admin != "127.0.0.1:7500" {
				ctlFlags = " --admin " + cfg.Admin
			}
			if filepath.Join(abs, "meta", "cluster.secret") != mustAbs(upSecretFile) {
				env = "  export CORRAL_SECRET_FILE=" + cl.SecretFile + "   # the cluster secret\n"
			}
			if bed != nil && dataplane == "xdp" {
				fmt.Printf(`
  VIP       http://%[4]s/ (XDP direct routing on the director's eth0, %[5]s)
  Test bed %[1]s: each role on its own host (a network namespace), links %[2]s.
  Requests go client -> director -> node; replies go node -> client directly.

Try:
  %[3]s testbed exec client -- curl -s http://%[4]s/
  %[3]s testbed exec director -- %[3]s ctl services   # OutBytes: -, replies bypass it
  %[3]s testbed status

Ctrl-C stops everything and removes the test bed.
`, bed.Name, orDefault(rate, "unshaped"), self, cfg.VIP, scheduler)
			} else if bed != nil {
				fmt.Printf(`
  VIP       http://%[4]s/ on host director (%[5]s, %[6]s); http://%[7]s/ the other dataplane
  Test bed %[1]s: each role on its own host (a network namespace), links %[2]s.

Try:
  %[3]s testbed exec client -- curl -s http://%[4]s/
  %[3]s testbed exec director -- %[3]s ctl services
  %[3]s testbed status

Ctrl-C stops everything and removes the test bed.
`, bed.Name, orDefault(rate, "unshaped"), self, cfg.VIP, dataplane, scheduler, other)
			} else {
				if ccPath != "" {
					// The client configuration finds the cluster from any
					// directory: no flags or variables needed.
					fsFlags, ctlFlags, env = "", "", ""
					fmt.Printf("\n  client    %s: the commands below find this cluster from any directory\n", ccPath)
				}
				fmt.Printf(`
  VIP       http://%[1]s/   (%[4]s, %[5]s; virtual domain %[6]s)
            http://%[7]s/   (the other dataplane)

Try, in another terminal:
%[8]s  curl http://%[1]s/
  curl -H 'Host: %[6]s' -r 0-99 http://%[1]s/big.bin | wc -c
  %[2]s ctl%[9]s services
  %[2]s fs%[3]s ls -l /www/%[6]s
  %[2]s fs%[3]s put index.html /www/%[6]s/   # change the site
  mkdir -p /tmp/corral && %[2]s mount%[3]s /tmp/corral   # FUSE; needs /dev/fuse

A role that dies is restarted. Ctrl-C stops everything.
`, cfg.VIP, self, fsFlags, dataplane, scheduler, launch.SampleDomain, other, env, ctlFlags)
			}
			go func() {
				<-ctx.Done()
				fmt.Println("\nstopping...")
			}()
			cl.Supervise(ctx, launch.DefaultBackoff(), func(e launch.Event) {
				fmt.Fprintf(os.Stderr, "%s corral up: %s\n", time.Now().Format("15:04:05.000"), e)
			})
			fmt.Println("stopped")
			return nil
		},
	}
	c.Flags().StringVar(&data, "data", "corral-data", "directory for every role's data and logs")
	c.Flags().IntVar(&iods, "iods", 3, "number of I/O servers")
	c.Flags().IntVar(&nodes, "nodes", 3, "number of cluster nodes")
	c.Flags().IntVar(&metaMembers, "meta-members", 3, "number of metadata members: 1 (a single server), 3 or 5 (replicated; ports 7400, 7401, ...)")
	c.Flags().StringVar(&vip, "vip", "127.0.0.100:8080", "the virtual service's address (with --testbed: the director host's port 80); the other dataplane's service takes the next port")
	c.Flags().StringVar(&dataplane, "dataplane", "l4", "director dataplane: l4 (TCP proxy), l7 (HTTP proxy) or xdp (direct routing in the kernel; with --testbed)")
	c.Flags().StringVar(&scheduler, "scheduler", "wlc", "scheduler: "+strings.Join(sched.For("l7"), " ")+" (mwlc: l7 only)")
	c.Flags().BoolVar(&reset, "reset", false, "apply the flags' configuration to the station as a new version (--no-station: write DATA/director.conf anew); keeps the file system's data, secrets and logs")
	c.Flags().BoolVar(&noStation, "no-station", false, "run no management station: the director reads DATA/director.conf, the nodes take flags (as --testbed does)")
	c.Flags().BoolVar(&writeClient, "client-config", true, "record where this cluster is (station, CA, tokens, meta members, secret, director) in the per-user client configuration, $XDG_CONFIG_HOME/corral/client.yaml, so the client commands find it from any directory (--client-config=false: leave it alone)")
	c.Flags().BoolVar(&onTestbed, "testbed", false, "run each role on its own host of a test bed (root)")
	c.Flags().StringVar(&rate, "rate", "", "with --testbed: every host's link speed (e.g. 100mbit; empty: unshaped)")
	c.Flags().StringVar(&netFlag, "net", "127.0.0.0/24", "loopback /24 the roles take addresses in (meta .1:7400, iods .11.., nodes .21.., VIP .100:8080); another one runs a second cluster beside the first")
	return c
}

// upNet checks --net, a /24 inside 127.0.0.0/8, and returns its first
// three octets.
func upNet(s string) (string, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Bits() != 24 || !p.Addr().Is4() || !p.Addr().IsLoopback() || p.Masked() != p {
		return "", fmt.Errorf("--net %q: want a /24 inside 127.0.0.0/8, such as 127.0.0.0/24 or 127.0.5.0/24", s)
	}
	a := p.Addr().As4()
	return fmt.Sprintf("%d.%d.%d", a[0], a[1], a[2]), nil
}

// upMetaMembers is where `corral up` runs n metadata members on the /24 net:
// NET.1:7400, NET.1:7401, ...
func upMetaMembers(net string, n int) string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s.1:%d", net, 7400+i))
	}
	return strings.Join(out, ",")
}

// nextPort is addr with its port plus one.
func nextPort(addr string) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", err
	}
	if ap.Port() == 65535 {
		return "", fmt.Errorf("%s: no next port for the second service", addr)
	}
	return netip.AddrPortFrom(ap.Addr(), ap.Port()+1).String(), nil
}

// confMeta is the address of the top-level meta line of a director
// configuration ("" if none): a kept file may predate a change of address.
func confMeta(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "meta" {
			return f[1]
		}
	}
	return ""
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// upTestbed builds the test bed for a cluster and moves every role onto its
// own host.
func upTestbed(cfg *launch.ClusterConfig, rate string) (*testbed.Bed, error) {
	nodes, iods := len(cfg.NodeListen), len(cfg.IODListens)
	hosts := append([]string{"client"}, launch.ClusterHosts(nodes, iods)...)
	bed, err := testbed.Up(testbed.NewSpec("corral", hosts, rate))
	if err != nil {
		return nil, err
	}
	if err := cfg.OnTestbed(bed, nodes, iods); err != nil {
		testbed.Down(bed.Name)
		return nil, err
	}
	if cfg.Dataplane == "xdp" {
		if err := bed.PrepareDR(xdp.AttachPass, "director", "client"); err != nil {
			testbed.Down(bed.Name)
			return nil, err
		}
	}
	// An snmpd on every node host (the bed's subnet, port 161), for a
	// director's feedback block (docs/feedback.md), admitting a community
	// generated into DATA/snmp.community (0600): no "public". It is
	// optional: without snmpd the cluster runs all the same. Down ends
	// them with their namespaces.
	started := 0
	for i := 1; i <= nodes; i++ {
		h := fmt.Sprintf("node%d", i)
		if _, err := bed.StartSNMPD(context.Background(), h, testbed.SNMPConfig{Dir: cfg.Data}); err != nil {
			fmt.Fprintf(os.Stderr, "corral up: no snmpd on %s (a feedback block with source snmp will not see it): %v\n", h, err)
		} else {
			started++
		}
	}
	if started > 0 {
		if p, err := filepath.Abs(filepath.Join(cfg.Data, testbed.SNMPCommunityFile)); err == nil {
			fmt.Fprintf(os.Stderr, "corral up: snmpd on the node hosts admits the community in %s (feedback: community file:%s)\n", p, p)
		}
	}
	return bed, nil
}

// privateDir makes dir (0700) or tightens an existing one to 0700: it
// holds the cluster secret, the CA's key, tokens and every file's data,
// and only its own modes may protect them (its parent is often a home
// directory others can enter).
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(os.Stderr, "corral up: %s was mode %04o; now 0700 (it holds the cluster's secrets)\n", dir, st.Mode().Perm())
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// userCommand is how the user runs this binary: bin itself, unless it is
// go run's temporary build (removed when go run exits), then "go run
// ./cmd/corral" from the module's directory, else a corral on the PATH.
func userCommand(bin string) string {
	if !strings.Contains(bin, string(filepath.Separator)+"go-build") {
		return bin
	}
	if _, err := os.Stat(filepath.Join("cmd", "corral", "main.go")); err == nil {
		return "go run ./cmd/corral"
	}
	if p, err := exec.LookPath("corral"); err == nil {
		return p
	}
	return "go run github.com/corral-cluster/corral/cmd/corral"
}

// recordClient writes where cl is into the per-user client
// configuration (clientcfg): the commands then find it from any
// directory. It returns the file.
func recordClient(cl *launch.Cluster, admin string, managed bool) (string, error) {
	return clientcfg.Update(func(c *clientcfg.Config) {
		*c = clientcfg.Config{Meta: cl.MetaAddr(), SecretFile: cl.SecretFile, DirectorAdmin: admin}
		if managed {
			c.Station, c.StationCA, c.StationTokenFile = cl.StationURL(), cl.StationCA(), cl.AdminTokenFile()
			c.DirectorTokenFile = filepath.Join(cl.Data, director.TokenFileName)
		} else {
			c.DirectorTokenFile = director.DefaultTokenFile(cl.ConfPath)
		}
	})
}
