package mgmt

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/clustercfg"
	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
	"github.com/corral-cluster/corral/internal/mgmt/agent"
	"github.com/corral-cluster/corral/internal/mgmt/api"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// fbYAML: one service whose weights the station's monitor sets, from the
// real load endpoints of two nodes (agent source). Target 10 (Total_load
// 1000%) keeps the node on this host's real load at the top weight
// whatever the machine is doing; the skewed node's load average of 500
// per CPU takes it to the floor. n2 is a node with its admin address set:
// the station polls its /load there, the other at the section's agent-port.
const fbYAML = `directors:
  - name: d1
nodes:
  - name: n2
    address: 127.0.71.12:8080
    admin: 127.0.71.12:7181
services:
  - name: www
    vip: 127.0.71.100:8000
    scheduler: wrr
    weights: feedback
    check:
      type: none
    servers:
      - address: 127.0.71.11:8080
      - address: 127.0.71.12:8080
feedback:
  source: agent
  interval: 300ms
  timeout: 250ms
  agent-port: 7180
  ifname: lo
  bandwidth: 1gbit
  target: 10
  floor: 1
  max: 1000
`

// serveLoad serves the real feedback.LoadHandler on addr until the test ends.
func serveLoad(t *testing.T, addr string, c feedback.LocalConfig) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NewServeMux(), ReadHeaderTimeout: time.Second}
	srv.Handler.(*http.ServeMux).Handle("GET /load", feedback.LoadHandler(c))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// skewedProc is a proc root for LocalConfig.ProcRoot (the handler's own
