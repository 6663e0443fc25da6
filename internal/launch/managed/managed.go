// Package managed starts a whole cluster on one machine under a management
// station (`corral up`, its tests and `corral bench mgmt`): package launch
// runs the processes, this package talks to the station through its API —
// it waits for it, gives it the first configuration (made from up's flags,
// or imported from an older up's DATA/director.conf), and makes the join
// tokens every role starts with. docs/up.md.
package managed

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/safefile"
	"github.com/corral-cluster/corral/internal/sched"
)

// Names in the configuration up makes.
const (
	// LogicalCluster is the logical cluster every node of up is in.
	LogicalCluster = "web"
	// DirectorName is the director's member name.
	DirectorName = "director"
	// NodeAdminPort is the nodes' admin port, where the director checks
	// /healthz (node.DefaultAdminPort).
	NodeAdminPort = 9080
)

// Options are what a managed start adds to launch's cluster configuration.
type Options struct {
	// Station is the station's API address (default NET.1:7600 of the
	// first metadata member's host); EtcdClient and EtcdPeer its
	// embedded etcd's (default the same host, 7601 and 7602).
	Station, EtcdClient, EtcdPeer string
	// Reset applies the configuration made from the flags as a new
	// version even when the station has one.
	Reset bool
	// TokenTTL is the join tokens' lifetime (default 1 h). Members keep
	// their credential (DATA/state/ROLE), so restarts after it still work.
	TokenTTL time.Duration
	// Log receives what the start did ("imported ...", "version N").
	Log func(format string, a ...any)
}

// Started is what the start did.
type Started struct {
	// Version is the configuration version current after the start.
	Version int64
	// Applied says the start stored a version (first run, --reset, import).
	Applied bool
	// Imported is the director.conf imported into it ("" if none); it
	// was renamed to Imported+".imported".
	Imported string
	// Services are the services of the configuration the cluster runs
	// (a second start runs the stored one, not the flags'); nil if it
	// could not be read.
	Services []clustercfg.Service
	// AdminPassword is the file holding the password of the dashboard's
	// user admin that up made ("" if the user set their own).
	AdminPassword string
}

