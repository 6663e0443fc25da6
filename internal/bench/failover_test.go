package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/ha"
	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/testbed"
)

// TestFailoverTools (10.84.0.128/25: internal/testbed's ECMP test has the
// lower half) checks the measuring tools on a bed without directors:
// hosts d1 and d2 reach a "VIP" held by node1 through a route (their frames
// carry the VIP and node1's MAC, as a forwarding director's do), so the
// capture must see them as forwarding, one after the other or both at once;
// the fleet and the open-loop generator run against a server on node1.
func TestFailoverTools(t *testing.T) {
	lab.Need(t, lab.Netns)
	name := fmt.Sprintf("h4t%d", time.Now().UnixNano()%10000)
	bed, err := testbed.Up(testbed.NewSpecOn(name, netip.MustParsePrefix("10.84.0.128/25"), []string{"client", "d1", "d2", "node1"}, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Down(name) })
	vip := netip.MustParseAddr("10.84.0.200")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := bed.IP("node1", "addr", "add", vip.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"client", "d1", "d2"} {
		if err := bed.RouteVia(h, vip, "node1"); err != nil {
			t.Fatal(err)
		}
	}
	l, err := bed.Listen(ctx, "node1", "tcp", vip.String()+":80")
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", "node1")
		http.ServeContent(w, r, "x.bin", time.Time{}, bytes.NewReader(body))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	capt, err := StartCapture(bed, vip, "d1", "d2")
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Close()
	target := vip.String() + ":80"
	burst := func(h string) {
		for range 3 {
			if err := oneShot(bed.DialContext(h), target, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2*time.Second); err != nil {
				t.Fatalf("%s: %v", h, err)
			}
		}
	}
	t0 := time.Now()
	burst("d1")
	time.Sleep(50 * time.Millisecond)
	t1 := time.Now()
	burst("d2")
	time.Sleep(50 * time.Millisecond)
	t2 := time.Now()
	if n := capt.Frames("d1", t0, t1); n < 6 {
		t.Fatalf("d1 sent %d frames to the VIP, want some", n)
	}
	if n := capt.Frames("d1", t1, t2); n != 0 {
		t.Fatalf("d1: %d frames while it was quiet", n)
	}
	at, who, ok := capt.First(t1, "d1")
	if !ok || who != "d2" || at.Before(t1) || at.Sub(t1) > time.Second {
		t.Fatalf("first frame after d1 stopped: %v %s %v", at, who, ok)
	}
	if ov, _ := capt.SplitBrain(t0, t2, 10*time.Millisecond); len(ov) != 0 {
		t.Fatalf("one after the other reported as split brain: %v", ov[0])
	}
	// Both at once: interleaved frames must be reported.
	t3 := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 40; i++ {
			oneShot(bed.DialContext("d1"), target, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2*time.Second)
		}
	}()
	for i := 0; i < 40; i++ {
		oneShot(bed.DialContext("d2"), target, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2*time.Second)
	}
	<-done
	time.Sleep(20 * time.Millisecond)
	if ov, near := capt.SplitBrain(t3, time.Now(), 10*time.Millisecond); len(ov) == 0 || near == 0 {
		t.Fatalf("d1 and d2 at once: no overlap found (%d near)", near)
	}
	if d := capt.Destinations("d1"); len(d) != 1 {
		t.Fatalf("d1's frames went to %v, want node1's MAC only", d)
	}

	// The fleet and the open-loop generator, through a 300 ms outage of
	// node1's link: every connection survives, new ones during it are slow
	// or fail, none after.
	fleet, err := StartFleet(ctx, FleetConfig{Dial: bed.DialContext("client"), Target: target, Path: "/x.bin", Host: "x",
		Conns: 20, Chunk: 8192, Interval: 20 * time.Millisecond, Timeout: 5 * time.Second, Span: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Stop()
	ol := StartOpenLoop(ctx, bed.DialContext("client"), target, "x", "/", 50, 3*time.Second, 20*time.Second)
	defer ol.Stop()
	time.Sleep(2500 * time.Millisecond)
	ev := time.Now()
	bed.LinkDown("node1")
	time.Sleep(300 * time.Millisecond)
	bed.LinkUp("node1")
	back := time.Now()
	time.Sleep(3 * time.Second)
	s := fleet.Survival(ev, back.Add(1500*time.Millisecond))
	if s.Established != 20 || s.Survived != 20 {
		t.Fatalf("fleet over a 300 ms outage: %+v", s)
	}
	base, gap, stalled, rec := fleet.Bytes.Stall(ev, back)
	if base <= 0 || gap < 200*time.Millisecond || stalled <= 0 {
		t.Fatalf("stall: base %.0f B/s, gap %v, stalled %.0f B, recovered after %v", base, gap, stalled, rec)
	}
	t.Logf("fleet: %+v; base %.1f MB/s, gap %v, stalled %.1f MB, back to 90%% after %v", s, base/1e6, gap, stalled/1e6, rec)
	ol.Stop()
	after := ol.Count(back.Add(1500*time.Millisecond), time.Now())
	if after.Tried < 30 || after.Failed != 0 {
		t.Fatalf("new connections after the outage: %+v", after)
	}
	during := ol.Count(ev, back)
	t.Logf("new connections: during %+v, after %+v", during, after)
}

// TestHAConf: the configuration the HA bed writes is one the director
// takes (its ha block and service), without root.
func TestHAConf(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ha.key")
	if err := os.WriteFile(key, bytes.Repeat([]byte("k"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ha.ActiveStandby, ha.ActiveActive} {
		hb := &HABed{Cfg: HABedConfig{Mode: mode, LeaseTTL: 2 * time.Second, Scheduler: "rr"},
			VIP: netip.MustParseAddrPort("10.83.0.100:80"), EtcdURL: "http://10.83.0.1:7601", KeyFile: key,
			Cluster: &launch.Cluster{FS: &launch.FS{Meta: &launch.Proc{Addr: "10.83.0.20:7400"}},
				Cfg: launch.ClusterConfig{Check: "http port=9080 path=/healthz status=200 interval=300ms timeout=200ms rise=1 fall=2",
					NodeListen: []string{"10.83.0.15:80", "10.83.0.16:80"}}}}
		d := &HADirector{Name: "d2", Addr: netip.MustParseAddr("10.83.0.13"), Dir: filepath.Join(dir, mode), Priority: 100}
		d.Conf = filepath.Join(d.Dir, "director.conf")
		if err := hb.writeConf(d); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(d.Conf)
		if err != nil {
			b, _ := os.ReadFile(d.Conf)
			t.Fatalf("%v\n%s", err, b)
		}
		if c.HA == nil || c.HA.Name != "d2" || c.HA.Mode != mode || c.HA.Sync != "10.83.0.13:7700" || len(c.Services) != 1 {
			t.Fatalf("%s: parsed %+v", mode, c.HA)
		}
	}
}
