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
	Log           io.Writer
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
	WebMembers int      `json:"web_members,omitempty"`
	Notes      []string `json:"notes"`
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
func (g *workerGroup) phase(ctx context.Context, phase string) (float64, error) {
	for id, in := range g.ins {
		if _, err := fmt.Fprintln(in, phase); err != nil {
			return 0, fmt.Errorf("worker %d: %w", id, err)
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
		return 0, err
	}
	return float64(ops) / (float64(max(last-first, 1)) / 1e9), nil
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

// runTarget runs the four phases for one target in one layout.
func runTarget(ctx context.Context, cfg MetaConfig, wc MetaWorkerConfig, env []string, logDir string) (map[string]float64, error) {
	g, err := startWorkers(ctx, cfg, wc, env, logDir)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	rates := map[string]float64{}
	for _, ph := range metaPhases {
		r, err := g.phase(ctx, ph)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", wc.Target, ph, err)
		}
		rates[ph] = r
	}
	return rates, nil
}

// peersSupported says whether `corral meta` can run as one of several
// members (--peers), and why not.
func peersSupported(bin string) (bool, string) {
	out, _ := exec.Command(bin, "meta", "--help").CombinedOutput()
	if strings.Contains(string(out), "--peers") {
		return true, ""
	}
	return false, "corral meta has no --peers"
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
	run := 0
	// measure runs one target in both layouts and records the rows.
	measure := func(target string, members int, wc MetaWorkerConfig, env []string) error {
		for _, layout := range metaLayouts {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run++
			w := wc
			w.Target, w.Files, w.Size, w.Threads, w.Shared = target, cfg.Files, cfg.Size, cfg.Threads, layout == "shared"
			w.Dir = fmt.Sprintf("%s/run%d-%s", strings.TrimSuffix(wc.Dir, "/"), run, layout)
			rates, err := runTarget(ctx, cfg, w, env, logDir)
			if err != nil {
				return err
			}
			row := MetaRow{Target: target, Members: members, Layout: layout, OpsPerS: rates}
			res.Rows = append(res.Rows, row)
			logf("%-11s members %-2s %-7s create %8.0f  stat %8.0f  read %8.0f  delete %8.0f ops/s\n",
				target, membersLabel(members), layout, rates["create"], rates["stat"], rates["read"], rates["delete"])
		}
		return nil
	}

	// Baselines: the same worker code on a local directory, then etcd.
	for _, t := range []string{"local", "local+fsync"} {
		if err := measure(t, 0, MetaWorkerConfig{Dir: filepath.Join(scratch, "local")}, nil); err != nil {
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
			err = measure("etcd", n, MetaWorkerConfig{Dir: "/bench", Etcd: strings.Join(ec.Endpoints, ",")}, nil)
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
	peersOK, peersWhy := peersSupported(cfg.Bin)
	for _, n := range cfg.Members {
		if n > 1 && !peersOK {
			logf("%d members: skipped: %s\n", n, peersWhy)
			res.Notes = append(res.Notes, fmt.Sprintf("%d-member corral rows skipped: %s", n, peersWhy))
			continue
		}
		c, err := startMetaCluster(ctx, cfg.Bin, filepath.Join(scratch, fmt.Sprintf("fs%d", n)), n)
		if err != nil {
			return nil, fmt.Errorf("corral with %d metadata members: %w", n, err)
		}
		err = func() error {
			defer c.stop()
			if err := measure("lib", n, MetaWorkerConfig{Dir: "/bench-meta", Meta: c.Meta}, c.Env); err != nil {
				return err
			}
			// The same library, a create as three steps in turn (create,
			// write, close: two commits around the data write).
			if err := measure("lib-serial", n, MetaWorkerConfig{Dir: "/bench-meta", Meta: c.Meta}, c.Env); err != nil {
				return err
			}
			if fuse {
				mnt := filepath.Join(scratch, fmt.Sprintf("mnt%d", n))
				unmount, err := mountFS(ctx, cfg.Bin, c.Meta, mnt, filepath.Join(logDir, fmt.Sprintf("mount%d.log", n)), c.Env)
				if err != nil {
					return err
				}
				defer unmount()
				if err := measure("fuse", n, MetaWorkerConfig{Dir: filepath.Join(mnt, "bench-meta-fuse")}, c.Env); err != nil {
					return err
				}
			}
			if cfg.Chaos && n > 1 {
				if err := metaChaos(ctx, cfg, c, res, logf); err != nil {
					return err
				}
			}
			if cfg.Web.Files > 0 && n == maxInts(cfg.Members, peersOK) {
				rows, notes, err := runMetaWeb(ctx, cfg.Bin, scratch, logDir, c, cfg.Web, logf)
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
		if !peersOK {
			why += "; " + peersWhy
		}
		res.Notes = append(res.Notes, "Zipf web figure skipped: "+why)
		logf("web: skipped: %s\n", why)
	}
	if cfg.Chaos && (!peersOK || maxInts(cfg.Members, true) < 2) {
		why := peersWhy
		if why == "" {
			why = "no run with more than one member (--members)"
		}
		res.Notes = append(res.Notes, "chaos skipped: "+why)
		logf("chaos: skipped: %s\n", why)
	}
	res.ratios()
	res.Goals = metaGoals(res.Rows)
	res.Notes = append(res.Notes,
		fmt.Sprintf("mdtest-style: %d processes, each with %d call(s) in flight, each creates %d files of %s (create+write+close; size 0: create only), stats them, reads them (open+read+close; size 0: lookup only), deletes them; one barrier between phases; ops/s = all operations over the span from the first start to the last end", cfg.Procs, cfg.Threads, cfg.Files, humanBytes(int64(cfg.Size))),
		"layouts: shared = every process in one directory; private = one directory per process",
		"ratios: to local+fsync in the same layout (the same durability at close as Corral's); 'members' of local rows is empty",
		"etcd: embedded go.etcd.io/etcd/server/v3 on loopback in this process, one put per create (value = the file's bytes), get per stat (keys only) and read, delete per delete",
		"everything on one machine: workers, metadata members, I/O servers, etcd and the mount share its CPUs and disk")
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

// metaGoals checks the figures issue 13 asks of the replicated service
// (3 members) against the rows of the largest member count measured.
func metaGoals(rows []MetaRow) []MetaGoal {
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
	var goals []MetaGoal
	for _, layout := range metaLayouts {
		for _, g := range []struct {
			what, phase string
			want        float64
		}{{"library creates", "create", 10000}, {"library stats", "stat", 100000}, {"library deletes", "delete", 8000}} {
			x, ok := find("lib", members, layout)
			goals = append(goals, MetaGoal{What: g.what, Want: g.want, Got: x.OpsPerS[g.phase], Unit: "ops/s", Members: members, Layout: layout, Measured: ok, Met: ok && x.OpsPerS[g.phase] >= g.want})
		}
		f, ok1 := find("fuse", members, layout)
		l, ok2 := find("local+fsync", 0, layout)
		got := 0.0
		if ok1 && ok2 && l.OpsPerS["create"] > 0 {
			got = f.OpsPerS["create"] / l.OpsPerS["create"]
		}
		goals = append(goals, MetaGoal{What: "FUSE creates / ext4+fsync creates", Want: 0.5, Got: got, Unit: "ratio", Members: members, Layout: layout, Measured: ok1 && ok2, Met: ok1 && ok2 && got >= 0.5})
	}
	return goals
}

// webGoal is the Zipf web goal, once the web rows are in.
func (r *MetaResult) webGoal() (MetaGoal, bool) {
	var corral, nginx float64
	for _, w := range r.Web {
		switch {
		case strings.HasPrefix(w.Target, "corral"):
			corral = w.ReqPerS
		case strings.HasPrefix(w.Target, "nginx"):
			nginx = w.ReqPerS
		}
	}
	if corral == 0 || nginx == 0 {
		return MetaGoal{}, false
	}
	return MetaGoal{What: "Zipf web req/s / nginx req/s", Want: 0.8, Got: corral / nginx, Unit: "ratio", Members: r.WebMembers, Measured: true, Met: corral/nginx >= 0.8}, true
}

// Markdown renders the result as tables.
func (r *MetaResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# meta, %s\n\n%d processes x %d files of %s, %d call(s) in flight per process.\n\n", r.When.Format(time.RFC3339), r.Procs, r.Files, humanBytes(int64(r.Size)), r.Threads)
	b.WriteString("| target | members | layout | create/s | stat/s | read/s | delete/s | ratio to | create | stat | read | delete |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
		b.WriteString("\n")
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
		b.WriteString("\nZipf web (4 KiB files, s = 1.0), same wrk script for both:\n\n| target | req/s | MB/s | p99 ms | errors | ratio to nginx |\n|---|---|---|---|---|---|\n")
		for _, w := range r.Web {
			fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.2f | %d | %.2f |\n", w.Target, w.ReqPerS, w.MBPerS, w.P99ms, w.Errors, w.VsDirect)
		}
	}
	if len(r.Chaos) > 0 {
		b.WriteString("\nChaos: the metadata leader killed (SIGKILL):\n\n| killed | resume ms |\n|---|---|\n")
		for _, k := range r.Chaos {
			fmt.Fprintf(&b, "| %s | %.0f |\n", k.Killed, k.ResumeMs)
		}
	}
	goals := r.Goals
	if g, ok := r.webGoal(); ok {
		goals = append(goals, g)
	}
	b.WriteString("\nGoals (issue 13, for 3 members):\n\n| goal | want | got | members | layout | met |\n|---|---|---|---|---|---|\n")
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
