package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
)

// MetaWebConfig sizes the Zipf web figure of `corral bench meta --web`.
type MetaWebConfig struct {
	Files       int     // distinct files (0: no web figure)
	Size        int     // bytes per file
	S           float64 // Zipf exponent
	Nodes       int     // corral nodes serving at once
	Duration    time.Duration
	Connections int
}

// zipf draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^s, for any
// s > 0 (math/rand's Zipf needs s > 1; web popularity is near s = 1).
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := 0; k < n; k++ {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	z.cdf[n-1] = 1
	return z
}

// prob is the probability of rank k.
func (z *zipf) prob(k int) float64 {
	if k == 0 {
		return z.cdf[0]
	}
	return z.cdf[k] - z.cdf[k-1]
}

func (z *zipf) sample(r *rand.Rand) int {
	return sort.SearchFloat64s(z.cdf, r.Float64())
}

// webPath is the URL path of file k.
func webPath(k int) string { return fmt.Sprintf("/z/%05d.bin", k) }

// zipfLua is a wrk script requesting the paths of n draws from z (seeded:
// the same sequence for every target), each thread starting elsewhere in it.
func zipfLua(z *zipf, n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var b strings.Builder
	b.WriteString("-- written by corral bench meta: Zipf draws over the file set\nlocal idx = {")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		if i%20 == 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%d", z.sample(r))
	}
	b.WriteString("}\nlocal n = #idx\nlocal threads = 0\n")
	b.WriteString("function setup(thread)\n  threads = threads + 1\n  thread:set(\"offset\", threads * 7919)\nend\n")
	b.WriteString("local i = 0\nfunction init(args)\n  i = (offset or 0) % n\nend\n")
	b.WriteString("function request()\n  i = i % n + 1\n  return wrk.format(\"GET\", string.format(\"/z/%05d.bin\", idx[i]))\nend\n")
	return b.String()
}

// webFile is file k's content: distinct per file so a wrong file shows.
func webFile(k, size int) []byte {
	b := pattern(size)
	copy(b, fmt.Sprintf("file %05d\n", k))
	return b
}

// lookTool finds a program in $PATH or /usr/sbin (Debian's nginx is there,
// outside a user's PATH); "" when it is in neither.
func lookTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); exec.Command(p, "-v").Run() == nil {
		return p
	}
	return ""
}

// startNginx runs Debian's nginx with workers processes serving root on a
// free loopback port.
func startNginx(ctx context.Context, dir, root string, workers int) (string, func(), error) {
	addr, err := freePort()
	if err != nil {
		return "", nil, err
	}
	prefix := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return "", nil, err
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // the scratch directory is 0700: nobody cannot read it
	}
	conf := fmt.Sprintf(`%[1]sworker_processes %[2]d;
daemon off;
pid %[3]s/nginx.pid;
error_log %[3]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path %[3]s/tmp; proxy_temp_path %[3]s/tmp; fastcgi_temp_path %[3]s/tmp;
  uwsgi_temp_path %[3]s/tmp; scgi_temp_path %[3]s/tmp;
  default_type application/octet-stream;
  server { listen %[4]s; root %[5]s; }
}
`, user, workers, prefix, addr, root)
	cf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(prefix, "stderr.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(lookTool("nginx"), "-p", prefix, "-c", cf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("nginx: %w", err)
	}
	// SIGTERM, not SIGKILL: the master then ends its workers, which a
	// killed master leaves running.
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("nginx did not listen on %s; see %s and %s/error.log", addr, logf.Name(), prefix)
}

// checkGet fetches url and compares the body with want.
func checkGet(ctx context.Context, url string, want []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, int64(len(want))+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		return fmt.Errorf("GET %s: status %d, %d bytes, not the file written", url, resp.StatusCode, len(got))
	}
	return nil
}

// wrkAll runs one wrk per address at once with the script, splitting the
// connections, and sums.
func wrkAll(ctx context.Context, addrs []string, script string, conns int, d time.Duration) (WebRow, error) {
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "http://" + a + "/"
	}
	return wrkMany(ctx, nil, urls, conns, d, "-s", script)
}

