package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/testbed"
)

// runPFSReplicas is test 4: N = 1..MaxN clients, each writing then reading
// its own file of Test3File bytes in 2 MiB records, over all MaxM I/O
// servers, every file with cfg.Replicas copies: Corral (a directory with
// that replica count), then GlusterFS replica 2 and MooseFS goal 2 when
// installed and cfg.Others.
func runPFSReplicas(ctx context.Context, cfg PFSConfig, rate string, I, R float64, bed *testbed.Bed, scratch string,
	startFS func(m int) (*launch.FS, error),
	io1 func(host, meta, path string, size, record int64, write bool, m int) (IOResult, error),
	parallelIO func(n int, job func(i int) (IOResult, error)) (float64, error),
	res *PFSResult, logf func(string, ...any)) error {
	m := cfg.MaxM
	if m < cfg.Replicas {
		return fmt.Errorf("test 4: %d replicas need at least as many I/O servers (have %d)", cfg.Replicas, m)
	}
	// S as in test 3; the replica notes say what else bounds writes.
	bound := func(n int) float64 { return min(float64(n)*I, float64(m)*I, R) }
	// The write bound when the client sends each byte once and the
	// servers' links carry every copy.
	rf := float64(cfg.Replicas)
	wbound := func(n int) float64 { return min(float64(n)*I, float64(m)*I/rf, R/rf) }
	add := func(system string, n int, wmb, rmb float64) {
		p := PFSPoint{Test: 4, System: system, Rate: rate, N: n, M: m, WriteMB: wmb, ReadMB: rmb, Bound: bound(n), Replicas: cfg.Replicas, WriteBound: wbound(n)}
		res.Points = append(res.Points, p)
		logf("test 4 %s N=%d M=%d %s replicas %d: write %6.1f (%.2f of W %.1f, %.2f of S/%d) read %6.1f (%.2f of S) MB/s (S %.1f)\n",
			rate, n, m, system, cfg.Replicas, wmb, wmb/p.WriteBound, p.WriteBound, wmb*rf/p.Bound, cfg.Replicas, rmb, rmb/p.Bound, p.Bound)
	}
	// run measures N = 1..MaxN clients with job(write) for client i.
	run := func(system string, job func(n int, write bool) func(int) (IOResult, error)) error {
		for n := 1; n <= cfg.MaxN; n++ {
			wmb, err := parallelIO(n, job(n, true))
			if err != nil {
				return fmt.Errorf("test 4 %s N=%d write: %w", system, n, err)
			}
			dropCaches()
			rmb, err := parallelIO(n, job(n, false))
			if err != nil {
				return fmt.Errorf("test 4 %s N=%d read: %w", system, n, err)
			}
			add(system, n, wmb, rmb)
		}
		return nil
	}

	fsys, err := startFS(m)
	if err != nil {
		return err
	}
	err = corralReplicaDir(ctx, fsys.Meta.Addr, "/r", cfg.Replicas)
	if err == nil {
		err = run("corral", func(n int, write bool) func(int) (IOResult, error) {
			return func(i int) (IOResult, error) {
				return io1(fmt.Sprintf("client%d", i+1), fsys.Meta.Addr, fmt.Sprintf("/r/t4-%d-%d", n, i), cfg.Test3File, 2<<20, write, m)
			}
		})
	}
	fsys.Stop()
	if err != nil {
		// Until meta keeps replica counts the Corral rows cannot be
		// measured; the others still are.
		logf("test 4 %s corral: %v\n", rate, err)
		res.Notes = append(res.Notes, fmt.Sprintf("test 4 at %s: Corral not measured: %v", rate, err))
	}
	if !cfg.Others {
		return nil
	}
	var servers []string
	for i := 1; i <= m; i++ {
		servers = append(servers, fmt.Sprintf("iod%d", i))
	}
	mountJob := func(mnts []string) func(n int, write bool) func(int) (IOResult, error) {
		return func(n int, write bool) func(int) (IOResult, error) {
			return func(i int) (IOResult, error) {
				return fileIO(filepath.Join(mnts[i], fmt.Sprintf("t4-%d-%d", n, i)), cfg.Test3File, 2<<20, write)
			}
		}
	}
	if glusterAvailable() {
		g, err := startGluster(ctx, bed, filepath.Join(scratch, "gluster-r-"+rate), servers)
		if err != nil {
			return err
		}
		err = g.volume(ctx, "replica", "replica")
		var mnts []string
		for i := 1; i <= cfg.MaxN && err == nil; i++ {
			var mnt string
			if mnt, err = g.mount(ctx, fmt.Sprintf("client%d", i), "replica"); err == nil {
				mnts = append(mnts, mnt)
			}
		}
		if err == nil {
			err = run("glusterfs replica 2", mountJob(mnts))
		}
		g.stop()
		if err != nil {
			return err
		}
	} else {
		logf("GlusterFS not installed: skipped (scripts/deps bench installs it)\n")
	}
	if moosefsAvailable() {
		mfs, err := startMooseFS(ctx, bed, filepath.Join(scratch, "moosefs-r-"+rate), "meta", servers)
		if err != nil {
			return err
		}
		defer mfs.stop()
		var mnts []string
		for i := 1; i <= cfg.MaxN; i++ {
			mnt, err := mfs.mount(ctx, fmt.Sprintf("client%d", i))
			if err != nil {
				return err
			}
			mnts = append(mnts, mnt)
		}
		if err := moosefsWarm(mnts[0]); err != nil {
			return err
		}
		// Goal 2 on the mount's root, recursively: files made after it
		// keep two copies on distinct chunkservers. The tool talks to the
		// master, so it runs on the client host.
		cmd, _ := bed.Command(ctx, "client1", "mfssetgoal", "-r", "2", mnts[0])
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mfssetgoal 2 %s: %v: %s", mnts[0], err, out)
		}
		if err := run("moosefs goal 2", mountJob(mnts)); err != nil {
			return err
		}
		// Goal 2 means two copies: say so if MooseFS kept fewer.
		cmd, _ = bed.Command(ctx, "client1", "mfsgetgoal", filepath.Join(mnts[0], "t4-1-0"))
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), ": 2") {
			res.Notes = append(res.Notes, fmt.Sprintf("MooseFS at %s: mfsgetgoal says %q (%v)", rate, strings.TrimSpace(string(out)), err))
		}
	} else {
		logf("MooseFS not installed: skipped (scripts/deps bench installs it)\n")
	}
	return nil
}

