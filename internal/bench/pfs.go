package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/testbed"
)

// IOResult is what one pfs-io run reports.
type IOResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// A write's phases: the WriteAt calls (they return once the bytes
	// are buffered), the wait for every write in flight (Flush), and
	// Close (the sync on every server).
	WriteSec float64 `json:"write_s,omitempty"`
	FlushSec float64 `json:"flush_s,omitempty"`
	SyncSec  float64 `json:"sync_s,omitempty"`
}

// PFSIO writes (then syncs) or reads one file through the client library
// in records of the given size, creating it with layout o: what a client
// process of `corral bench pfs` does, and pfs-local's library rows.
// progress, if given, is called with the bytes done after each record.
func PFSIO(ctx context.Context, cl *client.Client, path string, size, record int64, write bool, o client.CreateOpts, progress ...func(int64)) (IOResult, error) {
	report := func(n int64) {
		for _, p := range progress {
			p(n)
		}
	}
	buf := pattern(int(record))
	start := time.Now()
	if write {
		f, err := cl.CreatePath(ctx, path, 0o644, o)
		if err != nil {
			return IOResult{}, err
		}
		for off := int64(0); off < size; off += record {
			if _, err := f.WriteAt(buf[:min(record, size-off)], off); err != nil {
				return IOResult{}, err
			}
			report(min(off+record, size))
		}
		t1 := time.Now()
		if err := f.Flush(); err != nil {
			return IOResult{}, err
		}
		t2 := time.Now()
		if err := f.Close(); err != nil {
			return IOResult{}, err
		}
		d := time.Since(start).Seconds()
		return IOResult{Bytes: size, Seconds: d, MBps: float64(size) / 1e6 / d, WriteSec: t1.Sub(start).Seconds(),
			FlushSec: t2.Sub(t1).Seconds(), SyncSec: time.Since(t2).Seconds()}, nil
	} else {
		f, err := cl.Open(ctx, path)
		if err != nil {
			return IOResult{}, err
		}
		for off := int64(0); off < size; off += record {
			if _, err := f.ReadAt(buf[:min(record, size-off)], off); err != nil && err != io.EOF {
				return IOResult{}, err
			}
			report(min(off+record, size))
		}
	}
	d := time.Since(start).Seconds()
	return IOResult{Bytes: size, Seconds: d, MBps: float64(size) / 1e6 / d}, nil
}

// PFSConfig sizes paper 002's tests.
type PFSConfig struct {
	Bin, Dir, Out string
	Rates         []string
	Test1File     int64
	Records       []int64
	Test2File     int64
	Procs         []int
	Test3File     int64
	MaxN, MaxM    int
	// Others measures GlusterFS beside Corral in test 3 when it is
	// installed.
	Others bool
	// Replicas >= 2 runs test 4 instead of tests 1-3: N clients over all
	// MaxM I/O servers writing and reading files with that many copies, on
	// Corral, GlusterFS replica 2 and MooseFS goal 2.
	Replicas int
	Log      io.Writer
}

// PFSPoint is one measurement.
type PFSPoint struct {
	Test    int     `json:"test"`
	System  string  `json:"system"` // corral, or a file system measured beside it
	Rate    string  `json:"rate"`
	Record  int64   `json:"record,omitempty"`
	Procs   int     `json:"procs,omitempty"`
	N       int     `json:"clients,omitempty"`
	M       int     `json:"iods,omitempty"`
	WriteMB float64 `json:"write_mb_s"`
	ReadMB  float64 `json:"read_mb_s"`
	Bound   float64 `json:"bound_mb_s"`
	// Replicas: copies of every file (test 4).
	Replicas int `json:"replicas,omitempty"`
	// WriteBound (test 4): min(N·I, M·I/R, P·R/R) for R copies sent once
	// by the client and forwarded by the servers.
	WriteBound float64 `json:"write_bound_mb_s,omitempty"`
}

// PFSResult is the scenario's output.
type PFSResult struct {
	Scenario string             `json:"scenario"`
	When     time.Time          `json:"when"`
	LinkMB   map[string]float64 `json:"link_mb_s"` // I per rate
	DiskMB   float64            `json:"disk_mb_s"` // R
	Points   []PFSPoint         `json:"points"`
	Notes    []string           `json:"notes"`
}

