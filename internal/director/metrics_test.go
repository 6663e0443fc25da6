package director

import (
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
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
