package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
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
)

// WebConfig sizes the web scenario.
type WebConfig struct {
	Bin, Dir, Out string
	Duration      time.Duration // per wrk run
	Connections   int
	Sizes         []int64 // file sizes to fetch
	MemP          []int   // node memory: concurrent clients
	MemS          []int64 // node memory: file sizes
	Log           io.Writer
}

// WebRow is one target at one file size.
type WebRow struct {
	Target   string  `json:"target"`
	Size     int64   `json:"size"`
	ReqPerS  float64 `json:"requests_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	P99ms    float64 `json:"p99_ms"`
	Errors   int64   `json:"errors"`
	VsOne    float64 `json:"ratio_to_one_node"`
	VsDirect float64 `json:"ratio_to_direct_3"`
}

// MemRow is the node's memory while P clients fetch S-byte files.
type MemRow struct {
	P       int     `json:"p"`
	S       int64   `json:"s"`
	PS      float64 `json:"p_times_s_mb"`
	PeakRSS float64 `json:"peak_rss_mb"`
	BaseRSS float64 `json:"idle_rss_mb"`
}

// WebResult is the scenario's output.
type WebResult struct {
	Scenario    string    `json:"scenario"`
	When        time.Time `json:"when"`
	Duration    string    `json:"duration"`
	Connections int       `json:"connections"`
	Rows        []WebRow  `json:"rows"`
	Memory      []MemRow  `json:"memory"`
	Notes       []string  `json:"notes"`
}

var (
	reReq  = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reXfer = regexp.MustCompile(`Transfer/sec:\s+([0-9.]+)([KMG]?B)`)
	reP99  = regexp.MustCompile(`\s99%\s+([0-9.]+)(us|ms|s)`)
	reErr  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// wrk runs one wrk (on a test-bed host when wrap is its command prefix)
// and parses its summary; extra goes before the URL (e.g. -s SCRIPT).
func wrk(ctx context.Context, wrap []string, url string, conns int, d time.Duration, extra ...string) (WebRow, error) {
	threads := min(2, conns)
	args := append(append([]string{}, wrap...), "wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%.0fs", max(1, d.Seconds())), "--timeout", "10s", "--latency")
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return WebRow{}, fmt.Errorf("wrk %s: %v: %s", url, err, out)
	}
	s := string(out)
	var r WebRow
	if m := reReq.FindStringSubmatch(s); m != nil {
		r.ReqPerS, _ = strconv.ParseFloat(m[1], 64)
	} else {
		return r, fmt.Errorf("wrk output without Requests/sec: %s", s)
	}
	if m := reXfer.FindStringSubmatch(s); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		mult := map[string]float64{"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[m[2]]
		r.MBPerS = v * mult / 1e6
	}
	if m := reP99.FindStringSubmatch(s); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		r.P99ms = v * map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3}[m[2]]
	}
	for _, m := range reErr.FindAllStringSubmatch(s, -1) {
		for _, g := range m[1:] {
			n, _ := strconv.ParseInt(g, 10, 64)
			r.Errors += n
		}
	}
	return r, nil
}

// wrkMany runs one wrk per URL at once, splitting the connections, and
// sums; extra goes to every wrk before its URL.
func wrkMany(ctx context.Context, wrap []string, urls []string, conns int, d time.Duration, extra ...string) (WebRow, error) {
	rows := make([]WebRow, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i], errs[i] = wrk(ctx, wrap, u, max(1, conns/len(urls)), d, extra...)
		}()
	}
	wg.Wait()
	return sumRows(rows), errors.Join(errs...)
}

// target is a balancer for wrk to go through.
type target struct{ name, addr string }

// wrkTargets fetches path from all nodes at once (one wrk per node with its
// share of the connections, summed: the zero-cost balancer), then through
// each target. Rows come back in that order, with Size and the ratio to the
// nodes at once filled.
func wrkTargets(ctx context.Context, wrap []string, nodes []string, path string, size int64, targets []target, conns int, d time.Duration) ([]WebRow, error) {
	var urls []string
	for _, n := range nodes {
		urls = append(urls, "http://"+n+path)
	}
	direct, err := wrkMany(ctx, wrap, urls, conns, d)
	if err != nil {
		return nil, err
	}
	direct.Target = fmt.Sprintf("%d nodes direct", len(nodes))
	rows := []WebRow{direct}
	for _, t := range targets {
		r, err := wrk(ctx, wrap, "http://"+t.addr+path, conns, d)
		if err != nil {
			return nil, err
		}
		r.Target = t.name
		rows = append(rows, r)
	}
	for i := range rows {
		rows[i].Size = size
		rows[i].VsDirect = rows[i].ReqPerS / direct.ReqPerS
	}
	return rows, nil
}

// freePort picks a free port on a random loopback address: a port freed on
// 127.0.0.1 can be taken by an outgoing connection before the daemon binds
// it; nothing else uses 127.x.y.z.
func freePort() (string, error) {
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), rand.IntN(256), 1+rand.IntN(250))
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startHAProxy runs Debian's haproxy in mode tcp, leastconn, over nodes,
// listening on bind (empty: a free loopback port), on a test-bed host when
// wrap is its command prefix.
func startHAProxy(ctx context.Context, dir, bind string, wrap []string, nodes []string) (string, func(), error) {
	addr := bind
	if addr == "" {
		var err error
		if addr, err = freePort(); err != nil {
			return "", nil, err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global\n  maxconn 4096\ndefaults\n  mode tcp\n  timeout connect 3s\n  timeout client 60s\n  timeout server 60s\n")
	fmt.Fprintf(&b, "frontend fe\n  bind %s\n  default_backend be\nbackend be\n  balance leastconn\n", addr)
	for i, n := range nodes {
		fmt.Fprintf(&b, "  server n%d %s\n", i+1, n)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return "", nil, err
	}
	logf, _ := os.Create(filepath.Join(dir, "haproxy.log"))
	args := append(append([]string{}, wrap...), "haproxy", "-f", cfg, "-db")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("haproxy: %w", err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() }
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil { // a bed's hosts are reachable from here too
			c.Close()
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("haproxy did not listen on %s; see %s", addr, filepath.Join(dir, "haproxy.log"))
}

func fileName(size int64) string { return strings.ToLower(humanBytes(size)) + ".bin" }

// RunWeb runs the web scenario.
func RunWeb(ctx context.Context, cfg WebConfig) (*WebResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	for _, tool := range []string{"wrk", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not installed (scripts/deps installs it: apt-get install wrk haproxy)", tool)
		}
	}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "web")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var addrs [4]string
	for i := range addrs {
		if addrs[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: scratch, MetaListen: "127.0.0.1:0",
		IODListens: []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"},
		NodeListen: []string{addrs[0], "127.0.0.1:0", "127.0.0.1:0"}, VIP: addrs[1], L7VIP: addrs[2], Admin: addrs[3],
		Dataplane: "l4", Scheduler: "wlc"}
	cl, err := launch.StartCluster(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	fsc := client.New(cl.Meta.Addr)
	defer fsc.Close()
	sizes := append(append([]int64{}, cfg.Sizes...), cfg.MemS...)
	for _, size := range sizes {
		if _, err := putSample(ctx, fsc, size); err != nil {
			return nil, err
		}
	}
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Addr)
	}
	// The bare Go baseline: the same files, from memory.
	memRoot := filepath.Join(scratch, "memserve")
	if err := os.MkdirAll(memRoot, 0o755); err != nil {
		return nil, err
	}
	for _, size := range cfg.Sizes {
		if err := os.WriteFile(filepath.Join(memRoot, fileName(size)), pattern(int(size)), 0o644); err != nil {
			return nil, err
		}
	}
	ms, err := startMemServe(ctx, cfg.Bin, memRoot, filepath.Join(scratch, "memserve.log"))
	if err != nil {
		return nil, err
	}
	defer ms.Stop()
	hp, stopHA, err := startHAProxy(ctx, scratch, "", nil, nodes)
	if err != nil {
		return nil, err
	}
	defer stopHA()
	// Wait until the director's health checks pass for both services.
	time.Sleep(1500 * time.Millisecond)

	res := &WebResult{Scenario: "web", When: time.Now().UTC(), Duration: cfg.Duration.String(), Connections: cfg.Connections}
	for _, size := range cfg.Sizes {
		path := "/" + fileName(size)
		one, err := wrk(ctx, nil, "http://"+nodes[0]+path, cfg.Connections, cfg.Duration)
		if err != nil {
			return nil, err
		}
		cmp, err := wrkTargets(ctx, nil, nodes, path, size, []target{{"corral l4", cc.VIP}, {"corral l7", cc.L7VIP}, {"haproxy tcp", hp}}, cfg.Connections, cfg.Duration)
		if err != nil {
			return nil, err
		}
		one.Target, one.Size, one.VsDirect = "one node", size, one.ReqPerS/cmp[0].ReqPerS
		bare, err := wrk(ctx, nil, "http://"+ms.Addr+path, cfg.Connections, cfg.Duration)
		if err != nil {
			return nil, err
		}
		bare.Target, bare.Size, bare.VsDirect = "bare Go (memory)", size, bare.ReqPerS/cmp[0].ReqPerS
		rows := append([]WebRow{one, bare}, cmp...)
		for i := range rows {
			rows[i].VsOne = rows[i].ReqPerS / one.ReqPerS
			logf("%-8s %-15s %9.0f req/s %8.1f MB/s p99 %7.2f ms  %.2f of one node, %.2f of 3 direct  errors %d\n",
				humanBytes(size), rows[i].Target, rows[i].ReqPerS, rows[i].MBPerS, rows[i].P99ms, rows[i].VsOne, rows[i].VsDirect, rows[i].Errors)
		}
		res.Rows = append(res.Rows, rows...)
	}

	// Node memory against P*S: P clients at once each fetch an S-byte file
	// from node 1; its peak RSS is sampled from /proc.
	pid := cl.Nodes[0].Pid()
	for _, s := range cfg.MemS {
		for _, p := range cfg.MemP {
			base := rssMB(pid)
			peak, err := memRun(ctx, "http://"+nodes[0]+"/"+fileName(s), p, pid)
			if err != nil {
				return nil, err
			}
			row := MemRow{P: p, S: s, PS: float64(p) * float64(s) / (1 << 20), PeakRSS: peak, BaseRSS: base}
			res.Memory = append(res.Memory, row)
			logf("node memory: P=%-3d S=%-7s P*S=%6.0f MB: peak RSS %.1f MB (idle %.1f MB)\n", p, humanBytes(s), row.PS, peak, base)
		}
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("wrk with %d connections and 2 threads for %v per run; '3 nodes direct' is three wrk at once, one per node with a third of the connections each, summed: the zero-cost balancer", cfg.Connections, cfg.Duration),
		"'bare Go (memory)': one process of net/http serving the same file from memory (http.ServeContent), with the same wrk as 'one node': what the node's own path costs beyond net/http's is 1 - one node / bare Go",
		"everything on one machine (2 CPUs): wrk, the director or haproxy, the nodes and the file system share them, so a balancer's own CPU use shows directly",
		"haproxy: Debian's, mode tcp, balance leastconn, over the same three nodes; corral l4/l7: wlc",
		"node memory: peak VmRSS of node 1 sampled every 20 ms while P clients fetch an S-byte file at once (read-ahead capped at 512 KiB per request)")
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			var kb float64
			fmt.Sscanf(strings.TrimPrefix(l, "VmRSS:"), "%f", &kb)
			return kb / 1024
		}
	}
	return 0
}

// memRun fetches url with p clients at once (each reading slowly enough to
// keep every request open together) and returns the peak RSS of pid.
func memRun(ctx context.Context, url string, p, pid int) (float64, error) {
	var peak float64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, rssMB(pid))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, p)
	start := make(chan struct{})
	for i := 0; i < p; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := cl.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 64<<10)
			for {
				_, err := resp.Body.Read(buf)
				if err != nil {
					if err != io.EOF {
						errs[i] = err
					}
					return
				}
				time.Sleep(time.Millisecond) // a slow client: requests overlap
			}
		}()
	}
	close(start)
	wg.Wait()
	close(done)
	sampler.Wait()
	return peak, errors.Join(errs...)
}

// scratchDir makes the results directory and a scratch directory for a
// scenario; cleanup removes the scratch.
func scratchDir(out, dir, scenario string) (string, func(), error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", nil, err
	}
	s, err := os.MkdirTemp(dir, "corral-bench-"+scenario+"-")
	if err != nil {
		return "", nil, err
	}
	return s, func() { os.RemoveAll(s) }, nil
}

// putSample writes a size-byte file into the sample domain and returns its
// URL path.
func putSample(ctx context.Context, fsc *client.Client, size int64) (string, error) {
	name := "/" + fileName(size)
	f, err := fsc.CreatePath(ctx, "/www/"+launch.SampleDomain+name, 0o644, client.CreateOpts{})
	if err != nil {
		return "", err
	}
	if _, err := f.WriteAt(pattern(int(size)), 0); err != nil {
		f.Close()
		return "", err
	}
	return name, f.Close()
}

func writeJSONMD(dir string, v any, md string) error {
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

// Markdown renders the result as tables.
func (r *WebResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# web, %s\n\nwrk, %d connections, %s per run.\n\n", r.When.Format(time.RFC3339), r.Connections, r.Duration)
	b.WriteString("| file | target | req/s | MB/s | p99 ms | errors | ratio to one node | ratio to 3 direct |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.2f | %d | %.2f | %.2f |\n", humanBytes(x.Size), x.Target, x.ReqPerS, x.MBPerS, x.P99ms, x.Errors, x.VsOne, x.VsDirect)
	}
	b.WriteString("\nNode memory while P clients fetch S-byte files at once:\n\n| P | S | P·S MB | peak RSS MB | idle RSS MB |\n|---|---|---|---|---|\n")
	for _, m := range r.Memory {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.1f | %.1f |\n", m.P, humanBytes(m.S), m.PS, m.PeakRSS, m.BaseRSS)
	}
	b.WriteString("\nPaper 000's nodes: U = 0.001·P·S + 0.9 (memory use grew with P·S).\n\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// sumRows adds up the rows of load generators run side by side: rates and
// errors add, the tail latency is the worst one's.
func sumRows(rows []WebRow) WebRow {
	var sum WebRow
	for _, r := range rows {
		sum.ReqPerS += r.ReqPerS
		sum.MBPerS += r.MBPerS
		sum.P99ms = max(sum.P99ms, r.P99ms)
		sum.Errors += r.Errors
	}
	return sum
}
