package launch

import (
	"context"
	"embed"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/sched"
)

// SampleDomain is the virtual domain `corral up` serves.
const SampleDomain = "www.example.test"

//go:embed site
var site embed.FS

// ClusterConfig describes a whole cluster on one machine.
type ClusterConfig struct {
	Bin, Data string
	// MetaListen is the metadata member's address, or several members'
	// comma-separated (replicated; each gets the whole list as --peers).
	MetaListen string
	IODListens []string
	NodeListen []string
	VIP        string
	Admin      string
	Dataplane  string // l4, l7 or xdp (nodes then run as direct-routing real servers)
	// Interface is the director's link for dataplane xdp.
	Interface string
	Scheduler string
	// Check is the director's health check line ("" for the default:
	// http /healthz every second, out after 2 failures).
	Check string
	// L7VIP, if set, adds a second service "www-l7" on this VIP with the l7
	// dataplane over the same nodes (benchmarks compare both).
	L7VIP string
	// L4VIP likewise adds a service "www-l4" with the l4 dataplane.
	L4VIP string
	// Wrap runs each role on its own host (see FS.Wrap).
	Wrap func(role string) []string
	// Args adds arguments to a role's command line (see FS.Args).
	Args func(role string) []string
	// KeepConfig leaves an existing DATA/director.conf as it is: `corral up`
	// writes it on the first start only, after that it is the user's (up
	// --reset writes it anew).
	KeepConfig bool
	// Station, if set, runs a management station that every role joins
	// and takes its configuration from (no director.conf); each role runs
	// its own copy of Bin (RoleBin). Node addresses must name their ports.
	Station *StationConfig
}

// Cluster is a running cluster.
type Cluster struct {
	*FS
	Cfg      ClusterConfig
	Nodes    []*Proc
	Director *Proc
	ConfPath string
	// ConfKept says the director runs an existing director.conf (KeepConfig).
	ConfKept bool

	// Station is the management station's process (managed clusters).
	Station *Proc

	// mu guards the Proc fields while Supervise replaces them.
	mu sync.Mutex
}

