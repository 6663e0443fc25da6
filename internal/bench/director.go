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
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/corral-cluster/corral/internal/dataplane/xdp"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/testbed"
)

// DirectorConfig sizes the director scenario.
type DirectorConfig struct {
	Bin, Dir, Out string
	// Runs is how many frames each per-packet figure averages over.
	Runs        int
	Duration    time.Duration // per wrk run
	Connections int
	Sizes       []int64
	Log         io.Writer
}

// PacketRow is one kind of frame through the kernel's test run.
type PacketRow struct {
	Packet  string  `json:"packet"`
	Action  string  `json:"action"`
	Ns      float64 `json:"ns_per_packet"`
	FloorNs float64 `json:"floor_ns_per_packet"`
	Ratio   float64 `json:"ratio_to_floor"`
	How     string  `json:"how"`
}

// DirectorResult is the scenario's output.
type DirectorResult struct {
	Scenario    string      `json:"scenario"`
	When        time.Time   `json:"when"`
	Duration    string      `json:"duration"`
	Connections int         `json:"connections"`
	Packets     []PacketRow `json:"packets"`
	Rows        []WebRow    `json:"rows"` // VsDirect: ratio to the nodes hit directly
	Notes       []string    `json:"notes"`
}

var xdpActions = map[uint32]string{1: "XDP_DROP", 2: "XDP_PASS", 3: "XDP_TX"}

