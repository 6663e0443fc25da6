package node

import (
	"testing"
	"time"
)

// Counting a request allocates nothing once its status code was seen.
func TestObserveDoesNotAllocate(t *testing.T) {
	s := New(Config{Meta: "127.0.0.1:1"})
	defer s.Close()
	s.metrics.observe(404, 0, time.Now())
	if n := testing.AllocsPerRun(1000, func() {
		s.metrics.observe(200, 100, time.Now())
		s.metrics.observe(404, 0, time.Now())
		s.metrics.observe(0, 0, time.Now()) // nothing written: counted as 200
	}); n != 0 {
		t.Errorf("observe allocates %v times per 3 calls", n)
	}
	if s.metrics.codes[500].Load() != nil {
		t.Fatal("500 counted before any")
	}
	s.metrics.observe(999, 0, time.Now()) // not a status: kept in the bounded set
	if s.metrics.codes[500].Load() == nil {
		t.Error("an out-of-range status was not folded into 500")
	}
}
