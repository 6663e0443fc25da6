package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/obs"
)

// A profiled daemon: its name and the base URL of its metrics listener
// (which serves the profile endpoints when obs.ProfileEnv is set).
type profTarget struct {
	Name, Base string
}

var (
	httpLogRe  = regexp.MustCompile(`msg="metrics and health".* http=(\S+)`)
	adminLogRe = regexp.MustCompile(`msg="admin endpoints[^"]*".* admin=(\S+)`)
)

// logAddr finds the address a daemon logged its metrics (or, for a node,
// admin) listener on; "" when it did not.
func logAddr(path string, re *regexp.Regexp) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if m := re.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// profTargetsOf lists the daemons of procs whose metrics listener is found.
func profTargetsOf(procs []*launch.Proc, re *regexp.Regexp) []profTarget {
	var ts []profTarget
	for _, p := range procs {
		// The line comes right after the daemon starts serving: wait a
		// little for it rather than lose the daemon.
		for end := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if a := logAddr(p.Log, re); a != "" {
				ts = append(ts, profTarget{Name: p.Name, Base: "http://" + a})
				break
			}
			if time.Now().After(end) {
				break
			}
		}
	}
	return ts
}

// targets are the cluster's metadata members and I/O servers.
func (c *metaCluster) profTargets() []profTarget {
	members, iods := c.members, c.iods
	if c.fs != nil {
		members, iods = c.fs.Metas, c.fs.IODs
	}
	return profTargetsOf(append(append([]*launch.Proc{}, members...), iods...), httpLogRe)
}

// profiler starts and stops CPU and block profiles of daemons and writes
// them under dir as LABEL-NAME.cpu.pprof and LABEL-NAME.block.pprof.
type profiler struct {
	dir     string
	targets []profTarget
	hc      *http.Client
	notes   []string
}

func newProfiler(dir string, targets []profTarget) *profiler {
	return &profiler{dir: dir, targets: targets, hc: &http.Client{Timeout: 30 * time.Second}}
}

func (p *profiler) call(ctx context.Context, method, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// start begins a profile in every daemon; one that cannot is noted.
func (p *profiler) start(ctx context.Context) {
	for _, t := range p.targets {
		if _, err := p.call(ctx, http.MethodPost, t.Base+"/debug/profile/start"); err != nil {
			p.notes = append(p.notes, fmt.Sprintf("profile of %s not started: %v", t.Name, err))
		}
	}
}

// stop ends the profiles and writes them, named by label.
func (p *profiler) stop(ctx context.Context, label string) {
	for _, t := range p.targets {
		cpu, err := p.call(ctx, http.MethodPost, t.Base+"/debug/profile/stop")
		if err == nil {
			err = os.WriteFile(filepath.Join(p.dir, label+"-"+t.Name+".cpu.pprof"), cpu, 0o644)
		}
		if err == nil {
			var block []byte
			if block, err = p.call(ctx, http.MethodGet, t.Base+"/debug/profile/block"); err == nil {
				err = os.WriteFile(filepath.Join(p.dir, label+"-"+t.Name+".block.pprof"), block, 0o644)
			}
		}
		if err != nil {
			p.notes = append(p.notes, fmt.Sprintf("profile %s of %s: %v", label, t.Name, err))
		}
	}
}

// scrape reads every daemon's /metrics: name{labels} -> value, summed over
// daemons of the same kind (meta, iod, node: the name up to its digits).
func (p *profiler) scrape(ctx context.Context) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, t := range p.targets {
		b, err := p.call(ctx, http.MethodGet, t.Base+"/metrics")
		if err != nil {
			p.notes = append(p.notes, fmt.Sprintf("scrape of %s: %v", t.Name, err))
			continue
		}
		kind := strings.TrimRight(t.Name, "0123456789")
		m := out[kind]
		if m == nil {
			m = map[string]float64{}
			out[kind] = m
		}
		for k, v := range parseProm(b) {
			m[k] += v
		}
	}
	return out
}

// parseProm reads Prometheus text exposition: each sample's name with its
// labels as written, and its value.
func parseProm(b []byte) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		m[l[:i]] = v
	}
	return m
}

// sumPrefix adds the samples whose key starts with name (and, when given,
// contains every one of labels).
func sumPrefix(m map[string]float64, name string, labels ...string) float64 {
	s := 0.0
next:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		s += v
	}
	return s
}

// Breakdown is where one phase's time and work went, per operation: from
// the daemons' metrics before and after the phase, divided by the
// operations the workers did.
type Breakdown struct {
	Target string `json:"target"`
	Layout string `json:"layout"`
	Phase  string `json:"phase"`
	Ops    int    `json:"ops"`
	// ClientUs is the mean time a worker's call took, in µs: processes x
	// calls in flight / rate.
	ClientUs float64 `json:"client_us"`
	// MetaReqs is metadata requests answered per operation (all members),
	// MetaUs the mean time a member took to answer one.
	MetaReqs float64 `json:"meta_reqs_per_op"`
	MetaUs   float64 `json:"meta_us_per_req"`
	// MetaByOp is metadata requests per operation by request type (those
	// at 0.05 or more), and IODByOp the same for the I/O servers.
	MetaByOp map[string]float64 `json:"meta_by_op,omitempty"`
	IODByOp  map[string]float64 `json:"iod_by_op,omitempty"`
	// The replicated log: queue wait, propose -> commit and apply times
	// (means, µs), WAL fsyncs and store commits per operation (all members).
	QueueUs      float64 `json:"propose_wait_us"`
	CommitUs     float64 `json:"propose_commit_us"`
	ApplyUs      float64 `json:"apply_us"`
	WALFsyncs    float64 `json:"wal_fsyncs_per_op"`
	WALFsyncUs   float64 `json:"wal_fsync_us"`
	StoreCommits float64 `json:"store_commits_per_op"`
	WALBytes     float64 `json:"wal_bytes_per_op"`
	// I/O servers: requests and their mean time, object fsyncs and bytes
	// in and out, per operation (both servers).
	IODReqs    float64 `json:"iod_reqs_per_op"`
	IODUs      float64 `json:"iod_us_per_req"`
	IODFsyncs  float64 `json:"iod_fsyncs_per_op"`
	IODFsyncUs float64 `json:"iod_fsync_us"`
	IODBytes   float64 `json:"iod_bytes_per_op"`
	// CPU time per operation, µs, of all metadata members and of both I/O
	// servers.
	MetaCPUUs float64 `json:"meta_cpu_us_per_op"`
	IODCPUUs  float64 `json:"iod_cpu_us_per_op"`
}

