package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/testbed"
)

// HABedConfig describes a test bed of several directors in one HA group in
// front of the same nodes: hosts client, router, d1..dN, node1..3, meta and
// iod1, with the group's etcd in this process on the machine's address on
// the bed.
type HABedConfig struct {
	Bin, Data string
	// Name is the bed's name (at most 8 characters); Subnet its /24.
	Name   string
	Subnet netip.Prefix
	// Directors is how many (2 or 3); Mode ha.ActiveStandby or
	// ha.ActiveActive.
	Directors int
	Mode      string
	// DirectorRate shapes the directors' links ("" unshaped).
	DirectorRate string
	LeaseTTL     time.Duration
	// Scheduler of the service (default rr: each director would place a
	// new flow differently, so established flows surviving a change of
	// director shows the synced table at work, not a shared hash).
	Scheduler string
	// Priority of director i (0-based); nil: d1 200, the others 100 (d1
	// takes the VIP back when it returns).
	Priority func(i int) int
	Nodes    int // default 3
	// NoDirectors leaves the Corral directors unstarted (the keepalived
	// baseline runs alone); StartDirector starts one later.
	NoDirectors bool
	Log         func(format string, a ...any)
}

// HADirector is one director of the bed.
type HADirector struct {
	Name     string // d1, d2, ...
	Addr     netip.Addr
	MAC      net.HardwareAddr
	Dir      string // its configuration, token and log
	Conf     string
	Priority int

	mu   sync.Mutex
	proc *launch.Proc
}

// Proc is the running process (nil when stopped).
func (d *HADirector) Proc() *launch.Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc
}

// Log is the director's log file.
func (d *HADirector) Log() string { return filepath.Join(d.Dir, "director.log") }

// HABed is a running HA test bed.
type HABed struct {
	Cfg       HABedConfig
	Bed       *testbed.Bed
	Cluster   *launch.Cluster // the file system and the nodes
	Directors []*HADirector
	VIP       netip.AddrPort
	NodeMACs  map[string]string // MAC -> node address
	EtcdURL   string
	KeyFile   string

	etcd *haEtcd
}

// HAHosts are the bed's hosts for n directors.
func HAHosts(n, nodes int) []string {
	hosts := []string{"client", "router"}
	for i := 1; i <= n; i++ {
		hosts = append(hosts, fmt.Sprintf("d%d", i))
	}
	for i := 1; i <= nodes; i++ {
		hosts = append(hosts, fmt.Sprintf("node%d", i))
	}
	return append(hosts, "meta", "iod1")
}

