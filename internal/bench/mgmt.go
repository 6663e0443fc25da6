package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/launch/managed"
	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// MgmtConfig sizes the management station scenario.
type MgmtConfig struct {
	Bin, Dir, Out string
	// Net is the loopback /24 the cluster takes (first three octets):
	// station NET.1:7600, nodes NET.21.., VIP NET.100:8080.
	Net string
	// Nodes is the number of web nodes; Applies the number of versions,
	// each changing one node's weight, timed until every member runs it.
	Nodes, Applies int
	// BigServices x BigServers is the big configuration applied while a
	// request loop runs through the VIP; LoadBefore is the loop's baseline.
	BigServices, BigServers int
	LoadBefore              time.Duration
	Log                     io.Writer
}

// MgmtResult is the scenario's output.
type MgmtResult struct {
	Scenario string    `json:"scenario"`
	When     time.Time `json:"when"`
	Nodes    int       `json:"nodes"`
	// ApplyMs is, per apply, the time from the station's reply to the
	// director and every node reporting the version applied.
	ApplyMs []float64 `json:"apply_ms"`
	P50ms   float64   `json:"apply_p50_ms"`
	P99ms   float64   `json:"apply_p99_ms"`
	MaxMs   float64   `json:"apply_max_ms"`
	// The big configuration: its size, the time until the director (and
	// every node) applied it, and the request latency through the VIP
	// before and during.
	BigServices int     `json:"big_services"`
	BigServers  int     `json:"big_real_servers"`
	BigYAMLKiB  float64 `json:"big_yaml_kib"`
	BigApplyMs  float64 `json:"big_apply_ms"`
	// BigDirectorMs is the time until the director's admin API shows the
	// big configuration loaded (-1: never).
	BigDirectorMs float64   `json:"big_director_ms"`
	Before        LoadStats `json:"load_before"`
	During        LoadStats `json:"load_during"`
	Notes         []string  `json:"notes"`
}

