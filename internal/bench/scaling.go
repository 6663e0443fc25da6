package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// ScalingConfig sizes paper 001's scaling test.
type ScalingConfig struct {
	Bin, Dir, Out string
	Nodes         []int // node counts to measure, ascending
	Rate          string
	FileSize      int64
	Duration      time.Duration
	Connections   int
	Log           io.Writer
}

// ScalingRow is one node count.
type ScalingRow struct {
	Nodes    int     `json:"nodes"`
	ReqPerS  float64 `json:"requests_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	P99ms    float64 `json:"p99_ms"`
	Speedup  float64 `json:"speedup_vs_first"`
	ToLinear float64 `json:"ratio_to_linear"`
}

// ScalingResult is the scenario's output.
type ScalingResult struct {
	Scenario string       `json:"scenario"`
	When     time.Time    `json:"when"`
	Rate     string       `json:"rate"`
	FileSize int64        `json:"file_size"`
	Rows     []ScalingRow `json:"rows"`
	Notes    []string     `json:"notes"`
}

// RunScaling measures requests/s through the director as nodes are added,
// each node on a shaped link (paper 001: 4.65x from 2 to 10 nodes, 0.93 of
// linear).
func RunScaling(ctx context.Context, cfg ScalingConfig) (*ScalingResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, fmt.Errorf("wrk not installed (scripts/deps installs it)")
	}
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "scaling")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	maxN := cfg.Nodes[len(cfg.Nodes)-1]
	// Only the nodes' links are shaped.
	cl, fsc, stop, err := bedCluster(ctx, "scaling", cfg.Bin, scratch, maxN, func(h string) string {
		if strings.HasPrefix(h, "node") {
			return cfg.Rate
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	cc := cl.Cfg
	urlPath, err := putSample(ctx, fsc, cfg.FileSize)
	if err != nil {
		return nil, err
	}
	res := &ScalingResult{Scenario: "scaling", When: time.Now().UTC(), Rate: cfg.Rate, FileSize: cfg.FileSize}
	for _, n := range cfg.Nodes {
		w := make([]int, maxN)
		for i := 0; i < n; i++ {
			w[i] = 1
		}
		if err := cl.WriteDirectorConf("wlc", w); err != nil {
			return nil, err
		}
		time.Sleep(2500 * time.Millisecond) // the director reloads
		r, err := wrk(ctx, nil, "http://"+cc.VIP+urlPath, cfg.Connections, cfg.Duration)
		if err != nil {
			return nil, err
		}
		row := ScalingRow{Nodes: n, ReqPerS: r.ReqPerS, MBPerS: r.MBPerS, P99ms: r.P99ms}
		if len(res.Rows) > 0 {
			base := res.Rows[0]
			row.Speedup = row.ReqPerS / base.ReqPerS
			row.ToLinear = row.Speedup / (float64(n) / float64(base.Nodes))
		} else {
			row.Speedup, row.ToLinear = 1, 1
		}
		res.Rows = append(res.Rows, row)
		logf("%2d nodes: %8.0f req/s %7.1f MB/s  p99 %7.1f ms  speedup %.2f  ratio to linear %.2f\n", n, row.ReqPerS, row.MBPerS, row.P99ms, row.Speedup, row.ToLinear)
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("nodes on %s links; director (user-space l4, wlc), file system and the client (the machine, wrk, %d connections) unshaped", orUnshaped(cfg.Rate), cfg.Connections),
		"ratio to linear = speedup over the first row / (nodes / first row's nodes); paper 001: 4.65x from 2 to 10 EPS units = 0.93 of linear",
		"the l4 proxy carries every reply, so its CPU (shared with everything else on this machine) caps the largest pools; XDP DR removes that")
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return nil, err
	}
	var xs, ys, lin []float64
	for _, r := range res.Rows {
		xs = append(xs, float64(r.Nodes))
		ys = append(ys, r.ReqPerS)
		lin = append(lin, res.Rows[0].ReqPerS*float64(r.Nodes)/float64(res.Rows[0].Nodes))
	}
	return res, LineChart(cfg.Out+"/scaling.svg", "Requests/s as nodes are added (paper 001)", "nodes", "requests/s",
		[]Series{{Name: "Corral l4", X: xs, Y: ys}, {Name: "linear", X: xs, Y: lin, Dashed: true}})
}

// Markdown renders the result.
func (r *ScalingResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# scaling (paper 001), %s\n\nFile %s, node links %s.\n\n| nodes | req/s | MB/s | p99 ms | speedup | ratio to linear |\n|---|---|---|---|---|---|\n",
		r.When.Format(time.RFC3339), humanBytes(r.FileSize), orUnshaped(r.Rate))
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %d | %.0f | %.1f | %.1f | %.2f | %.2f |\n", x.Nodes, x.ReqPerS, x.MBPerS, x.P99ms, x.Speedup, x.ToLinear)
	}
	b.WriteString("\nPaper 001: 1.5x from 2 to 3 units, 1.99x from 2 to 4, 4.65x from 2 to 10 (0.93 of linear).\n\nPlot: scaling.svg.\n\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}