var reMbps = regexp.MustCompile(`: ([0-9.]+) MB/s`)

// RunPFS reruns paper 002's tests 1-3 on a test bed at each link rate.
func RunPFS(ctx context.Context, cfg PFSConfig) (*PFSResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if err := testbed.CheckRoot(); err != nil {
		return nil, err
	}
	res := &PFSResult{Scenario: "pfs", When: time.Now().UTC(), LinkMB: map[string]float64{}}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "pfs")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// R: the disk every I/O server shares here (one disk: P = 1).
	w, r, err := localLarge(scratch, 256<<20)
	if err != nil {
		return nil, err
	}
	res.DiskMB = min(w, r)
	logf("disk R: write %.0f MB/s, read %.0f MB/s (one disk shared by all I/O servers: P = 1)\n", w, r)
	for _, rate := range cfg.Rates {
		if err := runPFSRate(ctx, cfg, rate, scratch, res, logf); err != nil {
			return nil, err
		}
	}
	res.Notes = append(res.Notes,
		"clients and I/O servers each on their own test-bed host at the given rate; the metadata server unshaped",
		"bound S = min(N·I, M·I, P·R) with I measured by raw TCP between two hosts in the same run, R the disk (write with fsync, read with a dropped cache), P = 1: every I/O server shares this machine's one disk",
		"files striped 1 MiB over the M I/O servers; writes end with a sync on every server; reads follow with the page cache dropped",
		"paper 002 used a 512 MiB file (test 1), 100 MiB files (test 2) and 200 MiB files (test 3); sizes here are scaled to run in minutes",
		glusterNote(), moosefsNote())
	if cfg.Replicas >= 2 {
		res.Notes = append(res.Notes, replicaNotes(cfg.Replicas)...)
	}
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return nil, err
	}
	return res, res.plots(cfg.Out)
}