// StartCluster starts the file system, uploads the sample site (first run
// only), then the nodes and the director.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Station != nil {
		return startManaged(ctx, cfg)
	}
	fsys, err := startFS(ctx, &FS{Bin: cfg.Bin, Data: cfg.Data, Wrap: cfg.Wrap, Args: cfg.Args}, cfg.MetaListen, cfg.IODListens)
	if err != nil {
		return nil, err
	}
	c := &Cluster{FS: fsys, Cfg: cfg}
	if err := fsys.UploadSample(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("upload sample site: %w", err)
	}
	c.ConfPath = filepath.Join(c.Data, "director.conf")
	if _, err := os.Stat(c.ConfPath); err == nil && cfg.KeepConfig {
		c.ConfKept = true
	}
	for i, l := range cfg.NodeListen {
		p, err := c.StartNode(ctx, i, l)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, p)
	}
	if !c.ConfKept {
		if err := c.WriteDirectorConf(cfg.Scheduler, nil); err != nil {
			c.Stop()
			return nil, err
		}
	}
	c.Director, err = c.startDirector(ctx)
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startManaged starts a managed cluster: the station (the cluster secret
// made first, as the station hands it out), Prepare, then the file system,
// the sample site, the nodes and the director, every role joining the
// station from its own binary.
func startManaged(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	f := &FS{Bin: cfg.Bin, Data: cfg.Data, Wrap: cfg.Wrap, Args: cfg.Args}
	c := &Cluster{FS: f, Cfg: cfg}
	f.roleBin, f.join = c.RoleBin, c.joinArgs
	var err error
	if f.metaAddrs, err = metaListAddrs(cfg.MetaListen); err != nil {
		return nil, err
	}
	for _, l := range cfg.NodeListen {
		if strings.HasSuffix(l, ":0") {
			return nil, fmt.Errorf("node address %s: a managed cluster needs fixed node addresses (its configuration names them)", l)
		}
	}
	if err := f.prepareSecret(); err != nil {
		return nil, err
	}
	if left := c.stopLeftovers(); len(left) > 0 && cfg.Station.Log != nil {
		cfg.Station.Log("stopped roles an earlier run left running: %s", strings.Join(left, ", "))
	}
	roles := []string{"mgmt", "director"}
	if n := len(f.metaAddrs); n == 1 {
		roles = append(roles, "meta")
	} else {
		for i := range n {
			roles = append(roles, fmt.Sprintf("meta%d", i+1))
		}
	}
	for i := range cfg.IODListens {
		roles = append(roles, fmt.Sprintf("iod%d", i+1))
	}
	for i := range cfg.NodeListen {
		roles = append(roles, fmt.Sprintf("node%d", i+1))
	}
	for _, r := range roles {
		if err := c.installRoleBin(r); err != nil {
			return nil, err
		}
	}
	if c.Station, err = c.startStation(ctx); err != nil {
		return nil, err
	}
	if cfg.Station.Prepare != nil {
		if err := cfg.Station.Prepare(ctx, c); err != nil {
			c.Station.Stop()
			return nil, err
		}
	}
	if _, err := startFS(ctx, f, cfg.MetaListen, cfg.IODListens); err != nil {
		c.Station.Stop()
		return nil, err
	}
	if err := f.UploadSample(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("upload sample site: %w", err)
	}
	for i, l := range cfg.NodeListen {
		p, err := c.StartNode(ctx, i, l)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, p)
	}
	if c.Director, err = c.startDirector(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startDirector (re)starts the director on DATA/director.conf, or joined
// to the station (its admin token stays DATA/admin.token, where corral ctl
// looks).
func (c *Cluster) startDirector(ctx context.Context) (*Proc, error) {
	if c.Cfg.Station != nil {
		// The admin address stays the command line's.
		return c.start(ctx, "director", "director", "--admin", c.Cfg.Admin, "--token-file", filepath.Join(c.Data, "admin.token"))
	}
	return c.start(ctx, "director", "director", "--config", c.ConfPath, "--secret-file", c.ReadOnlyFile)
}

// StartNode (re)starts node i.
func (c *Cluster) StartNode(ctx context.Context, i int, listen string) (*Proc, error) {
	name := fmt.Sprintf("node%d", i+1)
	if c.Cfg.Station != nil {
		// The station's configuration names its docroot, domains and
		// checks (on the admin port, 9080); the join brings the
		// read-only credential.
		args := []string{"node", "--listen", listen, "--meta", c.MetaAddr()}
		if c.Cfg.Dataplane == "xdp" {
			vip, err := netip.ParseAddrPort(c.Cfg.VIP)
			if err != nil {
				return nil, fmt.Errorf("VIP %q: %w", c.Cfg.VIP, err)
			}
			args = append(args, "--dr", vip.Addr().String())
		}
		return c.start(ctx, name, args...)
	}
	args := []string{"--listen", listen, "--meta", c.MetaAddr(), "--default-domain", SampleDomain, "--secret-file", c.ReadOnlyFile}
	freePort := strings.HasSuffix(listen, ":0") || i < len(c.Cfg.NodeListen) && strings.HasSuffix(c.Cfg.NodeListen[i], ":0")
	if freePort || c.checksServicePort() {
		// The director checks /healthz on the service port (no port=
		// in its check line), or the node is on a free port (tests;
		// also when restarted on the port it got) whose admin port is
		// a free port no check line can name: answer /healthz there
		// too. Otherwise it is on the admin port only (9080).
		args = append(args, "--healthz-on-service")
	}
	if freePort {
		// Restarted on the port it got, its default admin address would
		// be HOST:9080 for every such node.
		if host, _, err := net.SplitHostPort(listen); err == nil {
			args = append(args, "--admin", net.JoinHostPort(host, "0"))
		}
	}
	if c.Cfg.Dataplane == "xdp" {
		vip, err := netip.ParseAddrPort(c.Cfg.VIP)
		if err != nil {
			return nil, fmt.Errorf("VIP %q: %w", c.Cfg.VIP, err)
		}
		args = append(args, "--dr", vip.Addr().String())
	}
	return c.start(ctx, name, append([]string{"node"}, args...)...)
}

// checkLine is the director's health check of the nodes: /healthz on their
// admin listener (port 9080), off the service port and so out of reach of
// clients of the VIP. Nodes on free ports (tests, benchmarks) have admin
// ports no check line can name: they answer /healthz on the service port.
func (c *Cluster) checkLine() string {
	if c.Cfg.Check != "" {
		return c.Cfg.Check
	}
	for _, l := range c.Cfg.NodeListen {
		if strings.HasSuffix(l, ":0") {
			return "http path=/healthz status=200 interval=1s timeout=500ms rise=1 fall=2"
		}
	}
	return "http port=9080 path=/healthz status=200 interval=1s timeout=500ms rise=1 fall=2" // node.DefaultAdminPort
}

// checksServicePort says whether the director checks the nodes' /healthz on
// their service port: an http check line without port=, in the kept
// director.conf (the user's, perhaps from before checks moved to the admin
// port) or in the one to be written.
func (c *Cluster) checksServicePort() bool {
	lines := []string{"check " + c.checkLine()}
	if c.ConfKept {
		b, err := os.ReadFile(c.ConfPath)
		if err != nil {
			return true // unknown: answer both
		}
		lines = strings.Split(string(b), "\n")
	}
	for _, l := range lines {
		f := strings.Fields(strings.SplitN(l, "#", 2)[0])
		if len(f) >= 2 && f[0] == "check" && strings.HasPrefix(f[1], "http") && !strings.Contains(l, "port=") {
			return true
		}
	}
	return false
}

// WriteDirectorConf writes the director's configuration for the running
// nodes with weights (nil: 1 each); a running director reloads it.
func (c *Cluster) WriteDirectorConf(scheduler string, weights []int) error {
	check := c.checkLine()
	var b strings.Builder
	fmt.Fprintf(&b, "# written by corral up on its first start; yours to edit (the director applies\n# changes live); corral up --reset writes it anew.\nadmin %s\nmeta %s\ndocroot /www\n", c.Cfg.Admin, c.MetaAddr())
	if c.Cfg.Interface != "" {
		fmt.Fprintf(&b, "interface %s\n", c.Cfg.Interface)
	}
	b.WriteString("\nservice www {\n")
	fmt.Fprintf(&b, "    vip %s\n    dataplane %s\n    scheduler %s\n    check %s\n", c.Cfg.VIP, c.Cfg.Dataplane, scheduler, check)
	servers := func() {
		for i, n := range c.Nodes {
			w := 1
			if weights != nil {
				w = weights[i]
			}
			fmt.Fprintf(&b, "    server %s weight=%d\n", n.Addr, w)
		}
		b.WriteString("}\n")
	}
	servers()
	if c.Cfg.L7VIP != "" {
		fmt.Fprintf(&b, "\nservice www-l7 {\n    vip %s\n    dataplane l7\n    scheduler %s\n    check %s\n", c.Cfg.L7VIP, scheduler, check)
		servers()
	}
	if c.Cfg.L4VIP != "" {
		l4sched := scheduler
		if sched.Supports(l4sched, "l4") != nil {
			l4sched = "wlc" // mwlc weighs HTTP requests: l7 only
		}
		fmt.Fprintf(&b, "\nservice www-l4 {\n    vip %s\n    dataplane l4\n    scheduler %s\n    check %s\n", c.Cfg.L4VIP, l4sched, check)
		servers()
	}
	c.ConfPath = filepath.Join(c.Data, "director.conf")
	tmp := c.ConfPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.ConfPath)
}

// Stop ends the director, the nodes, then the file system.
func (c *Cluster) Stop() {
	if c.Director != nil {
		c.Director.Stop()
	}
	var wg sync.WaitGroup
	for _, p := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	c.FS.Stop()
	if c.Station != nil {
		c.Station.Stop()
	}
}

// UploadSample puts the embedded sample site under /www/SampleDomain unless
// it is there already, plus a 1 MiB file for Range requests. It runs the
// corral binary's `fs` commands, as a user would, so that this package
// needs no file-system client: the site is put together under a temporary
// name and renamed into place, so it is there whole or not at all.
func (f *FS) UploadSample(ctx context.Context) error {
	fsCmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, f.Bin, append([]string{"fs", "--meta", f.MetaAddr()}, args...)...)
		cmd.Env = append(os.Environ(), proto.SecretEnv+"="+f.SecretFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("corral fs %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return out, nil
	}
	dir := "/www/" + SampleDomain
	if _, err := fsCmd("stat", dir+"/index.html"); err == nil {
		return nil
	}
	local, err := os.MkdirTemp("", "corral-site-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(local)
	ents, err := site.ReadDir("site")
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	for _, e := range ents {
		if files[e.Name()], err = site.ReadFile("site/" + e.Name()); err != nil {
			return err
		}
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	files["big.bin"] = big
	tmp := fmt.Sprintf("/www/.%s.%d", SampleDomain, os.Getpid())
	if _, err := fsCmd("mkdir", "-p", tmp); err != nil {
		return err
	}
	for name, b := range files {
		lp := filepath.Join(local, name)
		if err := os.WriteFile(lp, b, 0o644); err != nil {
			return err
		}
		if _, err := fsCmd("put", lp, tmp+"/"+name); err != nil {
			return err
		}
	}
	// A directory left by an upload that stopped half-way (before this
	// one was atomic) is set aside rather than merged into.
	if _, err := fsCmd("stat", dir); err == nil {
		if _, err := fsCmd("mv", dir, fmt.Sprintf("/www/.%s.old.%d", SampleDomain, os.Getpid())); err != nil {
			return err
		}
	}
	_, err = fsCmd("mv", tmp, dir)
	return err
}

// ClusterHosts names the test-bed hosts of a cluster: director, node1..N,
// meta, iod1..M.
func ClusterHosts(nodes, iods int) []string {
	hosts := []string{"director"}
	for i := 1; i <= nodes; i++ {
		hosts = append(hosts, fmt.Sprintf("node%d", i))
	}
	hosts = append(hosts, "meta")
	for i := 1; i <= iods; i++ {
		hosts = append(hosts, fmt.Sprintf("iod%d", i))
	}
	return hosts
}

// Hosts are machines roles can run on, such as a test bed's.
type Hosts interface {
	// HostAddr is host's address.
	HostAddr(host string) (string, error)
	// Wrap is the command prefix that runs a program on host.
	Wrap(host string) []string
}

// OnTestbed puts every role of a cluster of nodes and iods on its own host
// (the hosts ClusterHosts names): each listens on its host's address and
// runs there; the VIP is the director host's port 80. With dataplane xdp
// the VIP is instead the address ending in .100 on the director's /24 (the
// director puts it on its eth0, the nodes on their loopback) and the nodes
// listen on port 80, as direct routing keeps the port.
func (c *ClusterConfig) OnTestbed(hosts Hosts, nodes, iods int) error {
	var err error
	at := func(h, port string) string {
		a, e := hosts.HostAddr(h)
		if e != nil && err == nil {
			err = e
		}
		return a + port
	}
	// Every metadata member on host meta, on ports 7400, 7401, ...
	members := max(len(splitList(c.MetaListen)), 1)
	var metas []string
	for i := 0; i < members; i++ {
		metas = append(metas, at("meta", fmt.Sprintf(":%d", 7400+i)))
	}
	c.MetaListen, c.VIP = strings.Join(metas, ","), at("director", ":80")
	c.IODListens, c.NodeListen = nil, nil
	for i := 1; i <= iods; i++ {
		c.IODListens = append(c.IODListens, at(fmt.Sprintf("iod%d", i), ":7410"))
	}
	nodePort := ":8080"
	if c.Dataplane == "xdp" {
		d, e := netip.ParseAddrPort(c.VIP)
		if e != nil || !d.Addr().Is4() {
			return fmt.Errorf("director address %q: %v", c.VIP, e)
		}
		a := d.Addr().As4()
		a[3] = 100
		c.VIP, c.Interface, nodePort = netip.AddrPortFrom(netip.AddrFrom4(a), 80).String(), "eth0", ":80"
	}
	for i := 1; i <= nodes; i++ {
		c.NodeListen = append(c.NodeListen, at(fmt.Sprintf("node%d", i), nodePort))
	}
	c.Wrap = hosts.Wrap
	return err
}
