package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/testbed"
)

// saturationEnv, set to a duration ("5m"), runs the saturation test for
// that long instead of its short form.
const saturationEnv = "CORRAL_SATURATION"

// TestSaturatedLinksNoStale: more writers than the I/O servers' shaped
// links carry (4 servers at 20 Mbit/s, 8 writers, replicas 2, each write
// forwarded server to server over the same links) for a bounded time:
// every write is acknowledged, no copy is marked stale (none is healed),
// no head reports a copy that missed a write, and every byte reads back.
// A busy server behind a saturated link is slow, not dead. Short form
// about 40 s of writing; CORRAL_SATURATION=5m for a longer one. Subnet
// 10.94.0.0/24 is this test's alone.
func TestSaturatedLinksNoStale(t *testing.T) {
	lab.Need(t, lab.Netns)
	if oldBuild() {
		t.Skip("runs this tree's build only")
	}
	dur := 40 * time.Second
	if v := os.Getenv(saturationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 5m", saturationEnv, v)
		}
		dur = d
	}
	const (
		servers = 4
		writers = 8
		size    = 4 << 20
		rate    = "20mbit"
	)
	name := fmt.Sprintf("sat%d", time.Now().UnixNano()%10000)
	hosts := []string{"meta"}
	for i := 1; i <= servers; i++ {
		hosts = append(hosts, fmt.Sprintf("iod%d", i))
	}
	spec := testbed.NewSpecOn(name, netip.MustParsePrefix("10.94.0.0/24"), hosts, rate)
	spec.Hosts[0].Rate = "" // meta: not what is measured
	testbed.Down(name)
	// Down before Up's error is looked at: a half-made bed is removed too.
	t.Cleanup(func() { testbed.Down(name) })
	bed, err := testbed.Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(h string) string { x, _ := bed.Host(h); return x.Addr.String() }
	ctx, cancel := context.WithTimeout(context.Background(), dur+10*time.Minute)
	defer cancel()
	var listens []string
	for i := 1; i <= servers; i++ {
		listens = append(listens, addr(fmt.Sprintf("iod%d", i))+":7410")
	}
	fsys, err := launch.StartFSWrapped(ctx, pfstest.Binary(t), t.TempDir(), addr("meta")+":7400", listens, bed.Wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fsys.Stop)
	meta := fsys.Meta.Addr
	fs := func(args ...string) string {
		out, err := exec.CommandContext(ctx, pfstest.Binary(t), append([]string{"fs", "--meta", meta}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("corral fs %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	fs("mkdir", "/r")
	fs("layout", "set", "/r", "--replicas", "2")

	// content is file i's bytes: regenerated to check, not kept.
	content := func(i int) []byte {
		b := make([]byte, size)
		r := rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), byte(i >> 16)})
		r.Read(b)
		return b
	}
	cl := client.New(meta)
	t.Cleanup(cl.Close)
	var (
		mu      sync.Mutex
		written []int
		errs    []string
		longest time.Duration
		next    int
	)
	deadline := time.Now().Add(dur)
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
				t0 := time.Now()
				err := cl.WriteFile(wctx, fmt.Sprintf("/r/f%d", i), bytes.NewReader(content(i)), 0o644, client.CreateOpts{}, nil)
				wcancel()
				d := time.Since(t0)
				mu.Lock()
				longest = max(longest, d)
				if err != nil {
					errs = append(errs, fmt.Sprintf("/r/f%d: %v", i, err))
				} else {
					written = append(written, i)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d writers, %d files of %d MiB acknowledged in %v (%.1f MB/s written, 2 copies each, over %d links at %s); longest file %v; %d errors",
		writers, len(written), size>>20, took.Round(time.Second), float64(len(written)*size)/1e6/took.Seconds(), servers, rate, longest.Round(time.Millisecond), len(errs))
	for _, e := range errs {
		t.Errorf("write error under load: %s", e)
	}
	if len(written) < writers {
		t.Fatalf("only %d files written in %v: the links did not carry the load at all", len(written), dur)
	}

	// No copy was marked stale: none stale now, none healed since.
	var figs []serverFigures
	if err := json.Unmarshal([]byte(fs("servers", "--json")), &figs); err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		if f.Stale != 0 || f.Healed != 0 {
			t.Errorf("server %d: %d bytes stale, %d healed: a copy was marked stale under load alone", f.ID, f.Stale, f.Healed)
		}
	}
	for _, p := range fsys.IODs {
		b, _ := os.ReadFile(p.Log)
		if n := strings.Count(string(b), "replica missed a write"); n > 0 {
			// Say why, from the log (a temporary directory, gone after).
			var why []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "replica missed a write") && len(why) < 3 {
					why = append(why, l)
				}
			}
			t.Errorf("%s: %d writes a copy missed under load alone; log %s, first: %s", p.Name, n, filepath.Base(p.Log), strings.Join(why, " | "))
		}
	}

	// Every byte reads back, through a fresh client.
	rd := client.New(meta)
	t.Cleanup(rd.Close)
	for _, i := range written {
		p := fmt.Sprintf("/r/f%d", i)
		f, err := rd.Open(ctx, p)
		if err != nil {
			t.Errorf("open %s: %v", p, err)
			continue
		}
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			continue
		}
		if want := content(i); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the %d acknowledged", p, diff(got, want), len(want))
		}
	}
}
