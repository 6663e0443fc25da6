package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
)

// zipfLua makes wrk ask for /z/0 .. /z/N-1 with Zipf probabilities (rank
// r with weight 1/(r+1)^S), by inverting the CDF.
const zipfLua = `
local n, s = %d, %g
local cdf, sum = {}, 0
for i = 1, n do sum = sum + 1 / i ^ s; cdf[i] = sum end
for i = 1, n do cdf[i] = cdf[i] / sum end
local seeded = false
request = function()
  if not seeded then math.randomseed(os.time() + math.floor(os.clock() * 1e6)); seeded = true end
  local u, lo, hi = math.random(), 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return wrk.format("GET", "/z/" .. (lo - 1))
end
`

// TestZipfThroughput measures requests/s for 4 KiB files drawn from a
// Zipf distribution over 10^4 files, with the data cache off and on. A
// measurement, not a check: it runs only with NODE_ZIPF=1 and needs wrk.
//
//	NODE_ZIPF=1 go test -count=1 -run TestZipfThroughput -v ./internal/node
//
// NODE_ZIPF_S (default 1.0), NODE_ZIPF_DURATION (10s), NODE_ZIPF_CONNS (64);
// NODE_ZIPF_PROFILE=FILE writes the node's CPU profile with the cache on.
func TestZipfThroughput(t *testing.T) {
	if os.Getenv("NODE_ZIPF") == "" {
		t.Skip("a measurement: NODE_ZIPF=1 runs it")
	}
	lab.Need(t, lab.Tool("wrk"))
	const files, size = 10000, 4096
	zs := 1.0
	if v := os.Getenv("NODE_ZIPF_S"); v != "" {
		zs, _ = strconv.ParseFloat(v, 64)
	}
	dur := 10 * time.Second
	if v := os.Getenv("NODE_ZIPF_DURATION"); v != "" {
		dur, _ = time.ParseDuration(v)
	}
	conns := 64
	if v := os.Getenv("NODE_ZIPF_CONNS"); v != "" {
		conns, _ = strconv.Atoi(v)
	}

	fsys := pfstest.Start(t, 2)
	cl := client.New(fsys.Meta.Addr)
	t.Cleanup(cl.Close)
	ctx := context.Background()
	if err := cl.MkdirAll(ctx, "/www/a.test/z", 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			data := make([]byte, size)
			for i := w; i < files; i += 8 {
				copy(data, fmt.Sprintf("file %d\n", i))
				f, err := cl.CreatePath(ctx, fmt.Sprintf("/www/a.test/z/%d", i), 0o644, client.CreateOpts{})
				if err != nil {
					t.Error(err)
					return
				}
				f.WriteAt(data, 0)
				if err := f.Close(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("wrote %d files of %d bytes in %v", files, size, time.Since(start).Round(time.Millisecond))
	script := filepath.Join(t.TempDir(), "zipf.lua")
	if err := os.WriteFile(script, fmt.Appendf(nil, zipfLua, files, zs), 0o644); err != nil {
		t.Fatal(err)
	}

	rps := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	for _, dc := range []int64{0, DefaultDataCache, 8 << 20, 0} {
		s := New(Config{Meta: fsys.Meta.Addr, DefaultDomain: "a.test", DataCache: dc, Log: slog.New(slog.DiscardHandler)})
		sctx, cancel := context.WithCancel(ctx)
		addrc := make(chan string, 1)
		done := make(chan error, 1)
		go func() { done <- s.Serve(sctx, "127.0.0.1:0", func(a string) { addrc <- a }) }()
		var addr string
		select {
		case addr = <-addrc:
		case err := <-done:
			t.Fatal(err)
		}
		if pf := os.Getenv("NODE_ZIPF_PROFILE"); pf != "" && dc == DefaultDataCache {
			// The node's CPU profile with the cache on (it shares this
			// process with the test; meta and the iods are other processes).
			f, err := os.Create(pf)
			if err != nil {
				t.Fatal(err)
			}
			pprof.StartCPUProfile(f)
			defer f.Close()
		}
		out, err := exec.Command("wrk", "-H", "Host: a.test", "-t", "2", "-c", strconv.Itoa(conns), "-d", dur.String(), "-s", script, "http://"+addr+"/").CombinedOutput()
		pprof.StopCPUProfile() // nothing if none was started
		cancel()
		<-done
		s.Close()
		if err != nil {
			t.Fatalf("wrk: %v: %s", err, out)
		}
		m := rps.FindSubmatch(out)
		if m == nil {
			t.Fatalf("wrk output without Requests/sec: %s", out)
		}
		hit := "-"
		if s.cache != nil {
			h, ms := s.cache.hits.Load(), s.cache.misses.Load()
			hit = fmt.Sprintf("%.1f%% (%d files, %d MB)", 100*float64(h)/float64(h+ms), s.cache.len(), s.cache.used.Load()>>20)
		}
		t.Logf("zipf s=%g over %d files of 4 KiB, %d conns, %v: --data-cache %dM: %s req/s, hit ratio %s", zs, files, conns, dur, dc>>20, m[1], hit)
	}
}
