package bench

import (
	"math"
	"strings"
	"testing"
)

// TestBreakdown: per-operation figures from two scrapes, as --profile
// computes them.
func TestBreakdown(t *testing.T) {
	scrape := func(text string) map[string]float64 { return parseProm([]byte(text)) }
	before := map[string]map[string]float64{
		"meta": scrape(`# HELP x
corral_meta_operations_total{op="create",result="ok"} 10
corral_meta_operations_total{op="getattr",result="ok"} 5
corral_replog_wal_fsync_seconds_sum 0.5
corral_replog_wal_fsync_seconds_count 100
corral_replog_commit_seconds_sum 0
corral_replog_commit_seconds_count 0
process_cpu_seconds_total 1
`),
		"iod": scrape(`corral_iod_object_fsync_seconds_count 4
corral_iod_bytes_total{direction="in"} 0
`),
	}
	after := map[string]map[string]float64{
		"meta": scrape(`corral_meta_operations_total{op="create",result="ok"} 110
corral_meta_operations_total{op="getattr",result="ok"} 7
corral_replog_wal_fsync_seconds_sum 0.7
corral_replog_wal_fsync_seconds_count 150
corral_replog_commit_seconds_sum 0.3
corral_replog_commit_seconds_count 100
process_cpu_seconds_total 1.5
`),
		"iod": scrape(`corral_iod_object_fsync_seconds_count 204
corral_iod_bytes_total{direction="in"} 409600
`),
	}
	b := breakdown(before, after, 100, 1000, 4)
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("client µs", b.ClientUs, 4000) // 4 in flight at 1000/s
	near("meta req/op", b.MetaReqs, 1.02)
	near("WAL fsyncs/op", b.WALFsyncs, 0.5)
	near("WAL fsync µs", b.WALFsyncUs, 4000)
	near("propose->commit µs", b.CommitUs, 3000)
	near("iod fsyncs/op", b.IODFsyncs, 2)
	near("iod bytes/op", b.IODBytes, 4096)
	near("meta CPU µs/op", b.MetaCPUUs, 5000)
	if got := fmtByOp(b.MetaByOp); got != "create 1.00" {
		t.Errorf("meta requests by type: %q, want only create (getattr is below 0.05 per op)", got)
	}
	b.Target, b.Layout, b.Phase = "lib (3)", "private", "create"
	md := breakdownMarkdown([]Breakdown{b})
	if !strings.Contains(md, "| lib (3) | private | create | 4000 | 1.02 |") {
		t.Errorf("breakdown table:\n%s", md)
	}
}
