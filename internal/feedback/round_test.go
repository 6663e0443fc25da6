package feedback

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestPoolsAgent: the shared round over real load endpoints (LoadHandler
// on 127.0.71.21 and .22): the second round has terms for both; PollAt
// reaches a server's endpoint at its own address; a server that left the
// pool leaves the controller; Retain drops a pool.
func TestPoolsAgent(t *testing.T) {
	for _, a := range []string{"127.0.71.21:7190", "127.0.71.22:7191"} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: LoadHandler(LocalConfig{Interface: "lo"}), ReadHeaderTimeout: time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	p := NewPools(RoundConfig{Source: "agent", Interval: 200 * time.Millisecond, Timeout: time.Second, AgentPort: 7190,
		Controller: ControllerConfig{Interval: 200 * time.Millisecond, Options: Options{BandwidthOverride: 1e9}}})
	defer p.Close()
	addrs := []string{"127.0.71.21:8080", "127.0.71.22:8080"}
	at := map[string]string{"127.0.71.22:8080": "127.0.71.22:7191"}
	ctx := context.Background()
	var ds []Decision
	for i := 0; i < 2; i++ {
		var ok bool
		var err error
		if ds, ok, err = p.PollAt(ctx, "www", addrs, at); !ok || err != nil {
			t.Fatalf("round %d: ok %v, %v", i, ok, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(ds) != 2 {
		t.Fatalf("decisions %+v", ds)
	}
	for _, d := range ds {
		if d.Terms == nil || d.Missed != 0 {
			t.Fatalf("%s: no terms on the second round: %+v", d.Node, d)
		}
	}
	// Without PollAt's address, .22 is polled at the agent port, where
	// nothing listens: it misses.
	ds, _, _ = p.Poll(ctx, "www", addrs[1:])
	if len(ds) != 1 || ds[0].Node != addrs[1] || ds[0].Missed != 1 {
		t.Fatalf("after .21 left and .22 at the wrong port: %+v", ds)
	}
	st := p.Status()
	if len(st) != 1 || len(st[0].Nodes) != 1 || st[0].Nodes[0].Terms == nil {
		t.Fatalf("status keeps .22's latest terms: %+v", st)
	}
	p.Retain(func(string) bool { return false })
	if len(p.Status()) != 0 {
		t.Fatal("Retain kept a pool")
	}
	// A cancelled round is no round.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok, _ := p.Poll(cctx, "www", addrs); ok {
		t.Fatal("a cancelled round counted")
	}
}