// Start starts the cluster cfg describes under a station.
func Start(ctx context.Context, cfg launch.ClusterConfig, opt Options) (*launch.Cluster, *Started, error) {
	host := "127.0.0.1"
	if m := strings.Split(cfg.MetaListen, ","); len(m) > 0 {
		if h, _, err := net.SplitHostPort(strings.TrimSpace(m[0])); err == nil {
			host = h
		}
	}
	if opt.Station == "" {
		opt.Station = net.JoinHostPort(host, "7600")
	}
	sh, _, err := net.SplitHostPort(opt.Station)
	if err != nil {
		return nil, nil, fmt.Errorf("station address %q: %v", opt.Station, err)
	}
	if opt.EtcdClient == "" {
		opt.EtcdClient = net.JoinHostPort(sh, "7601")
	}
	if opt.EtcdPeer == "" {
		opt.EtcdPeer = net.JoinHostPort(sh, "7602")
	}
	if opt.TokenTTL == 0 {
		opt.TokenTTL = time.Hour
	}
	if opt.Log == nil {
		opt.Log = func(string, ...any) {}
	}
	st := &Started{}
	since := time.Now()
	cfg.Station = &launch.StationConfig{Listen: opt.Station, EtcdClient: opt.EtcdClient, EtcdPeer: opt.EtcdPeer, Log: opt.Log,
		Prepare: func(ctx context.Context, c *launch.Cluster) error { return prepare(ctx, c, opt, st) }}
	c, err := launch.StartCluster(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	// Up only once the director and the nodes run the current version:
	// they serve nothing before their first one.
	names := []string{DirectorName}
	for i := range cfg.NodeListen {
		names = append(names, NodeName(i))
	}
	cl, err := Client(c)
	if err == nil {
		err = WaitApplied(ctx, cl, names, st.Version, since, 30*time.Second)
	}
	if err != nil {
		opt.Log("warning: %v", err)
	}
	return c, st, nil
}

// WaitApplied waits (at most limit) until every member of names reports
// version v (or a later one) applied from a process started after since
// (the station keeps the last report of a process that died); a member
// that reports an error for it, or is missing, is named in the error.
func WaitApplied(ctx context.Context, cl *api.Client, names []string, v int64, since time.Time, limit time.Duration) error {
	end := time.Now().Add(limit)
	var last error
	for {
		var ms []api.MemberStatus
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cl.Do(cctx, http.MethodGet, api.RouteMembers, nil, &ms)
		cancel()
		if err == nil {
			by := map[string]api.MemberStatus{}
			for _, m := range ms {
				by[m.Name] = m
			}
			last = nil
			for _, n := range names {
				m, ok := by[n]
				switch {
				case !ok || m.Started.Before(since):
					last = fmt.Errorf("%s has not joined the station", n)
				case m.Version < v && m.Error != "":
					last = fmt.Errorf("%s runs version %d: it could not apply %d: %s", n, m.Version, v, m.Error)
				case m.Version < v:
					last = fmt.Errorf("%s runs version %d, not %d yet", n, m.Version, v)
				}
				if last != nil {
					break
				}
			}
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(end) {
			return fmt.Errorf("not every member applied version %d within %v: %v", v, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client is an admin client of c's station (its bootstrap admin token, its CA).
func Client(c *launch.Cluster) (*api.Client, error) {
	tok, err := os.ReadFile(c.AdminTokenFile())
	if err != nil {
		return nil, fmt.Errorf("station admin token: %w", err)
	}
	return api.NewClientCAFile([]string{c.StationURL()}, strings.TrimSpace(string(tok)), c.StationCA())
}

// WaitStation waits (at most limit) until the station has written its CA
// and admin token and answers /healthz, and returns an admin client.
func WaitStation(ctx context.Context, c *launch.Cluster, limit time.Duration) (*api.Client, error) {
	end := time.Now().Add(limit)
	var last error
	for time.Now().Before(end) {
		cl, err := Client(c)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = cl.Do(cctx, http.MethodGet, api.RouteHealthz, nil, nil)
			cancel()
			if err == nil {
				return cl, nil
			}
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := "(no log)"
	if c.Station != nil {
		log = launch.Tail(c.Station.Log, 3)
	}
	return nil, fmt.Errorf("station %s not ready within %v: %v (log %s)", c.StationURL(), limit, last, log)
}

// prepare runs once the station serves: the first configuration (or
// --reset's), then a join token per role kind.
func prepare(ctx context.Context, c *launch.Cluster, opt Options, st *Started) error {
	cl, err := WaitStation(ctx, c, 30*time.Second)
	if err != nil {
		return err
	}
	var cur api.Version
	err = cl.Do(ctx, http.MethodGet, api.RouteConfig, nil, &cur)
	var se *api.StatusError
	if err != nil && !(errors.As(err, &se) && se.Status == http.StatusNotFound) {
		return fmt.Errorf("station: current configuration: %w", err)
	}
	st.Version = cur.Version
	if cc, err := clustercfg.Parse("station", []byte(cur.YAML)); err == nil && cur.Version > 0 {
		st.Services = cc.Services
	}
	first := cur.Version == 0
	if first || opt.Reset {
		conf := filepath.Join(c.Data, "director.conf")
		var cc *clustercfg.Config
		if _, err := os.Stat(conf); err == nil && first && !opt.Reset {
			// An older up's file, perhaps edited: it becomes version 1,
			// once (renamed aside).
			d, err := config.Load(conf)
			if err == nil {
				cc, err = clustercfg.Import(d)
			}
			if err != nil {
				return fmt.Errorf("import %s: %w (fix it, or corral up --reset: the flags' configuration instead)", conf, err)
			}
			Complete(cc, c.Cfg)
			st.Imported = conf
		} else {
			cc = FromFlags(c.Cfg)
		}
		y, err := cc.Marshal()
		if err != nil {
			return fmt.Errorf("configuration from the flags: %w", err)
		}
		comment := "corral up: from its flags"
		if st.Imported != "" {
			comment = "corral up: imported " + st.Imported
		} else if !first {
			comment = "corral up --reset: from its flags"
		}
		base := cur.Version
		var rep api.ApplyReply
		if err := cl.Do(ctx, http.MethodPut, api.RouteConfig, api.ApplyRequest{Base: base, YAML: string(y), Comment: comment}, &rep); err != nil {
			return fmt.Errorf("station: apply the first configuration: %w", err)
		}
		st.Version, st.Applied = rep.Version, !rep.Unchanged
		st.Services = cc.Services
		if st.Imported != "" {
			if err := os.Rename(conf, conf+".imported"); err != nil {
				return err
			}
			opt.Log("imported %s as configuration version %d (the file is now %s.imported)", conf, rep.Version, conf)
		} else if st.Applied {
			opt.Log("configuration version %d applied from the flags", rep.Version)
		}
	}
	if st.AdminPassword, err = adminPassword(ctx, cl, c, first); err != nil {
		return err
	}
	ca, err := os.ReadFile(c.StationCA())
	if err != nil {
		return fmt.Errorf("station CA: %w", err)
	}
	caHash, err := CAHash(ca)
	if err != nil {
		return err
	}
	for _, kind := range []string{api.RoleDirector, api.RoleNode, api.RoleMeta, api.RoleIOD} {
		var tok api.Token
		// One token per role kind serves every member of that kind up
		// starts (and restarts within the TTL): multi-use on purpose.
		if err := cl.Do(ctx, http.MethodPost, api.RouteTokens, api.TokenRequest{Role: kind, TTL: opt.TokenTTL, MultiUse: true}, &tok); err != nil {
			return fmt.Errorf("station: join token for %s: %w", kind, err)
		}
		if err := c.WriteToken(kind, JoinToken(tok, caHash)); err != nil {
			return err
		}
	}
	return nil
}

// CAHash is the first 32 hex digits of the sha256 of the CA certificate's
// DER in caPEM: the third part of a join token (api.CAHashPEM).
func CAHash(caPEM []byte) (string, error) {
	h := api.CAHashPEM(caPEM)
	if h == "" {
		return "", errors.New("station CA: no PEM certificate in it")
	}
	return h, nil
}

// JoinToken is the token string roles take: ID.SECRET.CAHASH (a Secret
// that is already the whole string is kept).
func JoinToken(t api.Token, caHash string) string {
	if strings.Count(t.Secret, ".") == 2 {
		return t.Secret
	}
	return t.ID + "." + t.Secret + "." + caHash
}

// NodeName is the member name of node i (0-based), as launch names it.
func NodeName(i int) string { return fmt.Sprintf("node%d", i+1) }

// Weight is a weight field's value.
func Weight(w int) *int { return &w }

// FromFlags is the cluster configuration up makes from its flags: the
// logical cluster "web" of every node, the director, the service "www" on
// the VIP (and the other dataplane's), the sample domain and its docroot,
// the file system's metadata members.
func FromFlags(cfg launch.ClusterConfig) *clustercfg.Config {
	c := &clustercfg.Config{}
	check := func() *clustercfg.Check {
		return &clustercfg.Check{Type: "http", Port: NodeAdminPort, Path: "/healthz", Status: 200,
			Interval: "1s", Timeout: "500ms", Rise: 1, Fall: 2}
	}
	svc := func(name, vip, dp, sc string) clustercfg.Service {
		return clustercfg.Service{Name: name, Cluster: LogicalCluster, VIP: vip, Dataplane: dp, Scheduler: sc, Check: check()}
	}
	c.Services = append(c.Services, svc("www", cfg.VIP, cfg.Dataplane, cfg.Scheduler))
	if cfg.L7VIP != "" {
		c.Services = append(c.Services, svc("www-l7", cfg.L7VIP, "l7", cfg.Scheduler))
	}
	if cfg.L4VIP != "" {
		l4 := cfg.Scheduler
		if sched.Supports(l4, "l4") != nil {
			l4 = "wlc" // mwlc weighs HTTP requests: l7 only
		}
		c.Services = append(c.Services, svc("www-l4", cfg.L4VIP, "l4", l4))
	}
	Complete(c, cfg)
	return c
}

// Complete adds what up's flags say and c lacks: the logical cluster, the
// sample domain, the nodes, the director, the file system (an imported
// director.conf has services and a director only).
func Complete(c *clustercfg.Config, cfg launch.ClusterConfig) {
	if len(c.Clusters) == 0 {
		c.Clusters = []clustercfg.Cluster{{Name: LogicalCluster, Description: "corral up's nodes"}}
	}
	if len(c.Domains) == 0 && len(c.Services) > 0 {
		// The sample site, the nodes' default domain, on the first service.
		c.Domains = []clustercfg.Domain{{Name: launch.SampleDomain, Service: c.Services[0].Name, Docroot: "/www/" + launch.SampleDomain}}
	}
	if len(c.Nodes) == 0 {
		for i, l := range cfg.NodeListen {
			n := clustercfg.Node{Name: NodeName(i), Address: l, Cluster: c.Clusters[0].Name, Weight: Weight(1),
				DefaultDomain: launch.SampleDomain}
			if h, _, err := net.SplitHostPort(l); err == nil {
				n.Admin = net.JoinHostPort(h, fmt.Sprint(NodeAdminPort))
			}
			c.Nodes = append(c.Nodes, n)
		}
	}
	if len(c.Directors) == 0 {
		c.Directors = []clustercfg.Director{{}}
	}
	d := &c.Directors[0]
	d.Name = DirectorName
	if d.Admin == "" {
		d.Admin = cfg.Admin
	}
	if d.Interface == "" {
		d.Interface = cfg.Interface
	}
	if len(c.FileSystem.Meta) == 0 {
		for _, m := range strings.Split(cfg.MetaListen, ",") {
			if m = strings.TrimSpace(m); m != "" {
				c.FileSystem.Meta = append(c.FileSystem.Meta, m)
			}
		}
	}
	if c.FileSystem.Docroot == "" {
		c.FileSystem.Docroot = "/www"
	}
}

// AdminPasswordFile is where up keeps the password it gave the station's
// user admin: DATA/mgmt/admin.password (0600).
func AdminPasswordFile(c *launch.Cluster) string {
	return filepath.Join(c.StationDir(), "admin.password")
}

// adminPassword gives the station's user admin a random password when
// the station is new (first), so that the dashboard has a login (the
// bootstrap token is not one a person types), and keeps it in
// AdminPasswordFile. An older station's admin may have a password of the
// user's own, which is never replaced: "" then, unless the file is there.
func adminPassword(ctx context.Context, cl *api.Client, c *launch.Cluster, first bool) (string, error) {
	file := AdminPasswordFile(c)
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	if !first {
		return "", nil
	}
	var b [15]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	pw := strings.ToLower(base32.StdEncoding.EncodeToString(b[:])) // 24 characters, 120 bits
	// Set, then written: a file is never left naming a password the
	// station does not have.
	if err := cl.Do(ctx, http.MethodPost, api.RouteUsers, api.UserRequest{User: api.User{Name: "admin", Role: api.RoleAdmin}, Password: pw}, nil); err != nil {
		return "", fmt.Errorf("station: the dashboard's admin password: %w", err)
	}
	if err := safefile.WriteSecret(file, []byte(pw+"\n")); err != nil {
		return "", err
	}
	return file, nil
}
