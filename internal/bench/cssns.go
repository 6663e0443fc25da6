package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// CSSNSConfig sizes paper 000's experiment.
type CSSNSConfig struct {
	Bin, Dir, Out string
	P             []int   // concurrent client processes
	S             []int64 // file sizes
	Rate          string  // node and I/O server links
	Log           io.Writer
}

// CSSNSResult holds the tables of paper 000, measured here.
type CSSNSResult struct {
	Scenario string    `json:"scenario"`
	When     time.Time `json:"when"`
	Rate     string    `json:"rate"`
	P        []int     `json:"p"`
	S        []int64   `json:"s"`
	// Times[config][s][p] in seconds; configs: pvfs (one node, no
	// director), two, three (director with 2 or 3 nodes).
	Times      map[string][][]float64 `json:"times_s"`
	MeanRatio2 float64                `json:"mean_ratio_two"`
	MeanRatio3 float64                `json:"mean_ratio_three"`
	Memory     []MemRow               `json:"node_memory"`
	Notes      []string               `json:"notes"`
}

var cssnsConfigs = []string{"pvfs", "two", "three"}

// fetchAll has p clients fetch url at once and returns when all are done.
func fetchAll(ctx context.Context, url string, p int, want int64) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, p)
	start := time.Now()
	for i := 0; i < p; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Minute}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := cl.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && (resp.StatusCode != 200 || n != want) {
				err = fmt.Errorf("%s: status %d, %d of %d bytes", url, resp.StatusCode, n, want)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// RunCSSNS reruns paper 000's completion-time experiment (tables 1-7) on a
// test bed: P clients each fetch an S-byte file over HTTP (a) from one node
// with no director, (b) through the director with 2 nodes, (c) with 3.
func RunCSSNS(ctx context.Context, cfg CSSNSConfig) (*CSSNSResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	scratch, cleanup, err := scratchDir(cfg.Out, cfg.Dir, "cssns")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// Nodes and I/O servers on shaped links; director and meta unshaped.
	cl, fsc, stop, err := bedCluster(ctx, "cssns", cfg.Bin, scratch, 3, func(h string) string {
		if strings.HasPrefix(h, "node") || strings.HasPrefix(h, "iod") {
			return cfg.Rate
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	cc := cl.Cfg
	for _, s := range cfg.S {
		if _, err := putSample(ctx, fsc, s); err != nil {
			return nil, err
		}
	}
	res := &CSSNSResult{Scenario: "cssns", When: time.Now().UTC(), Rate: cfg.Rate, P: cfg.P, S: cfg.S, Times: map[string][][]float64{}}
	pid := cl.Nodes[0].Pid()
	for _, conf := range cssnsConfigs {
		target := cc.VIP
		switch conf {
		case "pvfs":
			target = cc.NodeListen[0]
		case "two":
			if err := cl.WriteDirectorConf("wlc", []int{1, 1, 0}); err != nil {
				return nil, err
			}
			time.Sleep(2500 * time.Millisecond) // the director reloads
		case "three":
			if err := cl.WriteDirectorConf("wlc", []int{1, 1, 1}); err != nil {
				return nil, err
			}
			time.Sleep(2500 * time.Millisecond)
		}
		table := make([][]float64, len(cfg.S))
		for si, s := range cfg.S {
			for _, p := range cfg.P {
				var peak float64
				done := make(chan struct{})
				var sampler sync.WaitGroup
				if conf == "pvfs" {
					sampler.Add(1)
					go func() {
						defer sampler.Done()
						for {
							peak = max(peak, rssMB(pid))
							select {
							case <-done:
								return
							case <-time.After(20 * time.Millisecond):
							}
						}
					}()
				}
				d, err := fetchAll(ctx, "http://"+target+"/"+fileName(s), p, s)
				close(done)
				sampler.Wait()
				if err != nil {
					return nil, err
				}
				table[si] = append(table[si], d.Seconds())
				logf("%-5s S=%-6s P=%-3d %7.2f s\n", conf, humanBytes(s), p, d.Seconds())
				if conf == "pvfs" {
					res.Memory = append(res.Memory, MemRow{P: p, S: s, PS: float64(p) * float64(s) / (1 << 20), PeakRSS: peak})
				}
			}
		}
		res.Times[conf] = table
	}
	n := 0.0
	for si := range cfg.S {
		for pi := range cfg.P {
			a := res.Times["pvfs"][si][pi]
			res.MeanRatio2 += res.Times["two"][si][pi] / a
			res.MeanRatio3 += res.Times["three"][si][pi] / a
			n++
		}
	}
	res.MeanRatio2 /= n
	res.MeanRatio3 /= n
	rate := cfg.Rate
	if rate == "" {
		rate = "unshaped"
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("test bed: nodes and I/O servers on %s links; director, metadata server and the client (the machine, 10.77.0.1) unshaped", rate),
		"director: user-space l4 proxy, wlc (paper 000: LVS VS/DR with MWLC); the XDP DR dataplane will take the proxy off the reply path",
		"completion time: from the first request until the last of the P clients has its whole file",
		"paper 000 measured P = 100..450 processes and S = 10..50 MB on 100 Mbit PCs; this run is scaled to one machine")
	if err := writeJSONMD(cfg.Out, res, res.Markdown()); err != nil {
		return nil, err
	}
	return res, res.plots(cfg.Out)
}

func (r *CSSNSResult) table(b *strings.Builder, title string, cell func(si, pi int) float64, format string) {
	fmt.Fprintf(b, "\n%s\n\n| S \\ P |", title)
	for _, p := range r.P {
		fmt.Fprintf(b, " %d |", p)
	}
	b.WriteString("\n|---|")
	for range r.P {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for si, s := range r.S {
		fmt.Fprintf(b, "| %s |", humanBytes(s))
		for pi := range r.P {
			fmt.Fprintf(b, " "+format+" |", cell(si, pi))
		}
		b.WriteString("\n")
	}
}

// Markdown renders tables shaped like paper 000's.
func (r *CSSNSResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# cssns (paper 000, tables 1-7), %s\n\nLinks: %s.\n", r.When.Format(time.RFC3339), orUnshaped(r.Rate))
	t := r.Times
	r.table(&b, "Table 1. Completion time (s), one node, no director (\"only PVFS\")", func(s, p int) float64 { return t["pvfs"][s][p] }, "%.2f")
	r.table(&b, "Table 2. Completion time (s), director + 2 nodes", func(s, p int) float64 { return t["two"][s][p] }, "%.2f")
	r.table(&b, "Table 3. Completion time (s), director + 3 nodes", func(s, p int) float64 { return t["three"][s][p] }, "%.2f")
	r.table(&b, "Table 4. Ratio, 2 nodes / only PVFS", func(s, p int) float64 { return t["two"][s][p] / t["pvfs"][s][p] }, "%.2f")
	r.table(&b, "Table 5. Ratio, 3 nodes / only PVFS", func(s, p int) float64 { return t["three"][s][p] / t["pvfs"][s][p] }, "%.2f")
	r.table(&b, "Table 6. Saving time (s), 2 nodes", func(s, p int) float64 { return t["pvfs"][s][p] - t["two"][s][p] }, "%.2f")
	r.table(&b, "Table 7. Saving time (s), 3 nodes", func(s, p int) float64 { return t["pvfs"][s][p] - t["three"][s][p] }, "%.2f")
	fmt.Fprintf(&b, "\nMean ratio: 2 nodes %.2f (paper 0.63), 3 nodes %.2f (paper 0.51).\n", r.MeanRatio2, r.MeanRatio3)
	b.WriteString("\nNode memory (only PVFS runs): peak RSS of the serving node against P·S\n\n| P | S | P·S MB | peak RSS MB | paper: 0.001·P·S + 0.9 |\n|---|---|---|---|---|\n")
	for _, m := range r.Memory {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.1f | %.2f |\n", m.P, humanBytes(m.S), m.PS, m.PeakRSS, 0.001*m.PS+0.9)
	}
	b.WriteString("\nPlots: ratio.svg (tables 4-5), saving.svg (figs. 4-5), memory.svg.\n\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func orUnshaped(r string) string {
	if r == "" {
		return "unshaped"
	}
	return r
}

func (r *CSSNSResult) plots(dir string) error {
	var ratio, saving, mem []Series
	ps := make([]float64, len(r.P))
	for i, p := range r.P {
		ps[i] = float64(p)
	}
	for si, s := range r.S {
		var r2, r3, s2, s3 []float64
		for pi := range r.P {
			a := r.Times["pvfs"][si][pi]
			r2 = append(r2, r.Times["two"][si][pi]/a)
			r3 = append(r3, r.Times["three"][si][pi]/a)
			s2 = append(s2, a-r.Times["two"][si][pi])
			s3 = append(s3, a-r.Times["three"][si][pi])
		}
		ratio = append(ratio, Series{Name: "2 nodes, " + humanBytes(s), X: ps, Y: r2}, Series{Name: "3 nodes, " + humanBytes(s), X: ps, Y: r3, Dashed: true})
		saving = append(saving, Series{Name: "2 nodes, " + humanBytes(s), X: ps, Y: s2}, Series{Name: "3 nodes, " + humanBytes(s), X: ps, Y: s3, Dashed: true})
	}
	flat := func(v float64) []float64 {
		out := make([]float64, len(ps))
		for i := range out {
			out[i] = v
		}
		return out
	}
	ratio = append(ratio, Series{Name: "paper, 2 nodes", X: ps, Y: flat(0.63), Dashed: true}, Series{Name: "paper, 3 nodes", X: ps, Y: flat(0.51), Dashed: true})
	rows := append([]MemRow(nil), r.Memory...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].PS < rows[j].PS })
	var mx, my []float64
	for _, m := range rows {
		mx, my = append(mx, m.PS), append(my, m.PeakRSS)
	}
	mem = append(mem, Series{Name: "Corral node RSS", X: mx, Y: my})
	for _, c := range []struct {
		file, title, y string
		s              []Series
	}{
		{"ratio.svg", "Completion time ratio to one node (tables 4-5)", "ratio", ratio},
		{"saving.svg", "Saving time (figs. 4-5)", "seconds", saving},
		{"memory.svg", "Node memory against P*S", "peak RSS (MB)", mem},
	} {
		x := "clients P"
		if c.file == "memory.svg" {
			x = "P*S (MB)"
		}
		if err := LineChart(filepath.Join(dir, c.file), c.title, x, c.y, c.s); err != nil {
			return err
		}
	}
	return nil
}
