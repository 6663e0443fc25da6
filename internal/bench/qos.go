package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/proto"
	"github.com/corral-cluster/corral/internal/testbed"
)

// QoSConfig sizes the QoS scenario (issue 17, docs/qos.md).
type QoSConfig struct {
	Bin, Dir, Out string
	// Net is the loopback /24 (first three octets) the cluster takes.
	Net string
	// Phase is each measurement's length.
	Phase time.Duration
	// Load is the overload's offered rate as a share of the measured
	// capacity (1.2: 120 %); GoldShare the share of gold requests.
	Load, GoldShare float64
	// PerServer is the director's qos-per-server (and the nodes'
	// --qos-workers): small enough that the pool, not this machine's
	// CPUs, is what runs out (default 8 on loopback, where the CPUs run
	// out first anyway; 2 on the test bed).
	PerServer int
	// Testbed runs each role in its own namespace (test bed h8qos on
	// 10.89.0.0/24, root) with the nodes' links shaped to NodeRate, and
	// fetches a FileSize-byte file: then the nodes, not this machine's
	// CPUs, are what runs out, as in a real cluster.
	Testbed  bool
	NodeRate string
	FileSize int
	// Reserve is the director's qos-reserve: slots per server only gold
	// may take (-1: none; 0: the default, 1, or none with PerServer 1).
	Reserve int
	// TopRate, with Testbed, gives the nodes' shaped links two priority
	// bands (testbed.Host.TopRate): packets the nodes mark EF (gold's
	// responses) get TopRate guaranteed and go first ("off": one band,
	// as before; "": half of NodeRate).
	TopRate string
	Log     io.Writer
}

// QoSPhase is one open-loop (or, for capacity, closed-loop) run.
type QoSPhase struct {
	Name       string  `json:"name"`
	OfferedRPS float64 `json:"offered_rps"`
	Gold       Class   `json:"gold"`
	BestEffort Class   `json:"best_effort"`
	// events are every request's outcome, for the plots.
	events []qosEvent
}

// qosEvent is one request: when it was scheduled (s from the phase's
// start), its class, its outcome and its latency (of a 200).
type qosEvent struct {
	at   float64
	gold bool
	code int // 200, 503 (shed), 0 (anything else)
	ms   float64
}

// Class is one class's figures in a phase.
type Class struct {
	Sent int `json:"sent"`
	OK   int `json:"ok"`
	// Shed are 503s with a Retry-After; Errors anything else (connection
	// failures, other statuses, the generator's own cap).
	Shed   int     `json:"shed"`
	Errors int     `json:"errors"`
	P50ms  float64 `json:"p50_ms"` // of the 200s, from the scheduled send time
	P99ms  float64 `json:"p99_ms"`
}

// QoSResult is the scenario's output.
type QoSResult struct {
	Scenario    string     `json:"scenario"`
	Testbed     bool       `json:"testbed"`
	NodeRate    string     `json:"node_rate,omitempty"`
	FileBytes   int        `json:"file_bytes"`
	When        time.Time  `json:"when"`
	Nodes       int        `json:"nodes"`
	Limit       int        `json:"admission_limit"`
	Reserve     int        `json:"reserve"`  // of Limit, the slots only gold may take
	TopRate     string     `json:"top_rate"` // the nodes' links' EF band ("": none)
	CapacityRPS float64    `json:"capacity_rps"`
	Phases      []QoSPhase `json:"phases"`
	Notes       []string   `json:"notes"`
}

// qosClasses are the scenario's classes: gold by a header, everything
// else best-effort (the default class).
const qosClasses = `qos gold {
    priority 10
    header X-Tier: gold
    overload queue deadline=2s retry-after=1
}
qos default { overload queue deadline=50ms retry-after=1 }
`