// runMetaWeb serves the same Zipf-drawn 4 KiB files from corral nodes on
// cluster c and from nginx on local disk, with the same wrk script, and
// returns corral's and nginx's rows (ratio to nginx in VsDirect). A
// missing tool skips it with a note.
func runMetaWeb(ctx context.Context, bin, scratch, logDir string, c *metaCluster, w MetaWebConfig, prof *profiler, logf func(string, ...any)) ([]WebRow, []string, error) {
	for _, tool := range []string{"wrk", "nginx"} {
		if lookTool(tool) == "" {
			logf("web: skipped: %s not installed (scripts/deps installs it)\n", tool)
			return nil, []string{fmt.Sprintf("Zipf web figure skipped: %s not installed (scripts/deps installs it)", tool)}, nil
		}
	}
	w.Nodes, w.Size = max(w.Nodes, 1), max(w.Size, 1)
	secret := ""
	for _, e := range c.Env {
		k, v, _ := strings.Cut(e, "=")
		os.Setenv(k, v) // the client below is made without a credential
		secret = v
	}
	// The files: on local disk for nginx, in /www/DOMAIN for the nodes.
	root := filepath.Join(scratch, "web-root")
	if err := os.MkdirAll(filepath.Join(root, "z"), 0o755); err != nil {
		return nil, nil, err
	}
	cl := client.New(c.Meta)
	defer cl.Close()
	base := "/www/" + launch.SampleDomain
	if err := cl.MkdirAll(ctx, base+"/z", 0o755); err != nil {
		return nil, nil, fmt.Errorf("web files: mkdir %s/z: %w", base, err)
	}
	dir, err := cl.Stat(ctx, base+"/z")
	if err != nil {
		return nil, nil, err
	}
	logf("web: writing %d files of %s to Corral and to %s\n", w.Files, humanBytes(int64(w.Size)), root)
	err = parallel(w.Files, 8, func(k int) error {
		data := webFile(k, w.Size)
		if err := os.WriteFile(filepath.Join(root, webPath(k)), data, 0o644); err != nil {
			return err
		}
		a, _, err := cl.Create(ctx, dir.Ino, strings.TrimPrefix(webPath(k), "/z/"), 0o644, client.CreateOpts{})
		if err != nil {
			return fmt.Errorf("web file %d: %w", k, err)
		}
		f, err := cl.OpenAttr(ctx, a)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return nil, nil, err
	}
	var nodes []string
	var nodeProcs []*launch.Proc
	for i := 0; i < w.Nodes; i++ {
		addr, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		name := fmt.Sprintf("node%d", i+1)
		p, err := launch.Start(ctx, name, bin, filepath.Join(logDir, name+".log"), "node", "--listen", addr, "--meta", c.Meta,
			"--default-domain", launch.SampleDomain, "--secret-file", secret, "--admin", net.JoinHostPort(host, "0"), "--access-log=false")
		if err != nil {
			return nil, nil, err
		}
		defer p.Stop()
		nodes = append(nodes, p.Addr)
		nodeProcs = append(nodeProcs, p)
	}
	ng, stopNginx, err := startNginx(ctx, scratch, root, w.Nodes)
	if err != nil {
		return nil, nil, err
	}
	defer stopNginx()
	ms, err := startMemServe(ctx, bin, root, filepath.Join(logDir, "memserve.log"))
	if err != nil {
		return nil, nil, err
	}
	defer ms.Stop()
	// All must serve the same bytes for a path, or the comparison is void.
	for _, a := range append([]string{ng, ms.Addr}, nodes...) {
		for _, k := range []int{0, w.Files - 1} {
			if err := checkGet(ctx, "http://"+a+webPath(k), webFile(k, w.Size)); err != nil {
				return nil, nil, fmt.Errorf("web: %w", err)
			}
		}
	}
	script := filepath.Join(scratch, "zipf.lua")
	if err := os.WriteFile(script, []byte(zipfLua(newZipf(w.Files, w.S), 50000, 13)), 0o644); err != nil {
		return nil, nil, err
	}
	// Each target gets a short run right before its measured one, so that
	// it serves from warm caches: the node's copies of small files are
	// read again after their max age, so a warm-up several runs earlier
	// would leave them cold.
	warm := min(w.Duration, time.Second)
	run := func(what string, addrs []string) (WebRow, error) {
		if _, err := wrkAll(ctx, addrs, script, w.Connections, warm); err != nil {
			return WebRow{}, fmt.Errorf("web warm-up on %s: %w", what, err)
		}
		return wrkAll(ctx, addrs, script, w.Connections, w.Duration)
	}
	nr, err := run("nginx", []string{ng})
	if err != nil {
		return nil, nil, err
	}
	gr, err := run("the bare Go server", []string{ms.Addr})
	if err != nil {
		return nil, nil, err
	}
	if _, err := wrkAll(ctx, nodes, script, w.Connections, warm); err != nil {
		return nil, nil, fmt.Errorf("web warm-up on corral: %w", err)
	}
	var np *profiler
	var before map[string]map[string]float64
	if prof != nil {
		// The nodes and the file system's daemons, while the nodes serve.
		np = newProfiler(prof.dir, append(profTargetsOf(nodeProcs, adminLogRe), prof.targets...))
		before = np.scrape(ctx)
		np.start(ctx)
	}
	cr, err := wrkAll(ctx, nodes, script, w.Connections, w.Duration)
	var webNote string
	if np != nil {
		np.stop(ctx, "web")
		after := np.scrape(ctx)
		prof.notes = append(prof.notes, np.notes...)
		reqs := sumPrefix(after["node"], "corral_node_requests_total") - sumPrefix(before["node"], "corral_node_requests_total")
		d := func(kind, name string) float64 {
			return (sumPrefix(after[kind], name) - sumPrefix(before[kind], name)) / max(reqs, 1)
		}
		webNote = fmt.Sprintf("Zipf web, per request on the nodes (--profile, metrics before and after the corral run): file-system requests %s; data cache hits %.3f, misses %.3f; metadata requests at the members %.3f; node CPU µs %.0f",
			fmtByOp(byOp(before["node"], after["node"], "corral_node_fs_requests_total", int(max(reqs, 1)))),
			d("node", "corral_node_cache_hits_total"), d("node", "corral_node_cache_misses_total"),
			d("meta", "corral_meta_operations_total"), d("node", "process_cpu_seconds_total")*1e6)
		logf("web: %s\n", webNote)
	}
	if err != nil {
		return nil, nil, err
	}
	nr.Target, nr.Size, nr.VsDirect = fmt.Sprintf("nginx (%d workers, local disk)", w.Nodes), int64(w.Size), 1
	gr.Target, gr.Size, gr.VsDirect = "bare Go net/http (memory)", int64(w.Size), gr.ReqPerS/max(nr.ReqPerS, 1e-9)
	cr.Target, cr.Size, cr.VsDirect = fmt.Sprintf("corral (%d nodes)", w.Nodes), int64(w.Size), cr.ReqPerS/max(nr.ReqPerS, 1e-9)
	for _, r := range []WebRow{cr, gr, nr} {
		logf("web zipf %-30s %9.0f req/s %7.1f MB/s p99 %6.2f ms errors %d  %.2f of nginx, %.2f of bare Go\n", r.Target, r.ReqPerS, r.MBPerS, r.P99ms, r.Errors, r.VsDirect, r.ReqPerS/max(gr.ReqPerS, 1e-9))
	}
	note := fmt.Sprintf("Zipf web: %d files of %s, s = %.1f, the same wrk script (50,000 seeded draws, %d connections, %v) against %d corral nodes at once (a wrk each, connections split), against nginx with as many worker processes on the same files on local disk, and against a bare Go net/http server (one process, http.ServeContent from a map of the files in memory); one warm-up run each right before its measured run",
		w.Files, humanBytes(int64(w.Size)), w.S, w.Connections, w.Duration, w.Nodes)
	notes := []string{note}
	if webNote != "" {
		notes = append(notes, webNote)
	}
	return []WebRow{cr, gr, nr}, notes, nil
}