// RunDirector runs both parts of the director scenario.
func RunDirector(ctx context.Context, cfg DirectorConfig) (*DirectorResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if err := testbed.CheckRoot(); err != nil {
		return nil, err
	}
	for _, tool := range []string{"wrk", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not installed (scripts/deps installs it)", tool)
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	res := &DirectorResult{Scenario: "director", When: time.Now().UTC(), Duration: cfg.Duration.String(), Connections: cfg.Connections}
	var err error
	if res.Packets, err = packetCosts(cfg.Runs, logf); err != nil {
		return nil, err
	}
	if res.Rows, err = directorWeb(ctx, cfg, logf); err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("per packet: the kernel's BPF test run (BPF_PROG_TEST_RUN). Established and pass-through frames repeat one frame %d times in the kernel; a SYN must be a new flow each time, so SYNs are %d single runs of distinct frames, and their floor is the floor program run the same way (a single run includes the kernel's timer reads)", cfg.Runs*20, cfg.Runs),
		"the floor is a program that only swaps the MACs and returns XDP_TX (bpf/floor.c)",
		fmt.Sprintf("HTTP: test bed, links unshaped, wrk on its own client host with %d connections and 2 threads for %v per run; 'direct' is one wrk per node at once with a third of the connections each, summed: the zero-cost balancer", cfg.Connections, cfg.Duration),
		"xdp-dr: the director's XDP program in native mode on its veth, wlc; replies go from the nodes straight to the client",
		"corral l4 (wlc) and haproxy (mode tcp, leastconn) run on a host of their own without XDP, so the XDP program on the director's link does not touch their traffic",
		"the client's transmit checksum offload is off for every target (XDP forwarding needs it; see docs/director-xdp.md); everything shares this machine's CPUs")
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

// packetCosts measures ns per packet of the balancer and the floor.
func packetCosts(runs int, logf func(string, ...any)) ([]PacketRow, error) {
	dp, err := xdp.Load(xdp.Options{ConnTableSize: max(4*runs, 65536)}, nil)
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	if err := dp.SetMAC(xdp.DirectorMAC); err != nil {
		return nil, err
	}
	floor, err := xdp.LoadFloor()
	if err != nil {
		return nil, err
	}
	defer floor.Close()
	client := netip.MustParseAddr("10.0.0.1")
	var reals []xdp.Real
	for i := range 8 {
		reals = append(reals, xdp.Real{Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), Weight: 1 + i%3,
			MAC: net.HardwareAddr{2, 0, 0, 0, 1, byte(i + 1)}})
	}
	repeat := runs * 20
	batch := func(p *ebpf.Program, frame []byte) (float64, uint32, error) {
		ret, per, err := p.Benchmark(frame, repeat, nil)
		return float64(per.Nanoseconds()), ret, err
	}
	single := func(p *ebpf.Program, frame func(i int) []byte) (float64, uint32, error) {
		var total time.Duration
		var ret uint32
		for i := range runs {
			r, per, err := p.Benchmark(frame(i), 1, nil)
			if err != nil {
				return 0, 0, err
			}
			total += per
			ret = r
		}
		return float64(total.Nanoseconds()) / float64(runs), ret, nil
	}
	synFrom := func(vip netip.AddrPort) func(i int) []byte {
		return func(i int) []byte {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)}), uint16(1024+i%60000))
			return xdp.Frame{Src: src, Dst: vip, Flags: xdp.SYN}.Bytes()
		}
	}
	floorSingle, _, err := single(floor, synFrom(netip.MustParseAddrPort("10.0.0.100:80")))
	if err != nil {
		return nil, err
	}
	floorBatch, _, err := batch(floor, xdp.Frame{Src: netip.AddrPortFrom(client, 1000), Dst: netip.MustParseAddrPort("10.0.0.100:80"), Flags: xdp.ACK, Payload: 100}.Bytes())
	if err != nil {
		return nil, err
	}
	var rows []PacketRow
	add := func(name, how string, ns, fl float64, ret uint32) {
		r := PacketRow{Packet: name, Action: xdpActions[ret], Ns: ns, FloorNs: fl, Ratio: ns / fl, How: how}
		rows = append(rows, r)
		logf("%-28s %-8s %7.1f ns/packet  floor %6.1f  ratio %.2f\n", name, r.Action, ns, fl, r.Ratio)
	}
	for i, sch := range []string{"wlc", "rr", "mh"} {
		vip := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.100"), uint16(80+i))
		if err := dp.SetService(xdp.Service{VIP: vip, Protocol: "tcp", Scheduler: sch, Servers: reals}); err != nil {
			return nil, err
		}
		ns, ret, err := single(dp.Program(), synFrom(vip))
		if err != nil {
			return nil, err
		}
		add("SYN, new flow ("+sch+", 8 servers)", "single runs", ns, floorSingle, ret)
	}
	vip := netip.MustParseAddrPort("10.0.0.100:80")
	est := xdp.Frame{Src: netip.AddrPortFrom(client, 1000), Dst: vip, Flags: xdp.SYN}
	if _, ret, err := batch(dp.Program(), est.Bytes()); err != nil || ret != 3 {
		return nil, fmt.Errorf("opening the established flow: action %d, %v", ret, err)
	}
	est.Flags, est.Payload = xdp.ACK, 100
	ns, ret, err := batch(dp.Program(), est.Bytes())
	if err != nil {
		return nil, err
	}
	add("established flow", "repeated", ns, floorBatch, ret)
	other := xdp.Frame{Src: netip.AddrPortFrom(client, 1000), Dst: netip.MustParseAddrPort("10.0.0.7:22"), Flags: xdp.ACK, Payload: 100}
	ns, ret, err = batch(dp.Program(), other.Bytes())
	if err != nil {
		return nil, err
	}
	add("pass-through (not a VIP)", "repeated", ns, floorBatch, ret)
	return rows, nil
}