// RunQoS starts a cluster on loopback (meta, an I/O server, two nodes
// with --qos-workers, the l7 director), measures the capacity through the
// VIP, gold's latency unloaded, then offers Load x capacity (GoldShare
// gold) with and without the classes.
func RunQoS(ctx context.Context, cfg QoSConfig) (*QoSResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if cfg.Net == "" {
		cfg.Net = "127.0.89"
	}
	if cfg.Phase <= 0 {
		cfg.Phase = 10 * time.Second
	}
	if cfg.Load <= 0 {
		cfg.Load = 1.2
	}
	if cfg.GoldShare <= 0 || cfg.GoldShare > 1 {
		cfg.GoldShare = 0.1
	}
	if cfg.PerServer <= 0 {
		cfg.PerServer = 8
		if cfg.Testbed {
			// Near the shaped links' knee: more in flight only shares
			// the link and lengthens every response.
			cfg.PerServer = 2
		}
	}
	qosPerServer := cfg.PerServer
	switch {
	case cfg.Reserve == 0:
		cfg.Reserve = min(1, qosPerServer-1) // (per-server 1: none)
	case cfg.Reserve < 0:
		cfg.Reserve = 0
	}
	if cfg.Reserve >= qosPerServer {
		return nil, fmt.Errorf("reserve %d: want fewer than per-server %d", cfg.Reserve, qosPerServer)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp(cfg.Dir, "corral-bench-qos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	if cfg.NodeRate == "" {
		cfg.NodeRate = "20mbit"
	}
	switch {
	case !cfg.Testbed || cfg.TopRate == "off":
		cfg.TopRate = ""
	case cfg.TopRate == "":
		var v uint64
		var unit string
		if _, err := fmt.Sscanf(cfg.NodeRate, "%d%s", &v, &unit); err != nil || v < 2 {
			return nil, fmt.Errorf("node rate %q: want a whole tc rate like 20mbit to halve for the top band (or give the top rate)", cfg.NodeRate)
		}
		cfg.TopRate = fmt.Sprintf("%d%s", v/2, unit)
	}
	if cfg.FileSize <= 0 {
		cfg.FileSize = 32 << 10
	}
	free := func(host int) (string, error) {
		l, err := net.Listen("tcp", fmt.Sprintf("%s.%d:0", cfg.Net, host))
		if err != nil {
			return "", err
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	vip, err := free(100)
	if err != nil {
		return nil, err
	}
	adminAddr, err := free(1)
	if err != nil {
		return nil, err
	}
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: scratch, MetaListen: cfg.Net + ".10:0",
		IODListens: []string{cfg.Net + ".11:0"}, NodeListen: []string{cfg.Net + ".21:0", cfg.Net + ".22:0"},
		VIP: vip, Admin: adminAddr, Dataplane: "l7", Scheduler: "wlc",
		Check: "http path=/healthz status=200 interval=500ms timeout=400ms rise=1 fall=3",
		Args: func(role string) []string {
			if strings.HasPrefix(role, "node") {
				return []string{"--qos-workers", fmt.Sprint(qosPerServer), "--qos-trust", "127.0.0.0/8"} // the director connects from 127.0.0.1
			}
			return nil
		}}
	path := "/index.html"
	if cfg.Testbed {
		const bedName = "h8qos"
		if err := testbed.CheckRoot(); err != nil {
			return nil, err
		}
		spec := testbed.NewSpecOn(bedName, netip.MustParsePrefix("10.89.0.0/24"), launch.ClusterHosts(2, 1), "")
		for i := range spec.Hosts {
			if strings.HasPrefix(spec.Hosts[i].Name, "node") {
				spec.Hosts[i].Rate = cfg.NodeRate
				spec.Hosts[i].TopRate = cfg.TopRate
			}
		}
		testbed.Down(bedName) // one an interrupted run left
		bed, err := testbed.Up(spec)
		if err != nil {
			return nil, err
		}
		defer testbed.Down(bedName)
		da, err := bed.HostAddr("director")
		if err != nil {
			return nil, err
		}
		cc.Admin = da + ":7500"
		cc.MetaListen = ""
		if err := cc.OnTestbed(bed, 2, 1); err != nil {
			return nil, err
		}
		vip, adminAddr = cc.VIP, cc.Admin
		nodeArgs := cc.Args
		cc.Args = func(role string) []string {
			if strings.HasPrefix(role, "node") {
				return []string{"--qos-workers", fmt.Sprint(qosPerServer), "--qos-trust", "10.89.0.0/24"}
			}
			return nodeArgs(role)
		}
		path = fmt.Sprintf("/qos-%d.bin", cfg.FileSize)
	}
	logf("starting the cluster (testbed %v) ...\n", cfg.Testbed)
	c, err := launch.StartCluster(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if cfg.Testbed {
		if err := putFile(ctx, c, scratch, "/www/"+launch.SampleDomain+path, cfg.FileSize); err != nil {
			return nil, err
		}
	}
	plain, err := os.ReadFile(c.ConfPath)
	if err != nil {
		return nil, err
	}
	withQoS := qosClasses + strings.Replace(string(plain), "    dataplane l7\n", fmt.Sprintf("    dataplane l7\n    qos-per-server %d\n    qos-reserve %d\n", qosPerServer, cfg.Reserve), 1)
	res := &QoSResult{Scenario: "qos", When: time.Now().UTC(), Nodes: 2, Limit: 2 * qosPerServer, Reserve: 2 * cfg.Reserve, TopRate: cfg.TopRate, Testbed: cfg.Testbed, FileBytes: cfg.FileSize}
	if cfg.Testbed {
		res.NodeRate = cfg.NodeRate
	} else {
		res.FileBytes = len(indexHTML)
	}
	if err := setConf(ctx, c.ConfPath, withQoS, adminAddr, vip+path, fmt.Sprintf(`corral_director_qos_limit{service="www"} %d`, res.Limit), true); err != nil {
		return nil, fmt.Errorf("%w; director log: %s", err, launch.Tail(c.Director.Log, 10))
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	url := "http://" + vip + path

	// Capacity: best-effort only, closed loop, 4 x the limit of clients.
	logf("capacity: closed loop, %d clients, %v ...\n", 4*res.Limit, cfg.Phase)
	var ok atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(cfg.Phase)
	for i := 0; i < 4*res.Limit; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 10_000_000 && time.Now().Before(end) && ctx.Err() == nil; n++ {
				if code, _ := fetch(ctx, cl, url, false); code == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	res.CapacityRPS = float64(ok.Load()) / cfg.Phase.Seconds()
	logf("capacity %.0f requests/s\n", res.CapacityRPS)
	if res.CapacityRPS < 10 {
		return nil, fmt.Errorf("capacity %.1f requests/s: too low to measure", res.CapacityRPS)
	}

	run := func(name string, rate, goldShare float64) QoSPhase {
		logf("%s: %.0f requests/s, %.0f %% gold, %v ...\n", name, rate, goldShare*100, cfg.Phase)
		p := openLoop(ctx, cl, url, rate, goldShare, cfg.Phase)
		p.Name = name
		logf("  gold %d ok %d shed %d err, p99 %.1f ms; best-effort %d ok %d shed %d err\n", p.Gold.OK, p.Gold.Shed, p.Gold.Errors, p.Gold.P99ms,
			p.BestEffort.OK, p.BestEffort.Shed, p.BestEffort.Errors)
		return p
	}
	res.Phases = append(res.Phases, run("gold alone (unloaded)", cfg.GoldShare*res.CapacityRPS, 1))
	res.Phases = append(res.Phases, run(fmt.Sprintf("%.0f %% of capacity, classes", cfg.Load*100), cfg.Load*res.CapacityRPS, cfg.GoldShare))
	// The same without classes: what gold gets from a plain l7 director.
	if err := setConf(ctx, c.ConfPath, string(plain), adminAddr, vip+path, "", false); err != nil {
		return nil, err
	}
	res.Phases = append(res.Phases, run(fmt.Sprintf("%.0f %% of capacity, no classes", cfg.Load*100), cfg.Load*res.CapacityRPS, cfg.GoldShare))
	if cfg.Testbed {
		res.Notes = append(res.Notes, fmt.Sprintf("test bed: each role in its own namespace, the nodes' links shaped to %s both ways, a %d-byte file: the nodes' links are the bottleneck", cfg.NodeRate, cfg.FileSize))
		if cfg.TopRate != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("priority on the wire: the nodes mark gold's responses DSCP EF; each node link is an htb of %s with an EF band guaranteed %s at prio 0 and the rest at prio 1, each borrowing up to %s (in every phase, the unloaded one too)", cfg.NodeRate, cfg.TopRate, cfg.NodeRate))
		} else {
			res.Notes = append(res.Notes, "no priority on the wire: one htb band per node link (--top-rate off)")
		}
	} else {
		res.Notes = append(res.Notes, "loopback: everything (generator, director, nodes, file system) shares this machine's CPUs: capacity is the whole setup's, and the CPUs, not the pool, run out first")
	}
	res.Notes = append(res.Notes,
		"latency is from each request's scheduled send time (open loop: no coordinated omission); the generator caps its outstanding requests at 4096 (counted as errors)",
		fmt.Sprintf("classes: gold (header X-Tier: gold, queue deadline 2s); best-effort = default (queue deadline 50ms, then 503 Retry-After 1); admission limit %d (qos-per-server %d x 2 nodes), of which %d only gold may take (qos-reserve %d); nodes --qos-workers %d", res.Limit, qosPerServer, res.Reserve, cfg.Reserve, qosPerServer))
	if err := res.plots(cfg.Out); err != nil {
		return nil, err
	}
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return nil, err
	}
	return res, nil
}

// setConf writes a director.conf and waits until the director runs it:
// with classes, until /metrics shows want; without, until no qos limit
// is shown.
func setConf(ctx context.Context, path, conf, admin, url, want string, classes bool) error {
	if err := os.WriteFile(path+".tmp", []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	cl := &http.Client{Timeout: 2 * time.Second}
	var last error
	for i := 0; i < 300 && ctx.Err() == nil; i++ {
		fetch(ctx, cl, "http://"+url, false) // the qos state is built on a request
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+admin+"/metrics", nil)
		if tok, err := director.LoadToken(director.DefaultTokenFile(path)); err == nil {
			req.Header.Set("Authorization", "Bearer "+tok) // off loopback every call needs it
		}
		resp, err := cl.Do(req)
		last = err
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := string(b)
			if classes && strings.Contains(m, want) || !classes && !strings.Contains(m, "corral_director_qos_limit{") {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the director did not load %s in 30s (metrics: %v)", path, last)
}

// fetch GETs url (gold: with the gold header): its status, whether a 503
// had a Retry-After.
func fetch(ctx context.Context, cl *http.Client, url string, gold bool) (int, bool) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, false
	}
	if gold {
		req.Header.Set("X-Tier", "gold")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After") != ""
}

// openLoop sends requests at rate for d whatever the answers (each
// request goes out at its scheduled time on its own goroutine), every
// 1/goldShare-th one gold.
func openLoop(ctx context.Context, cl *http.Client, url string, rate, goldShare float64, d time.Duration) QoSPhase {
	const maxOutstanding = 4096
	p := QoSPhase{OfferedRPS: rate}
	var mu sync.Mutex
	var goldLat, beLat []float64
	p.events = make([]qosEvent, 0, int(rate*d.Seconds())+1)
	var outstanding atomic.Int64
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := int(rate * d.Seconds())
	every := max(1, int(1/goldShare+0.5))
	for i := 0; i < n && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		gold := i%every == 0
		cls := &p.BestEffort
		if gold {
			cls = &p.Gold
		}
		mu.Lock()
		cls.Sent++
		mu.Unlock()
		if outstanding.Load() >= maxOutstanding {
			mu.Lock()
			cls.Errors++
			p.events = append(p.events, qosEvent{at: at.Sub(start).Seconds(), gold: gold})
			mu.Unlock()
			continue
		}
		outstanding.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer outstanding.Add(-1)
			code, ra := fetch(ctx, cl, url, gold)
			ms := float64(time.Since(at).Microseconds()) / 1000
			mu.Lock()
			defer mu.Unlock()
			ev := qosEvent{at: at.Sub(start).Seconds(), gold: gold, ms: ms}
			if code == 200 || code == 503 && ra {
				ev.code = code
			}
			p.events = append(p.events, ev)
			switch {
			case code == 200:
				cls.OK++
				if gold {
					goldLat = append(goldLat, ms)
				} else {
					beLat = append(beLat, ms)
				}
			case code == 503 && ra:
				cls.Shed++
			default:
				cls.Errors++
			}
		}()
	}
	wg.Wait()
	for _, x := range []struct {
		lat []float64
		c   *Class
	}{{goldLat, &p.Gold}, {beLat, &p.BestEffort}} {
		slices.Sort(x.lat)
		x.c.P50ms, x.c.P99ms = quantile(x.lat, 0.5), quantile(x.lat, 0.99)
	}
	return p
}

// Markdown renders the result.
func (r *QoSResult) Markdown() string {
	var b strings.Builder
	where := "loopback"
	if r.Testbed {
		where = "test bed, node links " + r.NodeRate
	}
	if r.TopRate != "" {
		where += ", EF band " + r.TopRate
	}
	fmt.Fprintf(&b, "# qos, %s\n\n%s, %d nodes, a %d-byte file, admission limit %d (%d reserved for gold), capacity %.0f requests/s (closed loop, best-effort only).\n\n",
		r.When.Format(time.RFC3339), where, r.Nodes, r.FileBytes, r.Limit, r.Reserve, r.CapacityRPS)
	b.WriteString("| phase | offered req/s | gold ok | gold shed | gold err | gold p50 ms | gold p99 ms | best-effort ok | best-effort shed | shed % | best-effort err | best-effort p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Phases {
		shedPct := 0.0
		if p.BestEffort.Sent > 0 {
			shedPct = 100 * float64(p.BestEffort.Shed) / float64(p.BestEffort.Sent)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %d | %d | %d | %.1f | %.1f | %d | %d | %.1f | %d | %.1f |\n", p.Name, p.OfferedRPS,
			p.Gold.OK, p.Gold.Shed, p.Gold.Errors, p.Gold.P50ms, p.Gold.P99ms,
			p.BestEffort.OK, p.BestEffort.Shed, shedPct, p.BestEffort.Errors, p.BestEffort.P99ms)
	}
	if len(r.Phases) >= 2 && r.Phases[0].Gold.P99ms > 0 {
		fmt.Fprintf(&b, "\ngold p99 at %s: %.2f x unloaded.\n", r.Phases[1].Name, r.Phases[1].Gold.P99ms/r.Phases[0].Gold.P99ms)
	}
	if len(r.Phases) >= 3 {
		b.WriteString("\nPlots (by each request's scheduled send time, 0.5 s bins): [latency with classes](qos-latency-classes.svg), [latency without](qos-latency-noclasses.svg), [admitted and shed with classes](qos-rate-classes.svg), [without](qos-rate-noclasses.svg).\n")
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// indexHTML stands for the sample site's page in the loopback runs' figures.
var indexHTML = make([]byte, 438)

// putFile writes a size-byte file into the cluster's file system at dst,
// with the corral binary as a user would.
func putFile(ctx context.Context, c *launch.Cluster, scratch, dst string, size int) error {
	src := filepath.Join(scratch, filepath.Base(dst))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	if err := os.WriteFile(src, b, 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, c.Bin, "fs", "--meta", c.MetaAddr(), "put", src, dst)
	cmd.Env = append(os.Environ(), proto.SecretEnv+"="+c.SecretFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("corral fs put %s: %v: %s", dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// plotBin is the plots' time bin.
const plotBin = 0.5

// plots writes, for the overload phases with and without classes, each
// class's p50 and p99 latency and its admitted and shed rates over time.
func (r *QoSResult) plots(out string) error {
	if len(r.Phases) < 3 {
		return nil
	}
	for _, x := range []struct {
		p    *QoSPhase
		name string
	}{{&r.Phases[1], "classes"}, {&r.Phases[2], "noclasses"}} {
		lat, rate := qosSeries(x.p.events)
		title := fmt.Sprintf("%s: %.0f req/s offered", x.p.Name, x.p.OfferedRPS)
		if err := LineChart(filepath.Join(out, "qos-latency-"+x.name+".svg"), "latency, "+title, "scheduled send time (s)", "ms", lat); err != nil {
			return err
		}
		if err := LineChart(filepath.Join(out, "qos-rate-"+x.name+".svg"), "admitted (200) and shed (503), "+title, "scheduled send time (s)", "requests/s", rate); err != nil {
			return err
		}
	}
	return nil
}

// qosSeries bins events by scheduled send time: the latency series (p50,
// p99 of the 200s per class) and the rate series (200s and 503s per
// class; gold's 503s only if there are any).
func qosSeries(evs []qosEvent) (lat, rate []Series) {
	n := 0
	for _, e := range evs {
		n = max(n, int(e.at/plotBin)+1)
	}
	type bin struct {
		ms       [2][]float64
		ok, shed [2]int
	}
	bins := make([]bin, n)
	for _, e := range evs {
		c := 1
		if e.gold {
			c = 0
		}
		b := &bins[int(e.at/plotBin)]
		switch e.code {
		case 200:
			b.ok[c]++
			b.ms[c] = append(b.ms[c], e.ms)
		case 503:
			b.shed[c]++
		}
	}
	names := [2]string{"gold", "best-effort"}
	goldShed := false
	for _, b := range bins {
		goldShed = goldShed || b.shed[0] > 0
	}
	for c := 0; c < 2; c++ {
		p50 := Series{Name: names[c] + " p50", Dashed: true}
		p99 := Series{Name: names[c] + " p99"}
		ok := Series{Name: names[c] + " 200"}
		shed := Series{Name: names[c] + " 503", Dashed: true}
		for i, b := range bins {
			x := float64(i)*plotBin + plotBin/2
			if len(b.ms[c]) > 0 {
				slices.Sort(b.ms[c])
				p50.X, p50.Y = append(p50.X, x), append(p50.Y, quantile(b.ms[c], 0.5))
				p99.X, p99.Y = append(p99.X, x), append(p99.Y, quantile(b.ms[c], 0.99))
			}
			ok.X, ok.Y = append(ok.X, x), append(ok.Y, float64(b.ok[c])/plotBin)
			shed.X, shed.Y = append(shed.X, x), append(shed.Y, float64(b.shed[c])/plotBin)
		}
		lat = append(lat, p99, p50)
		rate = append(rate, ok)
		if c == 1 || goldShed {
			rate = append(rate, shed)
		}
	}
	return lat, rate
}
