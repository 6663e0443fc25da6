package clustercfg

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
)

// TestDirectorViewQoS: the station's classes reach the director; an l7
// service gets the classes it lists, one listing none gets none, and an
// l4 service's list is not the director's business.
func TestDirectorViewQoS(t *testing.T) {
	c := &Config{
		Directors: []Director{{Name: "d1"}},
		Services: []Service{
			{Name: "shop", VIP: "127.0.51.100:80", Dataplane: "l7", QoS: []string{"gold"}, Servers: []RealServer{{Address: "127.0.51.21:80"}}},
			{Name: "plain", VIP: "127.0.51.101:80", Dataplane: "l7", Servers: []RealServer{{Address: "127.0.51.21:80"}}},
			{Name: "tcp", VIP: "127.0.51.102:80", QoS: []string{"gold"}, Servers: []RealServer{{Address: "127.0.51.21:80"}}},
		},
		QoS: []QoSClass{{Name: "gold", Priority: 10, Match: QoSMatch{Networks: []string{"10.0.0.0/8"}, Prefixes: []string{"/shop"}, Header: "X-Tier: gold"},
			Rate: 100, Concurrency: 20, Deadline: "2s", RetryAfter: 3}},
	}
	d, err := DirectorView(c, "d1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.QoS) != 1 {
		t.Fatalf("classes %+v", d.QoS)
	}
	g := d.QoS[0]
	if g.Name != "gold" || g.Priority != 10 || g.Networks[0].String() != "10.0.0.0/8" || g.Prefixes[0] != "/shop" || g.Header != "X-Tier: gold" ||
		g.Rate != 100 || g.Concurrency != 20 || g.Overload != qos.Queue || g.Deadline != 2*time.Second || g.RetryAfter != 3 {
		t.Fatalf("gold %+v", g)
	}
	if got := d.QoSClasses(&d.Services[0]); len(got) != 1 || got[0].Name != "gold" {
		t.Fatalf("shop's classes %+v", got)
	}
	if got := d.QoSClasses(&d.Services[1]); got != nil {
		t.Fatalf("a service listing no class got %+v", got)
	}
	if got := d.QoSClasses(&d.Services[2]); got != nil || len(d.Services[2].QoS) != 0 {
		t.Fatalf("an l4 service got classes %+v", got)
	}
	// A class the director refuses is the station's error too.
	c.QoS[0].Deadline = "2h"
	if _, err := DirectorView(c, "d1", nil); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a 2h deadline: %v", err)
	}
}