// hook): this host's files, but a load average of 500.
func skewedProc(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"uptime", "meminfo", "stat", "net/dev"} {
		if err := os.Symlink(filepath.Join("/proc", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "loadavg"), []byte("500.00 500.00 500.00 1/100 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func serverWeights(d *director.Director, svc string) map[string]int {
	out := map[string]int{}
	for _, s := range d.Status() {
		if s.Name == svc {
			for _, r := range s.Servers {
				out[r.Addr] = r.Feedback
			}
		}
	}
	return out
}

// TestFeedbackThroughStation: a station whose configuration says
// `feedback: {source: agent}` polls two real node load endpoints; a
// director joined through the agent (as `corral director --join` does)
// runs no monitor of its own and ends up with the station's weights
// (source station, the station's terms); GET /v1/feedback serves the
// same. When the station stops, the director keeps the weights for three
// intervals, then decays them towards the floor.
func TestFeedbackThroughStation(t *testing.T) {
	ts := startStation(t, stationOpts("127.0.71.1", t.TempDir()))
	serveLoad(t, "127.0.71.11:7180", feedback.LocalConfig{Node: "n1", Interface: "lo"})
	serveLoad(t, "127.0.71.12:7181", feedback.LocalConfig{Node: "n2", Interface: "lo", ProcRoot: skewedProc(t)})
	admin := ts.client(t, ts.admin)
	mustApply(t, admin, 0, fbYAML)

	d := director.New(discardLog())
	t.Cleanup(d.Close)
	ctx, cancel := context.WithCancel(context.Background())
	tok := mkToken(t, ts, api.TokenRequest{Role: api.RoleDirector, TTL: time.Hour})
	o := agent.Options{Stations: []string{ts.url}, Token: tok.Secret, State: t.TempDir(), Role: api.RoleDirector, Name: "d1", Log: discardLog()}
	o.Apply = func(_ context.Context, cfg *clustercfg.Config, version int64, drained []string) error {
		return d.ApplyCluster(cfg, version, "d1", drained, nil)
	}
	o.Feedback = func(b []byte) error {
		st, err := director.DecodeStationFeedback(b)
		if err != nil {
			return err
		}
		return d.ApplyStationFeedback(st)
	}
	a, _, err := agent.Join(ctx, o)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-agentDone })

	const n1, n2 = "127.0.71.11:8080", "127.0.71.12:8080"
	// The station's monitor: real terms for both, the skewed node at the
	// floor, the other at the top.
	var pub director.FeedbackStatus
	if !waitCond(20*time.Second, func() bool {
		pub = director.FeedbackStatus{}
		if admin.Do(ctxT(t), http.MethodGet, api.RouteFeedback, nil, &pub) != nil || len(pub.Services) != 1 || len(pub.Services[0].Nodes) != 2 {
			return false
		}
		w := map[string]int{}
		for _, n := range pub.Services[0].Nodes {
			if n.Terms == nil {
				return false
			}
			w[n.Node] = n.Weight
		}
		return w[n1] == 1000 && w[n2] == 1
	}) {
		t.Fatalf("the station's publication never settled to n1 1000, n2 1: %+v", pub)
	}
	if pub.Source != "agent" || pub.Seq == 0 || pub.Interval != "300ms" || pub.Floor != 1 {
		t.Fatalf("publication: source %q seq %d interval %q floor %d", pub.Source, pub.Seq, pub.Interval, pub.Floor)
	}

	// The director: the station's weights, through its own fb path, and
	// the station's terms in ctl's view.
	var st director.FeedbackStatus
	if !waitCond(10*time.Second, func() bool {
		w := serverWeights(d, "www")
		st, err = d.FeedbackStatus()
		return err == nil && w[n1] == 1000 && w[n2] == 1
	}) {
		t.Fatalf("the director's feedback weights %v, status %+v (%v): want the station's", serverWeights(d, "www"), st, err)
	}
	if st.Source != "station" || st.Poll != "agent" || st.Seq == 0 || st.Stale != "" || len(st.Services) != 1 || st.Services[0].Nodes[0].Terms == nil {
		t.Fatalf("director's feedback status: %+v", st)
	}

	// The station's /metrics: the director's feedback metrics, the
	// station's prefix, lint-clean.
	resp, err := ts.client(t, "").HTTP.Get(ts.url + api.RouteMetrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`corral_mgmt_feedback_weight{server="127.0.71.11:8080",service="www"} 1000`,
		`corral_mgmt_feedback_term_percent{server="127.0.71.12:8080",service="www",term="la_load"}`, "corral_mgmt_feedback_publications_total "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("station /metrics lacks %s", want)
		}
	}
	if probs, err := promlint.New(strings.NewReader(string(body))).Lint(); err != nil || len(probs) > 0 {
		t.Errorf("promlint: %v %v", probs, err)
	}

	// The station stops: the weights stay for three intervals, then decay.
	// (Its shutdown waits up to 2 s for long polls: it runs beside.)
	stopped := time.Now()
	stopDone := make(chan struct{})
	go func() { defer close(stopDone); ts.stop() }()
	t.Cleanup(func() { <-stopDone })
	// Until the director calls the station silent, the weights are the
	// last published ones; it does so no sooner than 3 intervals after
	// the last publication (timed by the station, on this same clock).
	var seen int
	if !waitCond(10*time.Second, func() bool {
		st, _ = d.FeedbackStatus()
		if st.Stale != "" {
			return true
		}
		if w := serverWeights(d, "www"); w[n1] != 1000 || w[n2] != 1 {
			t.Fatalf("weights %v changed before the director called the station silent", w)
		}
		seen++
		return false
	}) {
		t.Fatal("the director never noticed the station's silence")
	}
	if quiet := time.Since(st.Time); quiet < 3*300*time.Millisecond {
		t.Fatalf("called silent %v after the last publication: want 3 intervals at least", quiet)
	}
	if seen == 0 {
		t.Fatal("no look at the weights between the stop and the silence")
	}
	var w map[string]int
	if !waitCond(10*time.Second, func() bool { w = serverWeights(d, "www"); return w[n1] < 500 }) {
		t.Fatalf("n1's weight did not decay towards the floor: %v", w)
	}
	if w[n1] < 1 || w[n2] != 1 {
		t.Fatalf("decayed weights %v: want within [floor, max]", w)
	}
	st, _ = d.FeedbackStatus()
	for _, n := range st.Services[0].Nodes {
		if n.Node == n1 && (n.Weight >= 1000 || n.Weight < 1) {
			t.Fatalf("director status while decaying: %+v", n)
		}
	}
	if st.Source != "station" {
		t.Fatalf("director status while decaying: source %q", st.Source)
	}
	t.Logf("kept, then decaying: %s; weights %v %.1fs after the stop", st.Stale, w, time.Since(stopped).Seconds())
}
