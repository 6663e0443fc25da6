package client

import (
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/proto"
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

// TestAddStaleMerges: records of one copy that overlap or touch merge
// (Len 0 stays "to the end"); others stay apart.
func TestAddStaleMerges(t *testing.T) {
	var recs []proto.StaleRec
	for i := uint64(0); i < 100; i++ {
		recs = addStale(recs, proto.StaleRec{Index: 1, Server: 2, Off: i * 4096, Len: 4096})
	}
	recs = addStale(recs, proto.StaleRec{Index: 1, Server: 3, Off: 0, Len: 10})
	recs = addStale(recs, proto.StaleRec{Index: 0, Server: 2, Off: 0, Len: 10})
	if len(recs) != 3 || recs[0] != (proto.StaleRec{Index: 1, Server: 2, Off: 0, Len: 100 * 4096}) {
		t.Fatalf("records %+v: want one for [0, 400 KiB) of server 2 column 1 and two others", recs)
	}
	recs = addStale(recs, proto.StaleRec{Index: 1, Server: 2, Off: 8192, Len: 0})
	if recs[0] != (proto.StaleRec{Index: 1, Server: 2, Off: 0, Len: 0}) {
		t.Fatalf("record %+v: want [0, end)", recs[0])
	}
}