// StartHABed builds the bed and starts the file system, the nodes and
// every director; it returns once each director serves its admin API (HA
// election and sync go on by themselves: WaitActive waits for them).
// Close removes everything, also after a failed start.
func StartHABed(ctx context.Context, cfg HABedConfig) (hb *HABed, err error) {
	if err := testbed.CheckRoot(); err != nil {
		return nil, err
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = "rr"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Mode == "" {
		cfg.Mode = ha.ActiveStandby
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.Priority == nil {
		cfg.Priority = func(i int) int {
			if i == 0 {
				return 200
			}
			return 100
		}
	}
	spec := testbed.NewSpecOn(cfg.Name, cfg.Subnet, HAHosts(cfg.Directors, cfg.Nodes), "")
	for i := range spec.Hosts {
		if strings.HasPrefix(spec.Hosts[i].Name, "d") {
			spec.Hosts[i].Rate = cfg.DirectorRate
		}
	}
	testbed.Down(cfg.Name) // what an interrupted run left
	bed, err := testbed.Up(spec)
	if err != nil {
		return nil, err
	}
	hb = &HABed{Cfg: cfg, Bed: bed, NodeMACs: map[string]string{}}
	defer func() {
		if err != nil {
			hb.Close()
			hb = nil
		}
	}()
	a := bed.Subnet.Addr().As4()
	a[3] = 100
	hb.VIP = netip.AddrPortFrom(netip.AddrFrom4(a), 80)
	gw := bed.Gateway().String()
	if hb.etcd, err = startHAEtcd(filepath.Join(cfg.Data, "etcd"), gw+":7601", gw+":7602"); err != nil {
		return hb, err
	}
	hb.EtcdURL = "http://" + gw + ":7601"
	hb.KeyFile = filepath.Join(cfg.Data, "ha.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(hb.KeyFile, []byte(fmt.Sprintf("%x\n", key)), 0o600); err != nil {
		return hb, err
	}
	for i := 1; i <= cfg.Directors; i++ {
		if err := bed.PrepareDR(xdp.AttachPass, fmt.Sprintf("d%d", i), "client"); err != nil {
			return hb, err
		}
	}
	meta, _ := bed.HostAddr("meta")
	iod, _ := bed.HostAddr("iod1")
	cfg.Log("test bed %s up (%s); starting the file system\n", cfg.Name, bed.Subnet)
	fs, err := launch.StartFSWrapped(ctx, cfg.Bin, cfg.Data, meta+":7400", []string{iod + ":7410"}, bed.Wrap)
	if err != nil {
		return hb, err
	}
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: cfg.Data, VIP: hb.VIP.String(), Dataplane: "xdp", Scheduler: cfg.Scheduler,
		Check: "http port=9080 path=/healthz status=200 interval=300ms timeout=200ms rise=1 fall=2", Wrap: bed.Wrap}
	hb.Cluster = &launch.Cluster{FS: fs, Cfg: cc}
	if err := fs.UploadSample(ctx); err != nil {
		return hb, fmt.Errorf("upload sample site: %w", err)
	}
	for i := 1; i <= cfg.Nodes; i++ {
		h := fmt.Sprintf("node%d", i)
		addr, _ := bed.HostAddr(h)
		hb.Cluster.Cfg.NodeListen = append(hb.Cluster.Cfg.NodeListen, addr+":80")
		p, err := hb.Cluster.StartNode(ctx, i-1, addr+":80")
		if err != nil {
			return hb, err
		}
		hb.Cluster.Nodes = append(hb.Cluster.Nodes, p)
		mac, err := bed.MAC(h)
		if err != nil {
			return hb, err
		}
		hb.NodeMACs[mac.String()] = addr
	}
	for i := 0; i < cfg.Directors; i++ {
		name := fmt.Sprintf("d%d", i+1)
		h, _ := bed.Host(name)
		mac, err := bed.MAC(name)
		if err != nil {
			return hb, err
		}
		d := &HADirector{Name: name, Addr: h.Addr, MAC: mac, Dir: filepath.Join(cfg.Data, name), Priority: cfg.Priority(i)}
		d.Conf = filepath.Join(d.Dir, "director.conf")
		if err := hb.writeConf(d); err != nil {
			return hb, err
		}
		hb.Directors = append(hb.Directors, d)
	}
	if cfg.Mode == ha.ActiveActive {
		if err := bed.SetupRouter("router"); err != nil {
			return hb, err
		}
		if err := bed.RouteVia("client", hb.VIP.Addr(), "router"); err != nil {
			return hb, err
		}
		var names []string
		for _, d := range hb.Directors {
			names = append(names, d.Name)
		}
		if err := bed.SetECMP("router", hb.VIP.Addr(), names...); err != nil {
			return hb, err
		}
	}
	if cfg.NoDirectors {
		return hb, nil
	}
	// d1 first, so that it is the first active.
	for _, d := range hb.Directors {
		if err := hb.StartDirector(ctx, d.Name); err != nil {
			return hb, err
		}
	}
	return hb, nil
}

// writeConf writes director d's configuration: the service over every node
// and the ha block.
func (hb *HABed) writeConf(d *HADirector) error {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# written by corral bench failover\nadmin 127.0.0.1:7500\nmeta %s\ndocroot /www\ninterface eth0\n\n", hb.Cluster.MetaAddr())
	fmt.Fprintf(&b, "ha {\n    group web\n    name %s\n    mode %s\n    priority %d\n    etcd %s\n    sync %s:7700\n    key-file %s\n    lease-ttl %ds\n}\n\n",
		d.Name, hb.Cfg.Mode, d.Priority, hb.EtcdURL, d.Addr, hb.KeyFile, int(hb.Cfg.LeaseTTL/time.Second))
	fmt.Fprintf(&b, "service www {\n    vip %s\n    dataplane xdp\n    scheduler %s\n    check %s\n", hb.VIP, hb.Cfg.Scheduler, hb.Cluster.Cfg.Check)
	for _, n := range hb.Cluster.Cfg.NodeListen {
		fmt.Fprintf(&b, "    server %s weight=1\n", n)
	}
	b.WriteString("}\n")
	return os.WriteFile(d.Conf, []byte(b.String()), 0o644)
}

// Director returns the named director.
func (hb *HABed) Director(name string) (*HADirector, error) {
	for _, d := range hb.Directors {
		if d.Name == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("the HA bed has no director %q", name)
}

// StartDirector starts (or restarts) a director.
func (hb *HABed) StartDirector(ctx context.Context, name string) error {
	d, err := hb.Director(name)
	if err != nil {
		return err
	}
	w := hb.Bed.Wrap(name)
	args := append(append([]string{}, w[1:]...), hb.Cfg.Bin, "director", "--config", d.Conf, "--secret-file", hb.Cluster.ReadOnlyFile)
	p, err := launch.Start(ctx, name, w[0], d.Log(), args...)
	if err != nil {
		return fmt.Errorf("director %s: %w", name, err)
	}
	d.mu.Lock()
	d.proc = p
	d.mu.Unlock()
	return nil
}

// Kill kills a director with SIGKILL (its XDP program goes with its
// link's file descriptor) and returns when it is gone, with the moment the
// signal was sent.
func (hb *HABed) Kill(name string) (time.Time, error) {
	d, err := hb.Director(name)
	if err != nil {
		return time.Time{}, err
	}
	d.mu.Lock()
	p := d.proc
	d.proc = nil
	d.mu.Unlock()
	if p == nil {
		return time.Time{}, fmt.Errorf("director %s is not running", name)
	}
	at := time.Now()
	p.Kill()
	return at, nil
}

// Ctl runs `corral ctl ARGS...` against director name's admin API, inside
// its host, with its admin token.
func (hb *HABed) Ctl(ctx context.Context, name string, args ...string) ([]byte, error) {
	d, err := hb.Director(name)
	if err != nil {
		return nil, err
	}
	full := append([]string{hb.Cfg.Bin, "ctl", "--admin", "127.0.0.1:7500", "--token-file", filepath.Join(d.Dir, "admin.token")}, args...)
	cmd, err := hb.Bed.Command(ctx, name, full...)
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: corral ctl %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// Status is director name's view of the group (`corral ctl --json ha`).
func (hb *HABed) Status(ctx context.Context, name string) (ha.Status, error) {
	var st ha.Status
	out, err := hb.Ctl(ctx, name, "--json", "ha")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("%s: corral ctl --json ha: %v: %.200s", name, err, out)
	}
	return st, nil
}

// Handover asks director from to hand the VIPs to director to ("" = the
// best) with `corral ctl handover`; it returns when the command does.
func (hb *HABed) Handover(ctx context.Context, from, to string) error {
	args := []string{"handover"}
	if to != "" {
		args = append(args, "--to", to)
	}
	_, err := hb.Ctl(ctx, from, args...)
	return err
}

// Running lists the directors whose process runs.
func (hb *HABed) Running() []string {
	var out []string
	for _, d := range hb.Directors {
		if d.Proc() != nil {
			out = append(out, d.Name)
		}
	}
	return out
}

// WaitSettled waits until, among the running directors, exactly one is
// active and every other is a standby in sync (active-standby), or every
// one is active (active-active); it returns the active one (the first, in
// active-active). Polled every 100 ms, for at most timeout.
func (hb *HABed) WaitSettled(ctx context.Context, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		active, standby, n := "", 0, 0
		var states []string
		for _, name := range hb.Running() {
			n++
			st, err := hb.Status(ctx, name)
			if err != nil {
				states = append(states, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			states = append(states, name+" "+st.State)
			switch st.State {
			case ha.StateActive:
				if active == "" {
					active = name
				} else if hb.Cfg.Mode != ha.ActiveActive {
					active = "!" // two say active: wait for one to yield
				}
				if hb.Cfg.Mode == ha.ActiveActive {
					standby++ // counts as settled
				}
			case ha.StateStandby:
				standby++
			}
		}
		last = strings.Join(states, ", ")
		if active != "" && active != "!" && (hb.Cfg.Mode == ha.ActiveActive && standby == n || hb.Cfg.Mode != ha.ActiveActive && standby == n-1) {
			return active, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the HA group did not settle within %v: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitServing waits until the VIP answers from the client host (at most
// timeout): a director forwards and has learnt the nodes' MACs.
func (hb *HABed) WaitServing(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: hb.Bed.DialContext("client"), DisableKeepAlives: true}}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get("http://" + hb.VIP.String() + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the VIP %s never answered from the client host: %v", hb.VIP, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Logs tails every director's log (for failure messages).
func (hb *HABed) Logs(n int) string {
	var b strings.Builder
	for _, d := range hb.Directors {
		fmt.Fprintf(&b, "\n%s: %s", d.Name, launch.Tail(d.Log(), n))
	}
	return b.String()
}

// StopDirectors stops every running director cleanly (SIGTERM: an active
// one hands over or closes its fence first).
func (hb *HABed) StopDirectors() {
	for _, d := range hb.Directors {
		d.mu.Lock()
		p := d.proc
		d.proc = nil
		d.mu.Unlock()
		if p != nil {
			p.Stop()
		}
	}
}

// Close stops everything and removes the bed.
func (hb *HABed) Close() {
	for _, d := range hb.Directors {
		if p := d.Proc(); p != nil {
			p.Stop()
		}
	}
	if hb.Cluster != nil {
		hb.Cluster.Stop()
	}
	if hb.etcd != nil {
		hb.etcd.stop()
	}
	testbed.Down(hb.Cfg.Name)
}
