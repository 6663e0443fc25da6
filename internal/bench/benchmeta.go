package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

// MetaConfig sizes `corral bench meta`.
type MetaConfig struct {
	Bin, Dir, Out string
	Procs         int   // worker processes
	Files         int   // files per worker
	Size          int   // bytes per file
	Threads       int   // calls in flight per worker
	Members       []int // metadata member counts to run (1, 3)
	FUSE          bool  // also through a FUSE mount (root)
	Etcd          bool  // the embedded etcd baseline
	Chaos         bool  // kill the meta leader every ChaosEvery and time the resume
	ChaosEvery    time.Duration
	ChaosKills    int           // kills per chaos run
	Web           MetaWebConfig // the Zipf web figure (Web.Files > 0 runs it)
	// Profile writes CPU and block profiles of every daemon and worker,
	// per phase, under Out/profiles, and a per-operation breakdown.
	Profile bool
	Log     io.Writer
}

// MetaRow is one target, member count and directory layout: ops/s per phase
// and the ratio of each to RatioOf's row in the same layout.
type MetaRow struct {
	Target  string             `json:"target"` // local, local+fsync, etcd, lib, fuse
	Members int                `json:"members,omitempty"`
	Layout  string             `json:"layout"` // shared: one directory for all; private: one per process
	OpsPerS map[string]float64 `json:"ops_per_s"`
	Ratio   map[string]float64 `json:"ratio,omitempty"`
	RatioOf string             `json:"ratio_of,omitempty"`
}

// MetaGoal is a target the replicated metadata service is measured against.
type MetaGoal struct {
	What     string  `json:"what"`
	Want     float64 `json:"want"`
	Got      float64 `json:"got"`
	Unit     string  `json:"unit"`
	Members  int     `json:"members"`
	Layout   string  `json:"layout"`
	Met      bool    `json:"met"`
	Measured bool    `json:"measured"`
}

// ChaosKill is one kill of the meta leader and how long until an operation
// succeeded again.
type ChaosKill struct {
	Killed   string  `json:"killed"`
	ResumeMs float64 `json:"resume_ms"`
}

// MetaResult is the scenario's output.
type MetaResult struct {
	Scenario string      `json:"scenario"`
	When     time.Time   `json:"when"`
	Procs    int         `json:"procs"`
	Files    int         `json:"files_per_proc"`
	Size     int         `json:"size"`
	Threads  int         `json:"threads_per_proc"`
	Rows     []MetaRow   `json:"rows"`
	Goals    []MetaGoal  `json:"goals"`
	Chaos    []ChaosKill `json:"chaos,omitempty"`
	Web      []WebRow    `json:"web,omitempty"`
	// WebMembers is the metadata member count the web figure ran with.
	WebMembers int `json:"web_members,omitempty"`
	// Breakdown is where each phase's time went (--profile).
	Breakdown []Breakdown `json:"breakdown,omitempty"`
	Notes     []string    `json:"notes"`
}

var metaLayouts = []string{"shared", "private"}

// workerGroup is the P worker processes of one target and layout.
type workerGroup struct {
	procs []*exec.Cmd
	ins   []io.WriteCloser
	lines []chan string
	logs  []*os.File
}

