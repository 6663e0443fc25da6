package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQoSSeries: events bin by scheduled send time into the plots'
// series: each class's p50/p99 of its 200s, its 200s and 503s per
// second; gold's 503 line only if gold was shed.
func TestQoSSeries(t *testing.T) {
	var evs []qosEvent
	for i := 0; i < 100; i++ { // bin 0: best-effort 1..100 ms, 10 shed
		evs = append(evs, qosEvent{at: 0.1, code: 200, ms: float64(i + 1)})
	}
	for i := 0; i < 10; i++ {
		evs = append(evs, qosEvent{at: 0.2, code: 503})
	}
	evs = append(evs, qosEvent{at: 0.7, gold: true, code: 200, ms: 3}, qosEvent{at: 0.8, gold: true}) // bin 1: gold, one error
	lat, rate := qosSeries(evs)
	names := func(ss []Series) string {
		var n []string
		for _, s := range ss {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(lat); got != "gold p99,gold p50,best-effort p99,best-effort p50" {
		t.Fatalf("latency series %s", got)
	}
	if got := names(rate); got != "gold 200,best-effort 200,best-effort 503" {
		t.Fatalf("rate series %s", got)
	}
	if g := lat[0]; len(g.X) != 1 || g.X[0] != 0.75 || g.Y[0] != 3 {
		t.Errorf("gold p99 %+v", g)
	}
	if b := lat[2]; len(b.X) != 1 || b.X[0] != 0.25 || b.Y[0] != 99 {
		t.Errorf("best-effort p99 %+v, want 99 in the first bin", b)
	}
	if b := lat[3]; b.Y[0] != 50 {
		t.Errorf("best-effort p50 %+v", b)
	}
	if ok, shed := rate[1], rate[2]; ok.Y[0] != 200 || ok.Y[1] != 0 || shed.Y[0] != 20 {
		t.Errorf("best-effort 200/s %v, 503/s %v (per second: 100 and 10 in 0.5 s)", ok.Y, shed.Y)
	}
	// Written as SVGs for the three phases a run has.
	r := &QoSResult{Phases: []QoSPhase{{}, {Name: "a", events: evs}, {Name: "b", events: evs[:5]}}}
	dir := t.TempDir()
	if err := r.plots(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"qos-latency-classes.svg", "qos-latency-noclasses.svg", "qos-rate-classes.svg", "qos-rate-noclasses.svg"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.Contains(string(b), "<polyline") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
