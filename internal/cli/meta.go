package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/corral-cluster/corral/internal/pfs/client"

	"github.com/corral-cluster/corral/internal/pfs/layout"
	"github.com/corral-cluster/corral/internal/pfs/meta"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/replog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func metaCmd() *cobra.Command {
	var listen, data, stripe string
	var sf secFlags
	var lf limitFlags
	var reserve float64
	var httpFlag string
	var rf raftFlags
	var lostAfter time.Duration
	var healRate string
	var jf joinFlags
	c := &cobra.Command{
		Use:   "meta --listen HOST:PORT --data DIR [--id N --peers ID=ADDR,... | --id N --join]",
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
another file system is refused.

Replication (docs/meta.md): with --id and --peers the server is one member
of a Raft group of 3 or 5; a change is acknowledged once a majority holds it
on disk, and only the leader serves (the others answer with the leader's
address, which clients follow). Every member is started with the same
--peers list, its own --id, and --listen equal to its own entry in --peers.
A member added later with 'corral fs meta add ID ADDR' is started with --id
and --join on an empty --data: it catches up from a snapshot of the leader.
The Raft log lives in DIR/raft.

With --join URL (a management station's) it joins the station with the token
(once; the credential is kept in --state, default DIR-agent beside --data):
the join hands over the cluster secret (it is written to DIR/cluster.secret
if that is missing, and must equal it if not).
The leader applies filesystem.layouts of every configuration version, as
'corral fs layout set' would; every member reports the version.`,
		Example: `  corral meta --listen 127.0.0.1:7400 --data /var/lib/corral/meta
  # three members (same --peers everywhere, own --id and --listen):
  corral meta --id 1 --listen 127.0.0.1:7400 --data m1 --peers 1=127.0.0.1:7400,2=127.0.0.2:7400,3=127.0.0.3:7400
  corral meta --id 2 --listen 127.0.0.2:7400 --data m2 --peers 1=127.0.0.1:7400,2=127.0.0.2:7400,3=127.0.0.3:7400
  corral meta --id 3 --listen 127.0.0.3:7400 --data m3 --peers 1=127.0.0.1:7400,2=127.0.0.2:7400,3=127.0.0.3:7400
  # a fourth member, after 'corral fs meta add 4 127.0.0.4:7400':
  corral meta --id 4 --listen 127.0.0.4:7400 --data m4 --join
  # taking the secret and layouts from a management station:
  corral meta --listen 127.0.0.1:7400 --data m1 --join https://127.0.0.1:7600 --token-file meta.token`,
		Args: cobra.ArbitraryArgs, // meta's --join: see joinFlags.metaJoin
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if rf.join, err = jf.metaJoin(args); err != nil {
				return err
			}
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
			if lostAfter <= 0 {
				return usageError{fmt.Errorf("--lost-after %s: want a positive duration such as 30m", lostAfter)}
			}
			rate, err := parseSize(healRate)
			if err != nil || rate <= 0 {
				return usageError{fmt.Errorf("--heal-rate %q: want a positive size per second such as 64M", healRate)}
			}
			if err := os.MkdirAll(data, 0o700); err != nil {
				return err
			}
			if err := rf.check(listen); err != nil {
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
			started := make(chan struct{})
			if jf.enabled() {
				a, err := metaJoin(ctx, &jf, listen, httpListen, data, &sec, started)
				if err != nil {
					return err
				}
				if err := sf.joinedCert(&sec, a.State()); err != nil {
					return err
				}
				actx, cancel := context.WithCancel(ctx)
				wait := runAgent(actx, a)
				defer func() { cancel(); wait() }()
			}
			cfg := meta.Config{Data: data, DefaultStripeSize: uint32(size), Log: daemonLog("meta"),
				Security: sec, Limits: lim, Reserve: reserve, HTTP: httpListen, HTTPDerived: httpDerived,
				LostAfter: lostAfter, HealRate: rate}
			if rf.replicated() {
				// Members call each other with the secret meta serves with
				// (DATA/cluster.secret unless given): the same file meta.Open
				// loads or creates.
				if cfg.Security.Cred == nil {
					if cfg.Security.Cred, err = proto.EnsureSecretFile(filepath.Join(data, proto.SecretFileName)); err != nil {
						return err
					}
				}
				pool := &proto.Pool{Security: cfg.Security, Name: func(a string) string { return "metadata member at " + a }}
				defer pool.Close()
				cfg.Engine = rf.engine(listen, data, pool, cfg.Log)
			}
			return meta.Run(ctx, listen, cfg, func(a string) { close(started); ready("meta", a) })
		},
	}
	c.Flags().StringVar(&listen, "listen", defaultMeta, "address to serve on")
	c.Flags().StringVar(&data, "data", "corral-data/meta", "directory for the metadata store")
	c.Flags().StringVar(&stripe, "default-stripe-size", "64K", "stripe size of files whose directories set none")
	sf.add(c.Flags(), false)
	lf.add(c.Flags(), "64M")
	c.Flags().Float64Var(&reserve, "reserve", meta.DefaultReserve, "percent of each I/O server's capacity kept free: below it a server gets no new files")
	addHTTPFlag(c.Flags(), &httpFlag, "the host of --listen, its port + 2000")
	c.Flags().DurationVar(&lostAfter, "lost-after", meta.DefaultLostAfter, "an I/O server down this long is lost: its replicas are made again on the other servers")
	c.Flags().StringVar(&healRate, "heal-rate", "64M", "bytes per second heal copies to stale replicas, over all I/O servers")
	rf.add(c.Flags())
	jf.add(c.Flags(), api.RoleMeta, "token-file")
	return c
}

// metaJoin joins the station for a metadata member: the cluster secret
// from the join (kept in DATA/cluster.secret, which must agree; a station
// without one leaves meta its own); its Apply sets filesystem.layouts when
// this member leads, once it serves (started closed).
func metaJoin(ctx context.Context, jf *joinFlags, listen, httpListen, data string, sec *proto.Security, started <-chan struct{}) (*agent.Agent, error) {
	log := daemonLog("meta")
	name := "meta-" + listen
	o, err := jf.options(api.RoleMeta, name, filepath.Clean(data)+"-agent", log)
	if err != nil {
		return nil, err
	}
	o.Addr = listen
	if httpListen != "" {
		o.Metrics = "http://" + httpListen + "/metrics"
	}
	o.Apply = func(ctx context.Context, c *clustercfg.Config, version int64, _ []string) error {
		select {
		case <-started:
		case <-ctx.Done():
			return ctx.Err()
		}
		ls := *sec
		if ls.Cred == nil {
			// The secret meta made itself (the station had none).
			var err error
			if ls.Cred, err = proto.LoadCredential(filepath.Join(data, proto.SecretFileName)); err != nil {
				return err
			}
		}
		return applyLayouts(ctx, listen, ls, c.FileSystem.Layouts, log)
	}
	a, reply, err := agent.Join(ctx, o)
	if err != nil {
		return nil, err
	}
	if len(reply.Secret) == 0 {
		log.Warn("the station hands out no cluster secret; meta keeps its own", "file", filepath.Join(data, proto.SecretFileName))
		return a, nil
	}
	cred, _, err := joinSecret(o.State, reply.Secret)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(data, proto.SecretFileName)
	switch old, err := os.ReadFile(p); {
	case errors.Is(err, os.ErrNotExist):
		if err := writeFileAtomic(p, cred.Marshal(), 0o600); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if c, err := proto.ParseCredential(old); err != nil || !bytes.Equal(c.Marshal(), cred.Marshal()) {
			return nil, fmt.Errorf("join: %s is not the cluster secret the station holds: this data directory belongs to another file system", p)
		}
	}
	sec.Cred = cred
	return a, nil
}

// applyLayouts sets each layout's policy, as 'corral fs layout set' does,
// when this member (listen) leads; a follower leaves it to the leader.
func applyLayouts(ctx context.Context, listen string, sec proto.Security, layouts []clustercfg.Layout, log *slog.Logger) error {
	cl := client.New(listen, client.WithSecurity(sec), client.WithTimeout(10*time.Second))
	defer cl.Close()
	if _, err := cl.Stat(ctx, "/"); err != nil {
		return fmt.Errorf("filesystem.layouts: %w", err)
	}
	if cl.Leader().Current() != listen {
		return nil
	}
	for i, l := range layouts {
		m, err := layoutMsg(l)
		if err != nil {
			return fmt.Errorf("filesystem.layouts[%d] (%s): %w", i, l.Path, err)
		}
		if err := cl.MkdirAll(ctx, l.Path, 0o755); err != nil {
			return fmt.Errorf("filesystem.layouts[%d] (%s): %w", i, l.Path, err)
		}
		a, err := cl.Stat(ctx, l.Path)
		if err != nil {
			return fmt.Errorf("filesystem.layouts[%d] (%s): %w", i, l.Path, err)
		}
		if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return fmt.Errorf("filesystem.layouts[%d] (%s): not a directory", i, l.Path)
		}
		m.Ino = a.Ino
		if _, err := cl.SetLayoutPolicy(ctx, m); err != nil {
			return fmt.Errorf("filesystem.layouts[%d] (%s): %w", i, l.Path, err)
		}
	}
	if len(layouts) > 0 {
		log.Info("layouts applied", "count", len(layouts))
	}
	return nil
}