// startWorkers runs cfg.Procs `corral bench meta-worker` processes and waits
// (at most 60 s) until each has prepared its target.
func startWorkers(ctx context.Context, cfg MetaConfig, wc MetaWorkerConfig, env []string, logDir string) (*workerGroup, error) {
	g := &workerGroup{}
	for id := 0; id < cfg.Procs; id++ {
		args := []string{"bench", "meta-worker", "--target", wc.Target, "--id", strconv.Itoa(id),
			"--files", strconv.Itoa(wc.Files), "--size", strconv.Itoa(wc.Size), "--threads", strconv.Itoa(wc.Threads),
			"--dir", wc.Dir, "--shared=" + strconv.FormatBool(wc.Shared)}
		if wc.Meta != "" {
			args = append(args, "--meta", wc.Meta)
		}
		if wc.Etcd != "" {
			args = append(args, "--etcd", wc.Etcd)
		}
		if wc.Profile != "" {
			args = append(args, "--profile", fmt.Sprintf("%s-worker%d", wc.Profile, id))
		}
		cmd := exec.Command(cfg.Bin, args...)
		cmd.Env = append(os.Environ(), env...)
		// Workers die with us: an interrupted run leaves none behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		logf, err := os.Create(filepath.Join(logDir, fmt.Sprintf("worker-%s-%s-%d.log", strings.ReplaceAll(wc.Target, "+", "-"), filepath.Base(wc.Dir), id)))
		if err != nil {
			g.stop()
			return nil, err
		}
		g.logs = append(g.logs, logf)
		cmd.Stderr = logf
		in, err := cmd.StdinPipe()
		if err != nil {
			g.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			g.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			g.stop()
			return nil, fmt.Errorf("start worker %d: %w", id, err)
		}
		g.procs, g.ins = append(g.procs, cmd), append(g.ins, in)
		lines := make(chan string, 4)
		g.lines = append(g.lines, lines)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
	}
	for id := range g.procs {
		l, err := g.next(ctx, id, 60*time.Second)
		if err == nil && l != "ready" {
			err = fmt.Errorf("said %q", l)
		}
		if err != nil {
			g.stop()
			return nil, fmt.Errorf("worker %d (%s) not ready: %v; log: %s", id, wc.Target, err, launch.Tail(g.logs[id].Name(), 3))
		}
	}
	return g, nil
}