// LoadStats are a request loop's figures.
type LoadStats struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// RunMgmt starts a managed cluster (station, one metadata server, one
// iod, Nodes nodes, a director), times Applies applies, then applies the
// big configuration under a request loop; writes results.json, results.md
// and mgmt.svg under Out.
func RunMgmt(ctx context.Context, cfg MgmtConfig) (*MgmtResult, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format, a...) }
	if cfg.Net == "" {
		cfg.Net = "127.0.59"
	}
	if cfg.Nodes < 1 || cfg.Nodes > 200 {
		return nil, fmt.Errorf("--nodes %d: want 1..200", cfg.Nodes)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp(cfg.Dir, "corral-bench-mgmt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(data)
	n := cfg.Net
	cc := launch.ClusterConfig{Bin: cfg.Bin, Data: data, MetaListen: n + ".1:7400", IODListens: []string{n + ".11:7410"},
		VIP: n + ".100:8080", Admin: n + ".1:7500", Dataplane: "l4", Scheduler: "wlc"}
	for i := range cfg.Nodes {
		cc.NodeListen = append(cc.NodeListen, fmt.Sprintf("%s.%d:8080", n, 21+i))
	}
	logf("starting a station, a director and %d nodes on %s.0/24\n", cfg.Nodes, n)
	c, _, err := managed.Start(ctx, cc, managed.Options{Station: n + ".1:7600"})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	cl, err := managed.Client(c)
	if err != nil {
		return nil, err
	}
	members := []string{managed.DirectorName}
	for i := range cfg.Nodes {
		members = append(members, managed.NodeName(i))
	}
	res := &MgmtResult{Scenario: "mgmt", When: time.Now().UTC(), Nodes: cfg.Nodes}
	cur, err := mgmtCurrent(ctx, cl)
	if err != nil {
		return nil, err
	}
	if _, err := mgmtWait(ctx, cl, members, cur.Version, 60*time.Second); err != nil {
		return nil, fmt.Errorf("members never applied the first version: %w", err)
	}

	// 1. Apply latency: one weight per version.
	for i := range cfg.Applies {
		cur, err := mgmtCurrent(ctx, cl)
		if err != nil {
			return nil, err
		}
		c, err := clustercfg.Parse("current", []byte(cur.YAML))
		if err != nil {
			return nil, fmt.Errorf("the station's configuration: %w", err)
		}
		node := &c.Nodes[i%len(c.Nodes)]
		w := 1
		if node.Weight != nil {
			w = *node.Weight
		}
		node.Weight = managed.Weight(1 + w%3)
		v, err := mgmtApply(ctx, cl, c, cur.Version, fmt.Sprintf("bench %d", i))
		if err != nil {
			return nil, err
		}
		d, err := mgmtWait(ctx, cl, members, v, 30*time.Second)
		if err != nil {
			return nil, fmt.Errorf("apply %d: %w", i, err)
		}
		res.ApplyMs = append(res.ApplyMs, ms(d))
		logf("apply %3d: version %d everywhere in %7.1f ms\n", i, v, ms(d))
	}
	if len(res.ApplyMs) > 0 {
		s := slices.Sorted(slices.Values(res.ApplyMs))
		res.P50ms, res.P99ms, res.MaxMs = quantile(s, 0.50), quantile(s, 0.99), s[len(s)-1]
	}

	// 2. The big configuration under load.
	if cfg.BigServices > 0 {
		if err := mgmtBig(ctx, cfg, c, cl, members, res, logf); err != nil {
			return nil, err
		}
	}
	res.Notes = append(res.Notes,
		"Apply time: from the station's reply to the apply (PUT /v1/config) until the director and every node report that version applied (GET /v1/members polled every 5 ms; members report right after applying).",
		fmt.Sprintf("Goal: p99 <= 1 s with 10 nodes; this run: %d nodes, %d applies.", cfg.Nodes, cfg.Applies),
		"The big configuration's services use explicit real servers on addresses nothing serves, with check none: it measures the station, the agents and the director's swap, not health checking.",
		"Load: one kept-alive client and one opening a connection per request, through the l4 VIP, sequential.")
	var xs []float64
	for i := range res.ApplyMs {
		xs = append(xs, float64(i+1))
	}
	if err := LineChart(filepath.Join(cfg.Out, "mgmt.svg"), fmt.Sprintf("apply until %d nodes and the director run it", cfg.Nodes),
		"apply", "ms", []Series{{Name: "apply", X: xs, Y: res.ApplyMs}}); err != nil {
		return nil, err
	}
	return res, writeJSONMD(cfg.Out, res, res.Markdown())
}

func mgmtCurrent(ctx context.Context, cl *api.Client) (api.Version, error) {
	var v api.Version
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := cl.Do(cctx, http.MethodGet, api.RouteConfig, nil, &v)
	return v, err
}

// mgmtApply stores c on base and returns the new version.
func mgmtApply(ctx context.Context, cl *api.Client, c *clustercfg.Config, base int64, comment string) (int64, error) {
	y, err := c.Marshal()
	if err != nil {
		return 0, err
	}
	var rep api.ApplyReply
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cl.Do(cctx, http.MethodPut, api.RouteConfig, api.ApplyRequest{Base: base, YAML: string(y), Comment: comment}, &rep); err != nil {
		return 0, err
	}
	return rep.Version, nil
}

// mgmtWait polls the members list every 5 ms until every one of names
// reports version v applied (or a later one), and returns how long that
// took. A member reporting an error for v fails it.
func mgmtWait(ctx context.Context, cl *api.Client, names []string, v int64, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < limit {
		var ms []api.MemberStatus
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cl.Do(cctx, http.MethodGet, api.RouteMembers, nil, &ms)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			last = err.Error()
		} else {
			by := map[string]api.MemberStatus{}
			for _, m := range ms {
				by[m.Name] = m
			}
			missing := 0
			for _, n := range names {
				m, ok := by[n]
				if ok && m.Error != "" && m.Version < v {
					return 0, fmt.Errorf("%s could not apply version %d: %s", n, v, m.Error)
				}
				if !ok || m.Version < v {
					missing++
					last = fmt.Sprintf("%s at version %d", n, m.Version)
				}
			}
			if missing == 0 {
				return time.Since(start), nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("version %d not applied everywhere within %v (%s)", v, limit, last)
}

// mgmtDirectorWait polls the director's admin status every 5 ms until its
// last load is station version v, done well.
func mgmtDirectorWait(ctx context.Context, url string, v int64, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	hc := &http.Client{Timeout: 5 * time.Second}
	want := fmt.Sprintf("version %d", v)
	var last string
	for time.Since(start) < limit {
		var st struct {
			Reload *struct {
				OK    bool   `json:"ok"`
				File  string `json:"file"`
				Error string `json:"error"`
			} `json:"reload"`
		}
		resp, err := hc.Get(url)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		switch {
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case err != nil:
			last = err.Error()
		case st.Reload != nil && strings.HasSuffix(st.Reload.File, want):
			if !st.Reload.OK {
				return 0, fmt.Errorf("the director refused version %d: %s", v, st.Reload.Error)
			}
			return time.Since(start), nil
		case st.Reload != nil:
			last = st.Reload.File
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("not within %v (last: %s)", limit, last)
}

// mgmtBig applies BigServices x BigServers while a request loop measures
// the VIP.
func mgmtBig(ctx context.Context, cfg MgmtConfig, c *launch.Cluster, cl *api.Client, members []string, res *MgmtResult, logf func(string, ...any)) error {
	cur, err := mgmtCurrent(ctx, cl)
	if err != nil {
		return err
	}
	conf, err := clustercfg.Parse("current", []byte(cur.YAML))
	if err != nil {
		return err
	}
	n := cfg.Net
	for i := range cfg.BigServices {
		s := clustercfg.Service{Name: fmt.Sprintf("big%04d", i), VIP: fmt.Sprintf("%s.%d:%d", n, 101+i/10000, 20000+i%10000),
			Dataplane: "l4", Scheduler: "wlc", Check: &clustercfg.Check{Type: "none"}}
		for k := range cfg.BigServers {
			s.Servers = append(s.Servers, clustercfg.RealServer{Address: fmt.Sprintf("%s.%d:%d", n, 150+k%100, 30000+i)})
		}
		conf.Services = append(conf.Services, s)
	}
	res.BigServices, res.BigServers = cfg.BigServices, cfg.BigServices*cfg.BigServers
	if y, err := conf.Marshal(); err == nil {
		res.BigYAMLKiB = float64(len(y)) / 1024
	}
	vip := "http://" + c.Cfg.VIP + "/"
	logf("request loop through %s: %v before the big configuration\n", vip, cfg.LoadBefore)
	res.Before = mgmtLoad(ctx, vip, cfg.LoadBefore, nil)
	logf("before: %d requests, p50 %.2f ms, p99 %.2f ms, %d errors\n", res.Before.Requests, res.Before.P50ms, res.Before.P99ms, res.Before.Errors)

	stop := make(chan struct{})
	during := make(chan LoadStats, 1)
	go func() { during <- mgmtLoad(ctx, vip, 10*time.Minute, stop) }()
	time.Sleep(200 * time.Millisecond)
	logf("applying %d services x %d real servers (%.0f KiB of YAML)\n", cfg.BigServices, cfg.BigServers, res.BigYAMLKiB)
	v, err := mgmtApply(ctx, cl, conf, cur.Version, "bench: big configuration")
	if err != nil {
		close(stop)
		<-during
		return fmt.Errorf("big configuration: %w", err)
	}
	// When the director runs it (its admin API's last load), then when
	// every member has reported it.
	dd, derr := mgmtDirectorWait(ctx, "http://"+c.Cfg.Admin+"/api/status", v, 60*time.Second)
	if derr == nil {
		res.BigDirectorMs = ms(dd)
		logf("the director runs it %.0f ms after the apply\n", res.BigDirectorMs)
	} else {
		res.BigDirectorMs = -1
		res.Notes = append(res.Notes, fmt.Sprintf("The director's admin API never showed the big configuration: %v", derr))
	}
	d, err := mgmtWait(ctx, cl, members, v, 30*time.Second)
	if err == nil {
		d += dd
	}
	time.Sleep(200 * time.Millisecond) // the swap's tail
	close(stop)
	res.During = <-during
	if err != nil {
		// Still a result: the load figures say whether the dataplane
		// stalled; the note says what did not get there.
		res.BigApplyMs = -1
		why := ""
		if p := c.Proc("director"); p != nil {
			why = "; the director's log ends: " + launch.Tail(p.Log, 3)
		}
		res.Notes = append(res.Notes, fmt.Sprintf("The big configuration was not reported applied everywhere: %v%s", err, why))
		logf("big configuration: %v\n", err)
		return nil
	}
	res.BigApplyMs = ms(d)
	logf("big configuration applied everywhere in %.0f ms; during: %d requests, p50 %.2f ms, p99 %.2f ms, %d errors\n",
		res.BigApplyMs, res.During.Requests, res.During.P50ms, res.During.P99ms, res.During.Errors)
	return nil
}

// mgmtLoad requests url in a loop on a kept-alive and a new-connection
// client until d passes or stop closes.
func mgmtLoad(ctx context.Context, url string, d time.Duration, stop <-chan struct{}) LoadStats {
	end := time.Now().Add(d)
	var mu sync.Mutex
	var lat []float64
	var st LoadStats
	var wg sync.WaitGroup
	for _, keep := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: !keep}, Timeout: 10 * time.Second}
			defer hc.CloseIdleConnections()
			for time.Now().Before(end) && ctx.Err() == nil {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				err := mgmtGet(hc, url)
				el := ms(time.Since(t0))
				mu.Lock()
				st.Requests++
				if err != nil {
					st.Errors++
				} else {
					lat = append(lat, el)
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if len(lat) > 0 {
		slices.Sort(lat)
		st.P50ms, st.P99ms, st.MaxMs = quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1]
	}
	return st
}

func mgmtGet(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Markdown renders the result.
func (r *MgmtResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mgmt, %s\n\n## Apply until every member runs it\n\n", r.When.Format(time.RFC3339))
	fmt.Fprintf(&b, "| nodes | applies | p50 ms | p99 ms | max ms | goal p99 |\n|---|---|---|---|---|---|\n| %d | %d | %.1f | %.1f | %.1f | <= 1000 ms: %s |\n",
		r.Nodes, len(r.ApplyMs), r.P50ms, r.P99ms, r.MaxMs, map[bool]string{true: "met", false: "missed"}[r.P99ms <= 1000])
	if r.BigServices > 0 {
		applied := fmt.Sprintf("Applied everywhere in %.0f ms.", r.BigApplyMs)
		if r.BigApplyMs < 0 {
			applied = "Not reported applied everywhere (see the notes)."
		}
		if r.BigDirectorMs >= 0 {
			applied = fmt.Sprintf("The director runs it %.0f ms after the apply. ", r.BigDirectorMs) + applied
		}
		fmt.Fprintf(&b, "\n## %d services, %d real servers (%.0f KiB of YAML)\n\n%s\n\n", r.BigServices, r.BigServers, r.BigYAMLKiB, applied)
		b.WriteString("| request loop | requests | errors | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n")
		for _, x := range []struct {
			name string
			s    LoadStats
		}{{"before", r.Before}, {"during the apply", r.During}} {
			fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.2f | %.2f |\n", x.name, x.s.Requests, x.s.Errors, x.s.P50ms, x.s.P99ms, x.s.MaxMs)
		}
	}
	b.WriteString("\nNotes:\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}
