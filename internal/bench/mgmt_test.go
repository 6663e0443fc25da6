package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0.5: 5, 0.99: 10, 0.1: 1, 0: 1, 1: 10} {
		if got := quantile(s, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing")
	}
}

func TestMgmtMarkdown(t *testing.T) {
	r := &MgmtResult{Nodes: 10, ApplyMs: []float64{10, 20}, P50ms: 10, P99ms: 1200, MaxMs: 20, BigServices: 1000, BigServers: 10000,
		BigApplyMs: 900, Before: LoadStats{Requests: 100, P99ms: 1.5}, During: LoadStats{Requests: 90, P99ms: 3.25}}
	md := r.Markdown()
	for _, want := range []string{"| 10 | 2 | 10.0 | 1200.0 | 20.0 | <= 1000 ms: missed |", "1000 services, 10000 real servers", "| during the apply | 90 | 0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestMgmtQuick runs `corral bench mgmt --quick`'s scenario for real
// (station, agents, director, nodes): every apply reaches every member and
// the big configuration costs no request.
func TestMgmtQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a managed cluster")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunMgmt(ctx, MgmtConfig{Bin: pfstest.Binary(t), Dir: t.TempDir(), Out: out, Net: "127.0.59", Nodes: 3, Applies: 5,
		BigServices: 100, BigServers: 10, LoadBefore: 2 * time.Second, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply p50 %.1f ms p99 %.1f ms; big: %.0f ms, p99 before %.2f ms during %.2f ms", res.P50ms, res.P99ms, res.BigApplyMs, res.Before.P99ms, res.During.P99ms)
	if len(res.ApplyMs) != 5 || res.BigServers != 1000 || res.BigApplyMs < 0 || res.BigDirectorMs < 0 {
		t.Fatalf("result: %+v", res)
	}
	if res.Before.Errors+res.During.Errors > 0 || res.During.Requests == 0 {
		t.Errorf("requests failed: before %+v during %+v", res.Before, res.During)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back MgmtResult
	if err := json.Unmarshal(b, &back); err != nil || len(back.ApplyMs) != 5 {
		t.Fatalf("results.json: %v", err)
	}
	for _, f := range []string{"results.md", "mgmt.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
