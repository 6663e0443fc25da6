package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/ha"
)

func TestPrintHA(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	st := ha.Status{Name: "d1", Group: "web", Mode: ha.ActiveStandby, State: ha.StateActive, Priority: 150, Active: "d1",
		LeaseTTL: 2 * time.Second, FenceLeft: 1234 * time.Millisecond, LastTransition: now.Add(-90 * time.Second),
		LastReason: "elected: no active", Transitions: 3, SyncErrors: 1, Resyncs: 2,
		Peers: []ha.PeerStatus{
			{Name: "d2", Sync: "127.0.82.12:7700", State: ha.StateStandby, Priority: 100, OutConnected: true, OutSent: 1200, OutAcked: 1190,
				Lag: 3 * time.Millisecond, InConnected: true, InSynced: true, InApplied: 7, InSkipped: 1},
			{Name: "d3", Sync: "127.0.82.13:7700", State: ha.StateSyncing, Priority: 100, InConnected: true},
		}}
	var b strings.Builder
	if err := printHA(&b, st, now); err != nil {
		t.Fatal(err)
	}
	want := `group:           web (active-standby)
this director:   d1, ACTIVE, priority 150
active:          d1
lease TTL:       2s
fence:           1.2s left
last transition: 1m30s ago (elected: no active)
transitions:     3; sync errors 1, resyncs 2

PEER  STATE    PRIORITY  SYNC ADDRESS      OUT sent/acked  LAG  IN synced  APPLIED  SKIPPED
d2    standby  100       127.0.82.12:7700  1200/1190       3ms  yes        7        1
d3    syncing  100       127.0.82.13:7700  down            -    no         0        0
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// A fenced director alone in an active-active group... and one
	// without peers or transitions.
	b.Reset()
	printHA(&b, ha.Status{Name: "d1", Group: "web", Mode: ha.ActiveActive, State: ha.StateStarting, Priority: 100, LeaseTTL: 2 * time.Second}, now)
	for _, line := range []string{"active:          all (active-active)", "fence:           none (active-active)",
		"last transition: none yet", "peers:           none (no other director registered in the group)"} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("no line %q in\n%s", line, b.String())
		}
	}
	b.Reset()
	printHA(&b, ha.Status{Name: "d1", Group: "web", Mode: ha.ActiveStandby, State: ha.StateFenced, LeaseTTL: 2 * time.Second}, now)
	if !strings.Contains(b.String(), "d1, FENCED") || !strings.Contains(b.String(), "fence:           closed\n") || !strings.Contains(b.String(), "active:          none\n") {
		t.Errorf("fenced:\n%s", b.String())
	}
}

func TestPrintHandover(t *testing.T) {
	var b strings.Builder
	printHandover(&b, director.HandoverResult{From: "d1", To: "d2", Took: 43217 * time.Microsecond})
	printHandover(&b, director.HandoverResult{From: "d1", Took: 3 * time.Second})
	want := "d2 took over from d1 in 43ms\nd1 handed over after 3s; no new active showed yet (see corral ctl ha)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