func runPFSRate(ctx context.Context, cfg PFSConfig, rate, scratch string, res *PFSResult, logf func(string, ...any)) error {
	var hosts []string
	for i := 1; i <= cfg.MaxN; i++ {
		hosts = append(hosts, fmt.Sprintf("client%d", i))
	}
	hosts = append(hosts, "meta")
	for i := 1; i <= cfg.MaxM; i++ {
		hosts = append(hosts, fmt.Sprintf("iod%d", i))
	}
	spec := testbed.NewSpec("pfs", hosts, rate)
	spec.Hosts[cfg.MaxN].Rate = "" // meta
	testbed.Down(spec.Name)
	bed, err := testbed.Up(spec)
	if err != nil {
		return err
	}
	defer testbed.Down(spec.Name)
	addr := func(h string) string { x, _ := bed.Host(h); return x.Addr.String() }
	// I: raw TCP from a client host to an I/O server host.
	sink, err := launch.Start(ctx, "sink", "nsenter", filepath.Join(scratch, "sink.log"),
		append(bed.Wrap("iod1")[1:], cfg.Bin, "testbed", "tcp-sink", "--listen", addr("iod1")+":5001")...)
	if err != nil {
		return err
	}
	cmd, _ := bed.Command(ctx, "client1", cfg.Bin, "testbed", "tcp-send", sink.Addr, "--bytes", "48M", "--max-time", "30s")
	out, err := cmd.CombinedOutput()
	sink.Kill()
	m := reMbps.FindSubmatch(out)
	if err != nil || m == nil {
		return fmt.Errorf("measuring the link: %v %s", err, out)
	}
	I, _ := strconv.ParseFloat(string(m[1]), 64)
	res.LinkMB[rate] = I
	logf("link I at %s: %.1f MB/s\n", rate, I)
	R := res.DiskMB

	var keepLogs []string
	startFS := func(m int) (*launch.FS, error) {
		var listens []string
		for i := 1; i <= m; i++ {
			listens = append(listens, addr(fmt.Sprintf("iod%d", i))+":7410")
		}
		data, err := os.MkdirTemp(scratch, "fs-")
		if err != nil {
			return nil, err
		}
		fsys, err := launch.StartFSWrapped(ctx, cfg.Bin, data, addr("meta")+":7400", listens, bed.Wrap)
		// The servers' logs outlive the scratch directory: they say what
		// happened when a row fails.
		keepLogs = append(keepLogs, filepath.Join(data, "logs"))
		return fsys, err
	}
	defer func() {
		for i, d := range keepLogs {
			exec.Command("cp", "-r", d, filepath.Join(cfg.Out, fmt.Sprintf("logs-%s-%d", rate, i+1))).Run()
		}
	}()
	// io runs one pfs-io process on a client host.
	io1 := func(host, meta, path string, size, record int64, write bool, m int) (IOResult, error) {
		args := []string{cfg.Bin, "bench", "pfs-io", "--meta", meta, "--path", path, "--size", strconv.FormatInt(size, 10),
			"--record", strconv.FormatInt(record, 10), "--stripe-count", strconv.Itoa(m)}
		if write {
			args = append(args, "--write")
		} else {
			dropCaches()
		}
		cmd, _ := bed.Command(ctx, host, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			// The progress bar shares stderr: keep the error, from its
			// first line (a joined error spans several) to the end.
			lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr.String(), "\r", "\n")), "\n")
			from := len(lines) - 1
			for i, l := range lines {
				if strings.HasPrefix(l, "corral ") {
					from = i
					break
				}
			}
			return IOResult{}, fmt.Errorf("pfs-io on %s (%s): %v: %s", host, path, err, strings.Join(lines[from:], " | "))
		}
		var r IOResult
		if err := json.Unmarshal(out, &r); err != nil {
			return r, err
		}
		if write {
			logf("  %s %s: %.2f s (write calls %.2f, flush %.2f, close/sync %.2f)\n", host, path, r.Seconds, r.WriteSec, r.FlushSec, r.SyncSec)
		}
		return r, nil
	}
	// parallelIO runs jobs at once and returns aggregate MB/s (all bytes
	// over the longest time).
	parallelIO := func(n int, job func(i int) (IOResult, error)) (float64, error) {
		var wg sync.WaitGroup
		rs := make([]IOResult, n)
		errs := make([]error, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); rs[i], errs[i] = job(i) }()
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		var total int64
		for i := range rs {
			if errs[i] != nil {
				return 0, errs[i]
			}
			total += rs[i].Bytes
		}
		return float64(total) / 1e6 / el, nil
	}

	if cfg.Replicas >= 2 {
		return runPFSReplicas(ctx, cfg, rate, I, R, bed, scratch, startFS, io1, parallelIO, res, logf)
	}

	// Test 1: one client, one I/O server, record sizes.
	fsys, err := startFS(1)
	if err != nil {
		return err
	}
	for _, rec := range cfg.Records {
		p := fmt.Sprintf("/t1-%d", rec)
		wr, err := io1("client1", fsys.Meta.Addr, p, cfg.Test1File, rec, true, 1)
		if err != nil {
			fsys.Stop()
			return err
		}
		rd, err := io1("client1", fsys.Meta.Addr, p, cfg.Test1File, rec, false, 1)
		if err != nil {
			fsys.Stop()
			return err
		}
		pt := PFSPoint{Test: 1, System: "corral", Rate: rate, Record: rec, N: 1, M: 1, WriteMB: wr.MBps, ReadMB: rd.MBps, Bound: min(I, R)}
		res.Points = append(res.Points, pt)
		logf("test 1 %s record %-6s write %6.1f read %6.1f MB/s (bound %.1f)\n", rate, humanBytes(rec), pt.WriteMB, pt.ReadMB, pt.Bound)
	}
	fsys.Stop()

	// Test 2: 1..10 processes on one client, all I/O servers.
	fsys, err = startFS(cfg.MaxM)
	if err != nil {
		return err
	}
	for _, procs := range cfg.Procs {
		job := func(write bool) func(int) (IOResult, error) {
			return func(i int) (IOResult, error) {
				return io1("client1", fsys.Meta.Addr, fmt.Sprintf("/t2-%d-%d", procs, i), cfg.Test2File, 512<<10, write, cfg.MaxM)
			}
		}
		wmb, err := parallelIO(procs, job(true))
		if err != nil {
			fsys.Stop()
			return err
		}
		dropCaches()
		rmb, err := parallelIO(procs, job(false))
		if err != nil {
			fsys.Stop()
			return err
		}
		pt := PFSPoint{Test: 2, System: "corral", Rate: rate, Procs: procs, N: 1, M: cfg.MaxM, WriteMB: wmb, ReadMB: rmb, Bound: min(I, float64(cfg.MaxM)*I, R)}
		res.Points = append(res.Points, pt)
		logf("test 2 %s %2d processes: write %6.1f read %6.1f MB/s (bound %.1f)\n", rate, procs, wmb, rmb, pt.Bound)
	}
	fsys.Stop()

	// Test 3: N clients x M I/O servers.
	for m := 1; m <= cfg.MaxM; m++ {
		fsys, err := startFS(m)
		if err != nil {
			return err
		}
		for n := 1; n <= cfg.MaxN; n++ {
			job := func(write bool) func(int) (IOResult, error) {
				return func(i int) (IOResult, error) {
					return io1(fmt.Sprintf("client%d", i+1), fsys.Meta.Addr, fmt.Sprintf("/t3-%d-%d", n, i), cfg.Test3File, 2<<20, write, m)
				}
			}
			wmb, err := parallelIO(n, job(true))
			if err == nil {
				dropCaches()
				var rmb float64
				if rmb, err = parallelIO(n, job(false)); err == nil {
					pt := PFSPoint{Test: 3, System: "corral", Rate: rate, N: n, M: m, WriteMB: wmb, ReadMB: rmb, Bound: min(float64(n)*I, float64(m)*I, R)}
					res.Points = append(res.Points, pt)
					logf("test 3 %s N=%d M=%d: write %6.1f read %6.1f MB/s (bound %.1f)\n", rate, n, m, wmb, rmb, pt.Bound)
				}
			}
			if err != nil {
				fsys.Stop()
				return err
			}
		}
		fsys.Stop()
	}

	// The same test 3 on GlusterFS and MooseFS, over all M I/O server
	// hosts, where they are installed.
	if !cfg.Others {
		return nil
	}
	var servers []string
	for i := 1; i <= cfg.MaxM; i++ {
		servers = append(servers, fmt.Sprintf("iod%d", i))
	}
	// others runs test 3 over the mount points one file system gives the
	// client hosts.
	others := func(system string, mnts []string) error {
		for n := 1; n <= cfg.MaxN; n++ {
			job := func(write bool) func(int) (IOResult, error) {
				return func(i int) (IOResult, error) {
					return fileIO(filepath.Join(mnts[i], fmt.Sprintf("t3-%d-%d", n, i)), cfg.Test3File, 2<<20, write)
				}
			}
			wmb, err := parallelIO(n, job(true))
			if err != nil {
				return err
			}
			dropCaches()
			rmb, err := parallelIO(n, job(false))
			if err != nil {
				return err
			}
			bound := min(float64(n)*I, float64(cfg.MaxM)*I, R)
			res.Points = append(res.Points, PFSPoint{Test: 3, System: system, Rate: rate, N: n, M: cfg.MaxM, WriteMB: wmb, ReadMB: rmb, Bound: bound})
			logf("test 3 %s N=%d M=%d %s: write %6.1f read %6.1f MB/s (bound %.1f)\n", rate, n, cfg.MaxM, system, wmb, rmb, bound)
		}
		return nil
	}
	if glusterAvailable() {
		g, err := startGluster(ctx, bed, filepath.Join(scratch, "gluster-"+rate), servers)
		if err != nil {
			return err
		}
		defer g.stop()
		kinds := []string{"distributed"}
		if cfg.MaxM >= 3 {
			kinds = append(kinds, "dispersed")
		}
		for _, kind := range kinds {
			if err := g.volume(ctx, kind, kind); err != nil {
				return err
			}
			var mnts []string
			for i := 1; i <= cfg.MaxN; i++ {
				m, err := g.mount(ctx, fmt.Sprintf("client%d", i), kind)
				if err != nil {
					return err
				}
				mnts = append(mnts, m)
			}
			if err := others("glusterfs "+kind, mnts); err != nil {
				return err
			}
		}
		g.stop()
	} else {
		logf("GlusterFS not installed: skipped (scripts/deps bench installs it)\n")
	}
	if moosefsAvailable() {
		m, err := startMooseFS(ctx, bed, filepath.Join(scratch, "moosefs-"+rate), "meta", servers)
		if err != nil {
			return err
		}
		defer m.stop()
		var mnts []string
		for i := 1; i <= cfg.MaxN; i++ {
			mnt, err := m.mount(ctx, fmt.Sprintf("client%d", i))
			if err != nil {
				return err
			}
			mnts = append(mnts, mnt)
		}
		// Chunkservers register with the master a few seconds after start:
		// wait until a small synced write is quick.
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
			r, err := fileIO(filepath.Join(mnts[0], "warm-up"), 1<<20, 1<<20, true)
			if err == nil && r.Seconds < 0.5 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err := others("moosefs", mnts); err != nil {
			return err
		}
	} else {
		logf("MooseFS not installed: skipped (scripts/deps bench installs it)\n")
	}
	return nil
}

