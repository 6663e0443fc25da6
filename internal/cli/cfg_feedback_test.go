package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/feedback"
)

// TestPrintStationFeedback: a director fed by the station says so in
// `ctl feedback`, with the publication and, once silent, why stale.
func TestPrintStationFeedback(t *testing.T) {
	now := time.Date(2026, 11, 27, 21, 0, 10, 0, time.UTC)
	st := director.FeedbackStatus{Source: "station", Poll: "agent", Interval: "2s", Seq: 7, Time: now.Add(-8 * time.Second), Floor: 1,
		Stale: "station silent for 8s: weights decaying towards floor 1",
		Services: []director.FeedbackService{{Name: "www", Polled: now.Add(-8 * time.Second),
			Nodes: []director.FeedbackNode{{Decision: feedback.Decision{Node: "127.0.71.11:8080", Weight: 40, Previous: 80, Reason: "no change"}}}}}}
	var b strings.Builder
	if err := printFeedback(&b, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"source station, every 2s", "station publication 7 at 21:00:02.0 (8.0s ago), polling agent", "STALE: station silent", "127.0.71.11:8080  40"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}