// layoutMsg is a configured layout as the protocol's SetLayout: 0 for
// stripe size and count inherits, -1 (count) is every server; replicas 0
// and placement "" keep what the directory has.
func layoutMsg(l clustercfg.Layout) (*proto.SetLayout, error) {
	m := &proto.SetLayout{}
	if l.StripeSize != "" && l.StripeSize != "0" {
		n, err := parseSize(l.StripeSize)
		if err == nil {
			err = layout.ValidStripeSize(n)
		}
		if err != nil {
			return nil, fmt.Errorf("stripe-size: %w", err)
		}
		m.StripeSize = uint32(n)
	}
	switch {
	case l.StripeCount == -1:
		m.StripeCount = proto.AllServers
	case l.StripeCount < -1 || l.StripeCount > layout.MaxServers:
		return nil, fmt.Errorf("stripe-count %d: want 1..%d, 0 (inherit) or -1 (all)", l.StripeCount, layout.MaxServers)
	default:
		m.StripeCount = uint32(l.StripeCount)
	}
	if l.Replicas < 0 || l.Replicas > layout.MaxReplicas {
		return nil, fmt.Errorf("replicas %d: want 1..%d (0 keeps)", l.Replicas, layout.MaxReplicas)
	}
	m.Replicas = uint32(l.Replicas)
	switch l.Placement {
	case "":
	case "striped":
		m.Placement = proto.PlaceStriped
	case "whole":
		m.Placement = proto.PlaceWhole
	default:
		return nil, fmt.Errorf("placement %q: want striped or whole", l.Placement)
	}
	return m, nil
}

