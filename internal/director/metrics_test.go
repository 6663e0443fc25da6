package director

import (
	"os"
	"path/filepath"
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

// A rejected configuration shows in /metrics, as in ctl status.
func TestRejectedReloadInMetrics(t *testing.T) {
	d := New(nil)
	defer d.Close()
	path := filepath.Join(t.TempDir(), "director.conf")
	if err := os.WriteFile(path, []byte("admin 127.0.0.1:0\nservice www {\n    vip 127.0.0.1:1\n    scheduler fastest\n    server 127.0.0.1:2\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.reloadFrom(path, ""); err == nil {
		t.Fatal("a bad scheduler was accepted")
	}
	mfs, err := d.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "corral_director_config_last_reload_successful" {
			found = true
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0 {
				t.Errorf("last reload successful = %v after a rejection", v)
			}
		}
	}
	if !found {
		t.Error("no corral_director_config_last_reload_successful")
	}
}
