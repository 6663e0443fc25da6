package testbed

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/feedback"
)

// TestSNMPDPerHost: a real snmpd in each of two hosts' namespaces, read
// from the machine with feedback's poller: each answers for its own eth0
// (the override is the host's shaped rate), and Down leaves nothing.
func TestSNMPDPerHost(t *testing.T) {
	needRoot(t)
	const name = "h7snmp"
	Down(name)
	spec := NewSpecOn(name, netip.MustParsePrefix("10.88.0.0/24"), []string{"node1", "node2"}, "")
	spec.Hosts[0].Rate = "100mbit"
	bed, err := Up(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Down(name)
		if l := leftovers(name); len(l) > 0 {
			t.Errorf("left after Down: %v", l)
		}
	})
	ctx := context.Background()
	var targets []feedback.Target
	for _, h := range []string{"node1", "node2"} {
		s, err := bed.StartSNMPD(ctx, h, SNMPConfig{Port: 16188, Community: "h7bed", Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		targets = append(targets, feedback.Target{Node: h, Addr: s.Addr, Community: "h7bed", IfName: "eth0"})
	}
	p, err := feedback.NewPoller(feedback.PollerConfig{Timeout: 300 * time.Millisecond}, targets)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var rs []feedback.Reading
	for i := 0; i < 30; i++ {
		rs = p.Poll(ctx)
		if rs[0].Err == nil && rs[1].Err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Node, r.Err)
		}
	}
	if rs[0].Sample.IfSpeed != 100e6 || rs[1].Sample.IfSpeed != 1e9 {
		t.Errorf("ifSpeed node1 %d (want 100 Mbit/s, its rate), node2 %d (want 1 Gbit/s)", rs[0].Sample.IfSpeed, rs[1].Sample.IfSpeed)
	}
}