// breakdown computes a phase's Breakdown from scrapes before and after.
func breakdown(before, after map[string]map[string]float64, ops int, rate float64, inFlight int) Breakdown {
	d := func(kind, name string, labels ...string) float64 {
		return sumPrefix(after[kind], name, labels...) - sumPrefix(before[kind], name, labels...)
	}
	per := func(x float64) float64 { return x / float64(max(ops, 1)) }
	mean := func(kind, hist string) float64 {
		n := d(kind, hist+"_count")
		if n <= 0 {
			return 0
		}
		return d(kind, hist+"_sum") / n * 1e6
	}
	b := Breakdown{Ops: ops}
	if rate > 0 {
		b.ClientUs = float64(inFlight) / rate * 1e6
	}
	b.MetaReqs = per(d("meta", "corral_meta_operations_total"))
	b.MetaByOp = byOp(before["meta"], after["meta"], "corral_meta_operations_total", ops)
	b.IODByOp = byOp(before["iod"], after["iod"], "corral_iod_requests_total", ops)
	b.MetaUs = mean("meta", "corral_meta_operation_duration_seconds")
	b.QueueUs = mean("meta", "corral_replog_propose_wait_seconds")
	b.CommitUs = mean("meta", "corral_replog_commit_seconds")
	b.ApplyUs = mean("meta", "corral_replog_apply_seconds")
	b.WALFsyncs = per(d("meta", "corral_replog_wal_fsync_seconds_count"))
	b.WALFsyncUs = mean("meta", "corral_replog_wal_fsync_seconds")
	b.StoreCommits = per(d("meta", "corral_replog_apply_seconds_count"))
	b.WALBytes = per(d("meta", "corral_replog_wal_bytes_total"))
	b.IODReqs = per(d("iod", "corral_iod_requests_total"))
	b.IODUs = mean("iod", "corral_iod_request_duration_seconds")
	b.IODFsyncs = per(d("iod", "corral_iod_object_fsync_seconds_count"))
	b.IODFsyncUs = mean("iod", "corral_iod_object_fsync_seconds")
	b.IODBytes = per(d("iod", "corral_iod_bytes_total"))
	b.MetaCPUUs = per(d("meta", "process_cpu_seconds_total")) * 1e6
	b.IODCPUUs = per(d("iod", "process_cpu_seconds_total")) * 1e6
	return b
}

var opLabelRe = regexp.MustCompile(`op="([^"]*)"`)

// byOp is counter name's increase per operation by its op label, for the
// request types at 0.05 per operation or more.
func byOp(before, after map[string]float64, name string, ops int) map[string]float64 {
	m := map[string]float64{}
	for k, v := range after {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		if op := opLabelRe.FindStringSubmatch(k); op != nil {
			m[op[1]] += (v - before[k]) / float64(max(ops, 1))
		}
	}
	for k, v := range m {
		if v < 0.05 {
			delete(m, k)
		}
	}
	return m
}

// fmtByOp renders a byOp map, largest first: "create 1.00, getattr 2.00".
func fmtByOp(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%s %.2f", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}

// breakdownMarkdown renders the breakdowns as one table.
func breakdownMarkdown(bs []Breakdown) string {
	if len(bs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nWhere the time goes, per operation (--profile; metrics of every member and I/O server scraped before and after each phase; times are means in µs; CPU profiles in profiles/):\n\n")
	b.WriteString("| target | layout | phase | client µs | meta req/op | meta µs/req | queue µs | propose→commit µs | apply µs | WAL fsync/op | WAL fsync µs | store commit/op | WAL B/op | iod req/op | iod µs/req | iod fsync/op | iod fsync µs | iod B/op | meta CPU µs/op | iod CPU µs/op |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range bs {
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f | %.3f | %.0f | %.3f | %.0f | %.2f | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f |\n",
			x.Target, x.Layout, x.Phase, x.ClientUs, x.MetaReqs, x.MetaUs, x.QueueUs, x.CommitUs, x.ApplyUs, x.WALFsyncs, x.WALFsyncUs,
			x.StoreCommits, x.WALBytes, x.IODReqs, x.IODUs, x.IODFsyncs, x.IODFsyncUs, x.IODBytes, x.MetaCPUUs, x.IODCPUUs)
	}
	b.WriteString("\nRequests per operation by type (all metadata members; both I/O servers):\n\n| target | layout | phase | meta | iod |\n|---|---|---|---|---|\n")
	for _, x := range bs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.Target, x.Layout, x.Phase, fmtByOp(x.MetaByOp), fmtByOp(x.IODByOp))
	}
	return b.String()
}

// profileEnv turns the daemons' profile endpoints on: launch passes this
// process's environment to every daemon it starts.
func profileEnv() { os.Setenv(obs.ProfileEnv, "1") }