// Markdown renders the tests as tables.
func (r *PFSResult) Markdown() string {
	var b strings.Builder
	title := "tests 1-3"
	if r.hasTest(4) {
		title = "test 4, replicas"
	}
	fmt.Fprintf(&b, "# pfs (paper 002, %s), %s\n\nDisk R = %.0f MB/s (P = 1).", title, r.When.Format(time.RFC3339), r.DiskMB)
	for rate, i := range r.LinkMB {
		fmt.Fprintf(&b, " Link I at %s = %.1f MB/s.", rate, i)
	}
	b.WriteString("\n")
	sections := []struct {
		test int
		head string
		key  func(p PFSPoint) string
	}{
		{1, "Test 1: one client, one I/O server, by record size", func(p PFSPoint) string { return humanBytes(p.Record) }},
		{2, "Test 2: processes on one client, all I/O servers, 512 KiB records", func(p PFSPoint) string { return strconv.Itoa(p.Procs) }},
		{3, "Test 3: N clients x M I/O servers, 2 MiB records", func(p PFSPoint) string { return fmt.Sprintf("%d x %d", p.N, p.M) }},
	}
	r.replicaMarkdown(&b)
	for _, s := range sections {
		if !r.hasTest(s.test) {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n\n| system | rate | %s | write MB/s | read MB/s | bound S | write/S | read/S |\n|---|---|---|---|---|---|---|---|\n", s.head, strings.SplitN(s.head, ", ", 2)[0])
		for _, p := range r.Points {
			if p.Test == s.test {
				fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f |\n", p.System, p.Rate, s.key(p), p.WriteMB, p.ReadMB, p.Bound, p.WriteMB/p.Bound, p.ReadMB/p.Bound)
			}
		}
	}
	if r.hasTest(1) {
		b.WriteString("\nPlots: test1.svg, test2.svg, test3.svg.\n")
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func (r *PFSResult) plots(dir string) error {
	for test, xl := range map[int]string{1: "record size (KiB)", 2: "processes", 3: "clients N (one line per M)"} {
		var series []Series
		byKey := map[string]*Series{}
		var order []string
		for _, p := range r.Points {
			if p.Test != test {
				continue
			}
			var x float64
			sys := ""
			if p.System != "corral" {
				sys = p.System + " "
			}
			key := sys + p.Rate + " read"
			switch test {
			case 1:
				x = float64(p.Record) / 1024
			case 2:
				x = float64(p.Procs)
			case 3:
				x = float64(p.N)
				key = fmt.Sprintf("%s%s M=%d read", sys, p.Rate, p.M)
			}
			if byKey[key] == nil {
				byKey[key] = &Series{Name: key}
				byKey[key+"b"] = &Series{Name: strings.TrimSuffix(key, " read") + " bound", Dashed: true}
				order = append(order, key, key+"b")
			}
			byKey[key].X, byKey[key].Y = append(byKey[key].X, x), append(byKey[key].Y, p.ReadMB)
			byKey[key+"b"].X, byKey[key+"b"].Y = append(byKey[key+"b"].X, x), append(byKey[key+"b"].Y, p.Bound)
		}
		for _, k := range order {
			series = append(series, *byKey[k])
		}
		if len(series) == 0 {
			continue
		}
		if err := LineChart(filepath.Join(dir, fmt.Sprintf("test%d.svg", test)), fmt.Sprintf("Paper 002 test %d: read MB/s and the bound S", test), xl, "MB/s", series); err != nil {
			return err
		}
	}
	return nil
}
