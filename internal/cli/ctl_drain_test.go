package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/director"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// TestCtlDrainSurvivesKill: a `ctl drain` is still in force after the
// director is killed (-9) and started again, as a restart by corral up or
// a rolling upgrade does; `ctl enable` undoes it for good.
func TestCtlDrainSurvivesKill(t *testing.T) {
	bin := pfstest.Binary(t)
	confDir := t.TempDir()
	admin := loopbackAddr(t)
	conf := filepath.Join(confDir, "director.conf")
	a, b := loopbackAddr(t), loopbackAddr(t)
	text := fmt.Sprintf("admin %s\nservice www {\n  vip %s\n  scheduler rr\n  check none\n  server %s\n  server %s\n}\n", admin, loopbackAddr(t), a, b)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() *launch.Proc {
		p, err := launch.Start(context.Background(), "director", bin, filepath.Join(confDir, "director.log"), "director", "--config", conf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop() })
		return p
	}
	p := start()
	tokenFile := director.DefaultTokenFile(conf)
	ctl := func(args ...string) (string, string, bool) {
		return ctlRun(t, bin, t.TempDir(), nil, append([]string{"ctl", "--admin", admin, "--token-file", tokenFile}, args...)...)
	}
	weights := func() map[string]float64 {
		t.Helper()
		out, stderr, ok := ctl("services", "--json")
		if !ok {
			t.Fatalf("services --json: %s", stderr)
		}
		var st []map[string]any
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
			t.Fatalf("services --json: %v in %q", err, out)
		}
		w := map[string]float64{}
		for _, s := range st[0]["servers"].([]any) {
			m := s.(map[string]any)
			w[m["addr"].(string)] = m["weight"].(float64)
		}
		return w
	}
	if out, stderr, ok := ctl("drain", "www", a); !ok || !strings.Contains(out, "restart") {
		t.Fatalf("drain: ok=%v %q %s, want it to say the drain lasts across restarts", ok, out, stderr)
	}
	if _, stderr, ok := ctl("weight", "www", b, "3"); !ok {
		t.Fatalf("weight: %s", stderr)
	}
	p.Kill()
	p = start()
	if w := weights(); w[a] != 0 || w[b] != 3 {
		t.Fatalf("after kill -9 and a restart: weights %v, want %s drained (0) and %s at 3", w, a, b)
	}
	if fi, err := os.Stat(director.OverridesFile(tokenFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the run-time weights' file: %v %v, want mode 0600", fi, err)
	}
	if _, stderr, ok := ctl("enable", "www", a); !ok {
		t.Fatalf("enable: %s", stderr)
	}
	p.Kill()
	start()
	if w := weights(); w[a] != 1 {
		t.Fatalf("after enable and a restart: weights %v, want %s back at 1", w, a)
	}
}
