package director

import (
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/prometheus/client_golang/prometheus"
)

// Timing an l7 request allocates nothing once its service's series exists.
func TestObserveRequestDoesNotAllocate(t *testing.T) {
	d := New(nil)
	defer d.Close()
	s := &service{d: d}
	s.cfg.Store(&config.Service{Name: "www"})
	d.metrics.observeRequest(s, time.Now())
	if n := testing.AllocsPerRun(1000, func() { d.metrics.observeRequest(s, time.Now()) }); n != 0 {
		t.Errorf("observeRequest allocates %v times per call", n)
	}
}

// A service removed by a reload takes its latency series with it.
func TestRemovedServiceLeavesMetrics(t *testing.T) {
	d := New(nil)
	defer d.Close()
	s := &service{d: d}
	s.cfg.Store(&config.Service{Name: "gone"})
	d.metrics.observeRequest(s, time.Now())
	if n := latencySeries(d); n != 1 {
		t.Fatalf("%d series before, want 1", n)
	}
	if _, err := d.metrics.reg.Gather(); err != nil { // a scrape: "gone" is not running
		t.Fatal(err)
	}
	if n := latencySeries(d); n != 0 {
		t.Fatalf("%d series after the service went, want 0", n)
	}
}

// latencySeries counts the request-latency series.
func latencySeries(d *Director) int {
	ch := make(chan prometheus.Metric, 16)
	d.metrics.reqDur.Collect(ch)
	close(ch)
	return len(ch)
}