// moosefsWarm waits until the chunkservers have registered: a small synced
// write is quick.
func moosefsWarm(mnt string) error {
	var last error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		r, err := fileIO(filepath.Join(mnt, "warm-up"), 1<<20, 1<<20, true)
		if err == nil && r.Seconds < 0.5 {
			return nil
		}
		last = err
	}
	return fmt.Errorf("moosefs at %s never took a quick 1 MiB write in 30 s (%v)", mnt, last)
}

// corralReplicaDir makes dir with the given replica count and checks that
// meta kept it.
func corralReplicaDir(ctx context.Context, meta, dir string, replicas int) error {
	cl := client.New(meta)
	defer cl.Close()
	if err := cl.MkdirAll(ctx, dir, 0o755); err != nil {
		return err
	}
	a, err := cl.Stat(ctx, dir)
	if err != nil {
		return err
	}
	if err := SetReplicas(ctx, cl, a.Ino, replicas); err != nil {
		return err
	}
	if a, err = cl.Stat(ctx, dir); err != nil {
		return err
	}
	if a.Replicas != uint32(replicas) {
		return fmt.Errorf("%s: asked for %d replicas, the directory says %d (replicas not in meta yet?)", dir, replicas, a.Replicas)
	}
	return nil
}

func replicaNotes(r int) []string {
	return []string{
		fmt.Sprintf("test 4: N clients x all M I/O servers, 2 MiB records, every file with %d copies (Corral: a directory set to %d replicas; GlusterFS: replica 2 volume; MooseFS: goal 2); S = min(N·I, M·I, P·R) as in test 3", r, r),
		fmt.Sprintf("write bound W = min(N·I, M·I/%d, P·R/%d): the client sends each byte once, the I/O servers' links and the disk carry %d copies", r, r, r),
		fmt.Sprintf("write bounds with %d copies: a client that sent each copy itself would be held to S/%d by its own link; Corral's client sends each write once, to the column's head, which forwards the other copies, so the client links allow S, while the I/O servers' links carry %d copies (M·I/%d) and the one disk writes %d copies (P·R/%d): the table gives write/S and write/(S/%d)", r, r, r, r, r, r, r),
		"GlusterFS replica 2: the FUSE client itself writes to both bricks of a pair, so its link carries every byte twice (S/2 is its bound); MooseFS goal 2: the client writes to one chunkserver, which chains the second copy",
		"reads read one copy: their bound is S",
	}
}

// hasTest says whether any point is of test t.
func (r *PFSResult) hasTest(t int) bool {
	for _, p := range r.Points {
		if p.Test == t {
			return true
		}
	}
	return false
}

// replicaMarkdown renders test 4.
func (r *PFSResult) replicaMarkdown(b *strings.Builder) {
	if !r.hasTest(4) {
		return
	}
	b.WriteString("\nTest 4: N clients x M I/O servers, replicated files, 2 MiB records\n\n| system | replicas | rate | N x M | write MB/s | read MB/s | bound S | write bound W | write/W | write/(S/R) | read/S |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Points {
		if p.Test == 4 {
			fmt.Fprintf(b, "| %s | %d | %s | %d x %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n", p.System, p.Replicas, p.Rate, p.N, p.M,
				p.WriteMB, p.ReadMB, p.Bound, p.WriteBound, p.WriteMB/p.WriteBound, p.WriteMB*float64(p.Replicas)/p.Bound, p.ReadMB/p.Bound)
		}
	}
}