// directorWeb compares, over HTTP on a test bed, XDP direct routing with the
// nodes hit directly, Corral's l4 proxy and HAProxy.
func directorWeb(ctx context.Context, cfg DirectorConfig, logf func(string, ...any)) ([]WebRow, error) {
	const name = "cbdir"
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "director")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	hosts := append([]string{"client", "proxy"}, launch.ClusterHosts(3, 3)...)
	testbed.Down(name)
	bed, err := testbed.Up(testbed.NewSpec(name, hosts, ""))
	if err != nil {
		return nil, err
	}
	defer testbed.Down(name)
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: scratch, Admin: "127.0.0.1:7500", Dataplane: "xdp", Scheduler: "wlc"}
	if err := cc.OnTestbed(bed, 3, 3); err != nil {
		return nil, err
	}
	if err := bed.PrepareDR(xdp.AttachPass, "director", "client"); err != nil {
		return nil, err
	}
	cl, err := launch.StartCluster(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	fsc := client.New(cl.Meta.Addr)
	defer fsc.Close()
	for _, size := range cfg.Sizes {
		if _, err := putSample(ctx, fsc, size); err != nil {
			return nil, err
		}
	}
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Addr)
	}
	proxy, err := bed.HostAddr("proxy")
	if err != nil {
		return nil, err
	}
	l4, stopL4, err := startL4Director(ctx, bed, cfg.Bin, scratch, proxy+":8081", nodes)
	if err != nil {
		return nil, err
	}
	defer stopL4()
	hp, stopHA, err := startHAProxy(ctx, scratch, proxy+":8082", bed.Wrap("proxy"), nodes)
	if err != nil {
		return nil, err
	}
	defer stopHA()
	// Wait for the VIP from the client host: the director learns the nodes'
	// MACs on the first flows, and the l4 director's health checks pass.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: bed.DialContext("client"), DisableKeepAlives: true}}
	for _, u := range []string{cc.VIP, l4} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := hc.Get("http://" + u + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s never answered from the client host: %v", u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wrap := bed.Wrap("client")
	var out []WebRow
	for _, size := range cfg.Sizes {
		path := "/" + fileName(size)
		rows, err := wrkTargets(ctx, wrap, nodes, path, size, []target{{"corral xdp-dr", cc.VIP}, {"corral l4", l4}, {"haproxy tcp", hp}}, cfg.Connections, cfg.Duration)
		if err != nil {
			return nil, err
		}
		for i := range rows {
			logf("%-8s %-17s %9.0f req/s %8.1f MB/s p99 %7.2f ms  %.2f of direct  errors %d\n",
				humanBytes(size), rows[i].Target, rows[i].ReqPerS, rows[i].MBPerS, rows[i].P99ms, rows[i].VsDirect, rows[i].Errors)
		}
		out = append(out, rows...)
	}
	return out, nil
}

// startL4Director runs a second Corral director with one l4 service on a
// host of its own.
func startL4Director(ctx context.Context, bed *testbed.Bed, bin, dir, vip string, nodes []string) (string, func(), error) {
	var b strings.Builder
	fmt.Fprintf(&b, "admin 127.0.0.1:7501\n\nservice www-l4 {\n    vip %s\n    dataplane l4\n    scheduler wlc\n    check tcp interval=1s timeout=500ms rise=1 fall=2\n", vip)
	for _, n := range nodes {
		fmt.Fprintf(&b, "    server %s\n", n)
	}
	b.WriteString("}\n")
	conf := filepath.Join(dir, "director-l4.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return "", nil, err
	}
	w := bed.Wrap("proxy")
	args := append(append(append([]string{}, w[1:]...), bin), "director", "--config", conf)
	p, err := launch.Start(ctx, "director-l4", w[0], filepath.Join(dir, "director-l4.log"), args...)
	if err != nil {
		return "", nil, err
	}
	return vip, func() { p.Stop() }, nil
}

// Markdown renders the result as tables.
func (r *DirectorResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# director, %s\n\n## Per packet (kernel test run)\n\n", r.When.Format(time.RFC3339))
	b.WriteString("| frame | action | ns/packet | floor ns/packet | ratio to floor | how |\n|---|---|---|---|---|---|\n")
	for _, p := range r.Packets {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.2f | %s |\n", p.Packet, p.Action, p.Ns, p.FloorNs, p.Ratio, p.How)
	}
	fmt.Fprintf(&b, "\n## HTTP through the test bed\n\nwrk, %d connections, %s per run.\n\n", r.Connections, r.Duration)
	b.WriteString("| file | target | req/s | MB/s | p99 ms | errors | ratio to direct |\n|---|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.2f | %d | %.2f |\n", humanBytes(x.Size), x.Target, x.ReqPerS, x.MBPerS, x.P99ms, x.Errors, x.VsDirect)
	}
	b.WriteString("\n")
	for _, x := range r.Rows {
		if x.Target != "corral xdp-dr" {
			continue
		}
		for _, h := range r.Rows {
			if h.Target == "haproxy tcp" && h.Size == x.Size && h.ReqPerS > 0 {
				fmt.Fprintf(&b, "- %s: XDP-DR does %.2f× HAProxy's requests/s.\n", humanBytes(x.Size), x.ReqPerS/h.ReqPerS)
			}
		}
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}