// raftFlags are corral meta's replication flags.
type raftFlags struct {
	id    uint64
	peers string
	join  bool
	// snapEvery overrides the engine's snapshot interval (tests make a
	// snapshot happen with few entries); hidden.
	snapEvery uint64
	parsed    map[uint64]string
	// reads: lease (the leader answers alone while its lease holds) or
	// quorum (a ReadIndex round per batch of reads, no clock assumption).
	reads string
}

func (f *raftFlags) add(fs *pflag.FlagSet) {
	fs.Uint64Var(&f.id, "id", 0, "this member's ID in the replicated group (with --peers or --join)")
	fs.StringVar(&f.peers, "peers", "", "every member of a new group as ID=HOST:PORT,... (this one included); none: one server, no replication")
	// --join (no value: enter a group that 'corral fs meta add' told
	// about this member, empty --data) is registered by joinFlags, as it
	// also takes a station's URL.
	fs.Uint64Var(&f.snapEvery, "snapshot-every", 0, "applied entries between Raft snapshots (0: the engine's default); for tests")
	fs.MarkHidden("snapshot-every")
	fs.StringVar(&f.reads, "reads", "lease", "how the leader makes reads linearizable: lease (no round trip while its lease holds; assumes the members' clocks run at rates within 20 % of each other) or quorum (a confirmation round with the others per batch of reads)")
}

func (f *raftFlags) replicated() bool { return f.peers != "" || f.join }

// check validates the flags before anything starts: usage errors.
func (f *raftFlags) check(listen string) error {
	if f.reads != "" && f.reads != "lease" && f.reads != "quorum" {
		return usageError{fmt.Errorf("--reads %q: want lease or quorum", f.reads)}
	}
	if !f.replicated() {
		if f.id != 0 {
			return usageError{errors.New("--id goes with --peers (a new group) or --join (an added member)")}
		}
		return nil
	}
	if f.id == 0 {
		return usageError{errors.New("--peers and --join need this member's --id (a number > 0)")}
	}
	if f.join {
		if f.peers != "" {
			return usageError{errors.New("--join and --peers exclude each other: --peers starts a new group, --join enters one")}
		}
		return nil
	}
	peers, err := parsePeers(f.peers)
	if err != nil {
		return usageError{err}
	}
	own, ok := peers[f.id]
	if !ok {
		return usageError{fmt.Errorf("--peers %s has no entry for --id %d", f.peers, f.id)}
	}
	if own != listen {
		// Members reach each other at the addresses in --peers: a member
		// listening elsewhere could never be reached.
		return usageError{fmt.Errorf("--listen %s must equal this member's address in --peers (%d=%s)", listen, f.id, own)}
	}
	f.parsed = peers
	return nil
}

// parsePeers reads ID=HOST:PORT,...
func parsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	seen := map[string]uint64{}
	for _, p := range strings.Split(s, ",") {
		idStr, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if !ok || err != nil || id == 0 || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=HOST:PORT with an ID > 0", p)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("--peers: member %d given twice", id)
		}
		if other, dup := seen[addr]; dup {
			return nil, fmt.Errorf("--peers: members %d and %d share the address %s", other, id, addr)
		}
		peers[id], seen[addr] = addr, id
	}
	if n := len(peers); n%2 == 0 {
		ids := make([]string, 0, n)
		for id := range peers {
			ids = append(ids, strconv.FormatUint(id, 10))
		}
		sort.Strings(ids)
		fmt.Fprintf(os.Stderr, "warning: --peers names %d members (%s): an even group tolerates no more failures than one member fewer; use 3 or 5\n", n, strings.Join(ids, ","))
	}
	return peers, nil
}

// engine builds the Raft member over the metadata state machine.
func (f *raftFlags) engine(listen, data string, pool *proto.Pool, log *slog.Logger) func(replog.StateMachine) (replog.Engine, error) {
	return func(sm replog.StateMachine) (replog.Engine, error) {
		return replog.NewRaft(replog.RaftConfig{ID: f.id, Addr: listen, Peers: f.parsed, Join: f.join,
			Dir: filepath.Join(data, "raft"), SM: sm, Transport: pool, Log: log, SnapshotEvery: f.snapEvery,
			LeaseReads: f.reads != "quorum"})
	}
}
