package client

import (
	"testing"
	"time"
)

// TestDownMemory: a failed server is skipped for DownFor; failing again
// right after that doubles the period (up to maxDown); a server healthy for
// a period starts afresh.
func TestDownMemory(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	clock := t0
	now = func() time.Time { return clock }
	t.Cleanup(func() { now = time.Now })
	c := &Client{}
	at := func(d time.Duration) { clock = t0.Add(d) }
	c.markDown(3)
	if !c.Down(3) || c.Down(4) {
		t.Fatal("server 3 failed: it is down, 4 is not")
	}
	at(DownFor - time.Second)
	c.markDown(3) // the same outage: no longer
	at(DownFor + time.Millisecond)
	if c.Down(3) {
		t.Fatal("still down after DownFor")
	}
	c.markDown(3) // tried again, failed again: twice as long
	at(DownFor + 2*DownFor - time.Second)
	if !c.Down(3) {
		t.Fatal("the second period is not doubled")
	}
	for i := 0; i < 10; i++ {
		r := c.down[3]
		at(r.until.Sub(t0) + time.Millisecond)
		c.markDown(3)
	}
	if p := c.down[3].period; p != maxDown {
		t.Fatalf("period %v after many failures, want the cap %v", p, maxDown)
	}
	r := c.down[3]
	at(r.until.Sub(t0) + r.period + time.Second) // healthy for a period
	if c.Down(3) {
		t.Fatal("down after being healthy")
	}
	c.markDown(3)
	if p := c.down[3].period; p != DownFor {
		t.Fatalf("period %v after a healthy spell, want %v afresh", p, DownFor)
	}
}