// next is worker id's next line of output.
func (g *workerGroup) next(ctx context.Context, id int, limit time.Duration) (string, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case l, ok := <-g.lines[id]:
		if !ok {
			return "", errors.New("exited")
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", limit)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// phase runs one phase on every worker at once and returns the aggregate
// rate: all their operations over the span from the first start to the
// last end.
func (g *workerGroup) phase(ctx context.Context, phase string) (float64, int, error) {
	for id, in := range g.ins {
		if _, err := fmt.Fprintln(in, phase); err != nil {
			return 0, 0, fmt.Errorf("worker %d: %w", id, err)
		}
	}
	var ops int
	var first, last int64
	var errs []error
	for id := range g.ins {
		l, err := g.next(ctx, id, 10*time.Minute)
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %d %s: %v; log: %s", id, phase, err, launch.Tail(g.logs[id].Name(), 3)))
			continue
		}
		var r PhaseResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			errs = append(errs, fmt.Errorf("worker %d %s: bad answer %q: %v", id, phase, l, err))
			continue
		}
		if r.Err != "" {
			errs = append(errs, errors.New(r.Err))
			continue
		}
		ops += r.Ops
		if first == 0 || r.Start < first {
			first = r.Start
		}
		last = max(last, r.End)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	return float64(ops) / (float64(max(last-first, 1)) / 1e9), ops, nil
}

func (g *workerGroup) stop() {
	for _, in := range g.ins {
		in.Close() // EOF: the worker ends
	}
	for _, p := range g.procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	for _, l := range g.logs {
		l.Close()
	}
}

// runTarget runs the four phases for one target in one layout. With a
// profiler (--profile), each phase is profiled in every daemon and its
// per-operation breakdown returned; label names the profile files.
func runTarget(ctx context.Context, cfg MetaConfig, wc MetaWorkerConfig, env []string, logDir string, prof *profiler, label string) (map[string]float64, []Breakdown, error) {
	g, err := startWorkers(ctx, cfg, wc, env, logDir)
	if err != nil {
		return nil, nil, err
	}
	defer g.stop()
	rates := map[string]float64{}
	var bds []Breakdown
	for _, ph := range metaPhases {
		var before map[string]map[string]float64
		if prof != nil {
			before = prof.scrape(ctx)
			prof.start(ctx)
		}
		r, ops, err := g.phase(ctx, ph)
		if prof != nil {
			prof.stop(ctx, label+"-"+ph)
			if err == nil {
				b := breakdown(before, prof.scrape(ctx), ops, r, cfg.Procs*wc.Threads)
				b.Phase = ph
				bds = append(bds, b)
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", wc.Target, ph, err)
		}
		rates[ph] = r
	}
	return rates, bds, nil
}

// metaCluster is the file system a corral row runs on: its metadata members
// (comma-separated, as clients take them) and the processes.
type metaCluster struct {
	Meta    string
	members []*launch.Proc // member i has --id i+1
	bin     string
	data    string
	peers   string   // the --peers value
	addrs   []string // member i's --listen
	fs      *launch.FS
	iods    []*launch.Proc
	Env     []string // what clients need: the cluster secret
}

func (c *metaCluster) stop() {
	if c.fs != nil {
		c.fs.Stop()
		return
	}
	var wg sync.WaitGroup
	for _, p := range c.iods {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	for _, p := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
}

// startMetaCluster starts n metadata members and 2 I/O servers on loopback,
// all with one cluster secret.
func startMetaCluster(ctx context.Context, bin, data string, n int) (*metaCluster, error) {
	if n == 1 {
		fs, err := launch.StartFS(ctx, bin, data, "127.0.0.1:0", []string{"127.0.0.1:0", "127.0.0.1:0"})
		if err != nil {
			return nil, err
		}
		return &metaCluster{Meta: fs.MetaAddr(), fs: fs, Env: []string{proto.SecretEnv + "=" + fs.SecretFile}}, nil
	}
	// Members need each other's addresses before they start: free ports
	// on loopback addresses nothing else uses.
	addrs := make([]string, n)
	var peers []string
	for i := range addrs {
		a, err := freePort()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	cred, err := proto.NewSecret()
	if err != nil {
		return nil, err
	}
	secret := filepath.Join(data, proto.SecretFileName)
	c := &metaCluster{Meta: strings.Join(addrs, ","), Env: []string{proto.SecretEnv + "=" + secret},
		bin: bin, data: data, peers: strings.Join(peers, ","), addrs: addrs}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(secret, cred.Marshal(), 0o600); err != nil {
		return nil, err
	}
	for i := range addrs {
		dir := filepath.Join(data, fmt.Sprintf("meta%d", i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		// A member adopts DATA/cluster.secret: all share the one secret.
		if err := os.WriteFile(filepath.Join(dir, proto.SecretFileName), cred.Marshal(), 0o600); err != nil {
			return nil, err
		}
	}
	// Members start together: one may wait for a quorum before it serves.
	procs := make([]*launch.Proc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], errs[i] = c.startMember(ctx, i)
		}()
	}
	wg.Wait()
	for i, p := range procs {
		if p != nil {
			c.members = append(c.members, p)
		}
		if errs[i] != nil {
			c.stop()
			return nil, errs[i]
		}
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("iod%d", i+1)
		p, err := launch.Start(ctx, name, bin, filepath.Join(data, "logs", name+".log"), "iod", "--listen", "127.0.0.1:0",
			"--data", filepath.Join(data, name), "--meta", c.Meta, "--secret-file", secret)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.iods = append(c.iods, p)
	}
	return c, nil
}

// startMember (re)starts member i on its address and data directory.
func (c *metaCluster) startMember(ctx context.Context, i int) (*launch.Proc, error) {
	name := fmt.Sprintf("meta%d", i+1)
	return launch.Start(ctx, name, c.bin, filepath.Join(c.data, "logs", name+".log"),
		"meta", "--id", strconv.Itoa(i+1), "--peers", c.peers, "--listen", c.addrs[i], "--data", filepath.Join(c.data, name))
}

// mountFS mounts the cluster at mnt as its own process, as users run it.
func mountFS(ctx context.Context, bin, meta, mnt, logPath string, env []string) (func(), error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	// launch.Start passes this process's environment: the secret is there
	// for a one-member cluster (launch set it); name it for the others.
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		os.Setenv(k, v)
	}
	m, err := launch.Start(ctx, "mount", bin, logPath, "mount", "--meta", meta, mnt)
	if err != nil {
		return nil, fmt.Errorf("FUSE mount of %s: %w", meta, err)
	}
	return func() {
		if m.Stop() != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	}, nil
}

// RunMeta runs the scenario and writes results.json, results.md and
// meta.svg under cfg.Out.
func RunMeta(ctx context.Context, cfg MetaConfig) (*MetaResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if cfg.Procs < 1 || cfg.Files < 1 || cfg.Size < 0 {
		return nil, fmt.Errorf("bench meta: want processes and files at least 1 and size at least 0 (got %d, %d, %d)", cfg.Procs, cfg.Files, cfg.Size)
	}
	cfg.Threads = max(cfg.Threads, 1)
	res := &MetaResult{Scenario: "meta", When: time.Now().UTC(), Procs: cfg.Procs, Files: cfg.Files, Size: cfg.Size, Threads: cfg.Threads}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "meta")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	logDir := filepath.Join(cfg.Out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	profDir := filepath.Join(cfg.Out, "profiles")
	if cfg.Profile {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			return nil, err
		}
		profileEnv()
	}
	run := 0
	// measure runs one target in both layouts and records the rows; with
	// prof, profiled.
	measure := func(target string, members int, wc MetaWorkerConfig, env []string, prof *profiler) error {
		for _, layout := range metaLayouts {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run++
			w := wc
			w.Target, w.Files, w.Size, w.Threads, w.Shared = target, cfg.Files, cfg.Size, cfg.Threads, layout == "shared"
			w.Dir = fmt.Sprintf("%s/run%d-%s", strings.TrimSuffix(wc.Dir, "/"), run, layout)
			label := fmt.Sprintf("%s-%s-%s", strings.ReplaceAll(target, "+", "-"), membersLabel(members), layout)
			if cfg.Profile {
				w.Profile = filepath.Join(profDir, label)
			}
			rates, bds, err := runTarget(ctx, cfg, w, env, logDir, prof, label)
			if err != nil {
				return err
			}
			for _, b := range bds {
				b.Target, b.Layout = fmt.Sprintf("%s (%d)", target, members), layout
				res.Breakdown = append(res.Breakdown, b)
				logf("  %-6s client %6.0f µs  meta %5.2f req/op %6.0f µs  queue %5.0f  commit %6.0f  apply %6.0f µs  WAL fsync %.3f/op  store commit %.3f/op  iod %5.2f req/op %6.0f µs  iod fsync %.2f/op  CPU µs/op meta %5.0f iod %5.0f\n",
					b.Phase, b.ClientUs, b.MetaReqs, b.MetaUs, b.QueueUs, b.CommitUs, b.ApplyUs, b.WALFsyncs, b.StoreCommits, b.IODReqs, b.IODUs, b.IODFsyncs, b.MetaCPUUs, b.IODCPUUs)
				logf("         meta: %s; iod: %s\n", fmtByOp(b.MetaByOp), fmtByOp(b.IODByOp))
			}
			row := MetaRow{Target: target, Members: members, Layout: layout, OpsPerS: rates}
			res.Rows = append(res.Rows, row)
			goal := ""
			if g := rowGoal(target, cfg.Procs); g != "-" {
				goal = "  goal: " + g
			}
			logf("%-11s members %-2s %-7s create %8.0f  stat %8.0f  read %8.0f  delete %8.0f ops/s%s\n",
				target, membersLabel(members), layout, rates["create"], rates["stat"], rates["read"], rates["delete"], goal)
		}
		return nil
	}

	// Baselines: the same worker code on a local directory, then etcd.
	for _, t := range []string{"local", "local+fsync"} {
		if err := measure(t, 0, MetaWorkerConfig{Dir: filepath.Join(scratch, "local")}, nil, nil); err != nil {
			return nil, err
		}
	}
	if cfg.Etcd {
		for _, n := range cfg.Members {
			ec, err := startEtcd(filepath.Join(scratch, fmt.Sprintf("etcd%d", n)), n)
			if err != nil {
				// A baseline that cannot start costs its rows, not the run.
				logf("etcd with %d members: skipped: %v\n", n, err)
				res.Notes = append(res.Notes, fmt.Sprintf("etcd baseline with %d members skipped: %v", n, err))
				continue
			}
			err = measure("etcd", n, MetaWorkerConfig{Dir: "/bench", Etcd: strings.Join(ec.Endpoints, ",")}, nil, nil)
			ec.stop()
			if err != nil {
				return nil, err
			}
		}
	}

	fuse := cfg.FUSE
	if fuse && os.Geteuid() != 0 {
		res.Notes = append(res.Notes, "FUSE rows skipped: mounting needs root")
		fuse = false
	}
	for _, n := range cfg.Members {
		c, err := startMetaCluster(ctx, cfg.Bin, filepath.Join(scratch, fmt.Sprintf("fs%d", n)), n)
		if err != nil {
			return nil, fmt.Errorf("corral with %d metadata members: %w", n, err)
		}
		var prof *profiler
		if cfg.Profile {
			prof = newProfiler(profDir, c.profTargets())
		}
		err = func() error {
			defer c.stop()
			if prof != nil {
				defer func() { res.Notes = append(res.Notes, prof.notes...) }()
			}
			if err := measure("lib", n, MetaWorkerConfig{Dir: "/bench-meta", Meta: c.Meta}, c.Env, prof); err != nil {
				return err
			}
			// The same library, a create as three steps in turn (create,
			// write, close: two commits around the data write).
			if err := measure("lib-serial", n, MetaWorkerConfig{Dir: "/bench-meta", Meta: c.Meta}, c.Env, nil); err != nil {
				return err
			}
			if fuse {
				mnt := filepath.Join(scratch, fmt.Sprintf("mnt%d", n))
				unmount, err := mountFS(ctx, cfg.Bin, c.Meta, mnt, filepath.Join(logDir, fmt.Sprintf("mount%d.log", n)), c.Env)
				if err != nil {
					return err
				}
				defer unmount()
				if err := measure("fuse", n, MetaWorkerConfig{Dir: filepath.Join(mnt, "bench-meta-fuse")}, c.Env, prof); err != nil {
					return err
				}
			}
			if cfg.Chaos && n > 1 {
				if err := metaChaos(ctx, cfg, c, res, logf); err != nil {
					return err
				}
			}
			if cfg.Web.Files > 0 && n == maxInts(cfg.Members, true) {
				rows, notes, err := runMetaWeb(ctx, cfg.Bin, scratch, logDir, c, cfg.Web, prof, logf)
				if err != nil {
					return err
				}
				res.Web, res.WebMembers, res.Notes = rows, n, append(res.Notes, notes...)
			}
			return nil
		}()
		if err != nil {
			return nil, err
		}
	}
	if cfg.Web.Files > 0 && res.WebMembers == 0 && !hasNote(res.Notes, "Zipf web figure skipped") {
		why := "no corral run (--members)"
		res.Notes = append(res.Notes, "Zipf web figure skipped: "+why)
		logf("web: skipped: %s\n", why)
	}
	if cfg.Chaos && maxInts(cfg.Members, true) < 2 {
		why := "no run with more than one member (--members)"
		res.Notes = append(res.Notes, "chaos skipped: "+why)
		logf("chaos: skipped: %s\n", why)
	}
	res.ratios()
	res.Goals = metaGoals(res.Rows, cfg.Procs, cfg.Threads)
	for _, g := range append(append([]MetaGoal{}, res.Goals...), res.webGoals()...) {
		if g.Measured {
			logf("goal %-75s %-7s want %9s got %9s  met %v\n", g.What, g.Layout, fmtGoal(g.Want, g.Unit), fmtGoal(g.Got, g.Unit), g.Met)
		}
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("mdtest-style: %d processes, each with %d call(s) in flight, each creates %d files of %s (create+write+close; size 0: create only), stats them, reads them (open+read+close; size 0: lookup only), deletes them; one barrier between phases; ops/s = all operations over the span from the first start to the last end", cfg.Procs, cfg.Threads, cfg.Files, humanBytes(int64(cfg.Size))),
		"layouts: shared = every process in one directory; private = one directory per process",
		"ratios: to local+fsync in the same layout (the same durability at close as Corral's); 'members' of local rows is empty",
		"etcd: embedded go.etcd.io/etcd/server/v3 on loopback in this process, one put per create (value = the file's bytes), get per stat (keys only) and read, delete per delete",
		"everything on one machine: workers, metadata members, I/O servers, etcd and the mount share its CPUs and disk")
	if cfg.Profile {
		res.Notes = append(res.Notes, "profiles: OUT/profiles/TARGET-MEMBERS-LAYOUT-PHASE-DAEMON.{cpu,block}.pprof for each metadata member and I/O server, ...-workerN-PHASE.cpu.pprof for each worker, web-nodeN.* for the nodes under the Zipf load (go tool pprof -top FILE); a profile runs only during its phase, so its CPU figures are per phase")
	}
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return nil, err
	}
	return res, res.plot(cfg.Out)
}

func hasNote(notes []string, prefix string) bool {
	for _, n := range notes {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func maxInts(xs []int, multi bool) int {
	m := 0
	for _, x := range xs {
		if x > 1 && !multi {
			continue
		}
		m = max(m, x)
	}
	return m
}

func membersLabel(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// ratios fills each row's ratio to local+fsync in its layout.
func (r *MetaResult) ratios() {
	base := map[string]MetaRow{}
	for _, x := range r.Rows {
		if x.Target == "local+fsync" {
			base[x.Layout] = x
		}
	}
	for i := range r.Rows {
		x := &r.Rows[i]
		b, ok := base[x.Layout]
		if !ok || x.Target == "local+fsync" {
			continue
		}
		x.RatioOf, x.Ratio = "local+fsync", map[string]float64{}
		for _, ph := range metaPhases {
			if b.OpsPerS[ph] > 0 {
				x.Ratio[ph] = x.OpsPerS[ph] / b.OpsPerS[ph]
			}
		}
	}
}

// metaGoals checks the figures asked of the replicated service (3
// members) against the rows of the largest member count measured, for a
// run of procs processes with threads calls in flight each.
func metaGoals(rows []MetaRow, procs, threads int) []MetaGoal {
	members := 0
	for _, x := range rows {
		if x.Target == "lib" || x.Target == "fuse" {
			members = max(members, x.Members)
		}
	}
	find := func(target string, members int, layout string) (MetaRow, bool) {
		for _, x := range rows {
			if x.Target == target && x.Members == members && x.Layout == layout {
				return x, true
			}
		}
		return MetaRow{}, false
	}
	// ratio is a's phase over b's, and whether both were measured.
	ratio := func(a MetaRow, okA bool, b MetaRow, okB bool, phase string) (float64, bool) {
		if !okA || !okB || b.OpsPerS[phase] <= 0 {
			return 0, false
		}
		return a.OpsPerS[phase] / b.OpsPerS[phase], true
	}
	var goals []MetaGoal
	add := func(what string, want, got float64, unit, layout string, measured bool) {
		goals = append(goals, MetaGoal{What: what, Want: want, Got: got, Unit: unit, Members: members, Layout: layout, Measured: measured, Met: measured && got >= want})
	}
	createWant, createWhat := 2000.0, fmt.Sprintf("library creates (%d procs, %d in flight; goal with 4 procs, 1 in flight)", procs, threads)
	if procs >= 16 {
		createWant, createWhat = 6000, fmt.Sprintf("library creates (%d procs, %d in flight; goal with 16 procs)", procs, threads)
	}
	for _, layout := range metaLayouts {
		lib, okL := find("lib", members, layout)
		etcd, okE := find("etcd", members, layout)
		fuse, okF := find("fuse", members, layout)
		ext4, okX := find("local", 0, layout)
		ext4s, okS := find("local+fsync", 0, layout)
		add(createWhat, createWant, lib.OpsPerS["create"], "ops/s", layout, okL)
		r, ok := ratio(lib, okL, etcd, okE, "create")
		add("library creates / etcd creates", 4, r, "ratio", layout, ok)
		add("library stats", 50000, lib.OpsPerS["stat"], "ops/s", layout, okL)
		add("library deletes", 5000, lib.OpsPerS["delete"], "ops/s", layout, okL)
		r, ok = ratio(fuse, okF, ext4s, okS, "create")
		add("FUSE creates / ext4+fsync creates", 0.5, r, "ratio", layout, ok)
		r, ok = ratio(fuse, okF, ext4, okX, "stat")
		add("FUSE stats / ext4 stats", 0.5, r, "ratio", layout, ok)
		r, ok = ratio(fuse, okF, ext4, okX, "read")
		add("FUSE re-reads / ext4 reads", 0.5, r, "ratio", layout, ok)
	}
	return goals
}

// rowGoal is what a row of target is asked to reach (for 3 members), for
// the goal column beside the figures; the Goals table checks them.
func rowGoal(target string, procs int) string {
	switch target {
	case "lib":
		create := "create ≥ 2,000/s (4 procs, 1 in flight)"
		if procs >= 16 {
			create = "create ≥ 6,000/s (16 procs)"
		}
		return create + " and ≥ 4× etcd; stat ≥ 50,000/s; delete ≥ 5,000/s"
	case "fuse":
		return "create ≥ 0.5× local+fsync; stat, read ≥ 0.5× local"
	}
	return "-"
}

// webGoals are the Zipf web goals, once the web rows are in: corral's
// req/s against the bare Go server's and nginx's in the same run.
func (r *MetaResult) webGoals() []MetaGoal {
	var corral, bare, nginx float64
	for _, w := range r.Web {
		switch {
		case strings.HasPrefix(w.Target, "corral"):
			corral = w.ReqPerS
		case strings.HasPrefix(w.Target, "bare Go"):
			bare = w.ReqPerS
		case strings.HasPrefix(w.Target, "nginx"):
			nginx = w.ReqPerS
		}
	}
	var goals []MetaGoal
	for _, g := range []struct {
		what       string
		want, base float64
	}{{"Zipf web req/s / bare Go net/http req/s", 0.9, bare}, {"Zipf web req/s / nginx req/s", 0.6, nginx}} {
		if corral == 0 || g.base == 0 {
			continue
		}
		got := corral / g.base
		goals = append(goals, MetaGoal{What: g.what, Want: g.want, Got: got, Unit: "ratio", Members: r.WebMembers, Measured: true, Met: got >= g.want})
	}
	return goals
}

// Markdown renders the result as tables.
func (r *MetaResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# meta, %s\n\n%d processes x %d files of %s, %d call(s) in flight per process.\n\n", r.When.Format(time.RFC3339), r.Procs, r.Files, humanBytes(int64(r.Size)), r.Threads)
	b.WriteString("| target | members | layout | create/s | stat/s | read/s | delete/s | ratio to | create | stat | read | delete | goal |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %s |", x.Target, membersLabel(x.Members), x.Layout,
			x.OpsPerS["create"], x.OpsPerS["stat"], x.OpsPerS["read"], x.OpsPerS["delete"], x.RatioOf)
		for _, ph := range metaPhases {
			if x.Ratio == nil {
				b.WriteString("  |")
			} else {
				fmt.Fprintf(&b, " %.2f |", x.Ratio[ph])
			}
		}
		fmt.Fprintf(&b, " %s |\n", rowGoal(x.Target, r.Procs))
	}
	// Corral against etcd with the same members and layout.
	var vs strings.Builder
	for _, x := range r.Rows {
		if x.Target != "lib" {
			continue
		}
		for _, e := range r.Rows {
			if e.Target == "etcd" && e.Members == x.Members && e.Layout == x.Layout {
				fmt.Fprintf(&vs, "| %d | %s |", x.Members, x.Layout)
				for _, ph := range metaPhases {
					fmt.Fprintf(&vs, " %.2f |", x.OpsPerS[ph]/max(e.OpsPerS[ph], 1e-9))
				}
				vs.WriteString("\n")
			}
		}
	}
	if vs.Len() > 0 {
		b.WriteString("\nCorral library / etcd, same members and layout:\n\n| members | layout | create | stat | read | delete |\n|---|---|---|---|---|---|\n")
		b.WriteString(vs.String())
	}
	if len(r.Web) > 0 {
		b.WriteString("\nZipf web (4 KiB files, s = 1.0), same wrk script for all:\n\n| target | req/s | MB/s | p99 ms | errors | ratio to nginx | ratio to bare Go |\n|---|---|---|---|---|---|---|\n")
		bare := 0.0
		for _, w := range r.Web {
			if strings.HasPrefix(w.Target, "bare Go") {
				bare = w.ReqPerS
			}
		}
		for _, w := range r.Web {
			vsBare := "-"
			if bare > 0 {
				vsBare = fmt.Sprintf("%.2f", w.ReqPerS/bare)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.2f | %d | %.2f | %s |\n", w.Target, w.ReqPerS, w.MBPerS, w.P99ms, w.Errors, w.VsDirect, vsBare)
		}
	}
	if len(r.Chaos) > 0 {
		b.WriteString("\nChaos: the metadata leader killed (SIGKILL):\n\n| killed | resume ms |\n|---|---|\n")
		for _, k := range r.Chaos {
			fmt.Fprintf(&b, "| %s | %.0f |\n", k.Killed, k.ResumeMs)
		}
	}
	b.WriteString(breakdownMarkdown(r.Breakdown))
	goals := append(append([]MetaGoal{}, r.Goals...), r.webGoals()...)
	b.WriteString("\nGoals (for 3 members; want is the goal, got the figure above):\n\n| goal | want | got | members | layout | met |\n|---|---|---|---|---|---|\n")
	for _, g := range goals {
		met := "no"
		switch {
		case !g.Measured:
			met = "not measured"
		case g.Met:
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.What, fmtGoal(g.Want, g.Unit), fmtGoal(g.Got, g.Unit), membersLabel(g.Members), g.Layout, met)
	}
	b.WriteString("\nPlot: meta.svg.\n\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func fmtGoal(v float64, unit string) string {
	if unit == "ratio" {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f/s", v)
}

// plot draws ops/s per phase, one line per target (private layout).
func (r *MetaResult) plot(dir string) error {
	var series []Series
	for _, x := range r.Rows {
		if x.Layout != "private" {
			continue
		}
		name := x.Target
		if x.Members > 0 {
			name += fmt.Sprintf(" (%d)", x.Members)
		}
		s := Series{Name: name, Dashed: x.Target == "local" || x.Target == "local+fsync" || x.Target == "etcd"}
		for i, ph := range metaPhases {
			// log10: local stats run at 10^5-10^6/s, FUSE creates at
			// 10^2-10^3/s; a linear axis would flatten the latter.
			s.X, s.Y = append(s.X, float64(i+1)), append(s.Y, math.Log10(max(x.OpsPerS[ph], 1)))
		}
		series = append(series, s)
	}
	return LineChart(filepath.Join(dir, "meta.svg"), "bench meta: ops/s per phase, one directory per process",
		"phase: 1 create, 2 stat, 3 read, 4 delete", "log10 ops/s", series)
}
