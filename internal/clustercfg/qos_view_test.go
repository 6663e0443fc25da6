package clustercfg

import (
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
	"github.com/corral-cluster/corral/internal/qos"
)

// TestDirectorViewQoS: the station's classes reach the director; an l7
// service gets the classes it lists, one listing none gets none, and an
// l4 service's list is not the director's business.
func TestDirectorViewQoS(t *testing.T) {
	c := &Config{
		Directors: []Director{{Name: "d1"}},
		Services: []Service{
			{Name: "shop", VIP: "127.0.51.100:80", Dataplane: "l7", QoS: []string{"gold"}, QoSPerServer: 8, QoSReserve: 2,
				Servers: []RealServer{{Address: "127.0.51.21:80"}, {Address: "127.0.51.22:80"}}},
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
	// The admission limits arrive: 8 per server x 2 servers, 2 x 2 kept
	// for gold.
	if sh := &d.Services[0]; sh.QoSPerServer != 8 || sh.QoSInflight != 0 || sh.QoSReserve != 2 || sh.QoSLimit() != 16 || sh.QoSReserveSlots() != 4 {
		t.Fatalf("shop's limits: per-server %d inflight %d reserve %d: limit %d, reserve slots %d",
			sh.QoSPerServer, sh.QoSInflight, sh.QoSReserve, sh.QoSLimit(), sh.QoSReserveSlots())
	}
	c.Services[0].QoSPerServer, c.Services[0].QoSInflight = 0, 50
	if d2, err := DirectorView(c, "d1", nil); err != nil || d2.Services[0].QoSInflight != 50 || d2.Services[0].QoSLimit() != 50 {
		t.Fatalf("qos-inflight 50: %v", err)
	}
	c.Services[0].QoSPerServer, c.Services[0].QoSInflight = 8, 0
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

// TestServiceQoSLimits: a service's qos-per-server, qos-inflight and
// qos-reserve take director.conf's values and rules, each error at its
// YAML path and line.
func TestServiceQoSLimits(t *testing.T) {
	doc := func(dataplane, qosList, limits string) string {
		return "qos:\n  - name: gold\n    priority: 10\n  - name: bulk\n    priority: 1\n" +
			"services:\n  - name: shop\n    vip: 10.0.0.1:80\n" + dataplane + qosList + limits +
			"    servers:\n      - address: 10.0.1.1:80\n      - address: 10.0.1.2:80\n"
	}
	const l7, list = "    dataplane: l7\n", "    qos: [gold, bulk]\n"
	for _, tc := range []struct {
		name, doc string
		want      string // "": accepted; else "LINE: PATH: message piece"
	}{
		{"none", doc(l7, list, ""), ""},
		{"per-server", doc(l7, list, "    qos-per-server: 8\n    qos-reserve: 7\n"), ""},
		{"inflight", doc(l7, list, "    qos-inflight: 100\n    qos-reserve: 99\n"), ""},
		{"reserve below the default", doc(l7, list, "    qos-reserve: 31\n"), ""},
		{"zero is the default", doc(l7, list, "    qos-per-server: 0\n    qos-reserve: 0\n"), ""},
		{"per-server range", doc(l7, list, "    qos-per-server: -1\n"), "11: services[0].qos-per-server: -1: want 1..1048576 requests"},
		{"inflight range", doc(l7, list, "    qos-inflight: 1048577\n"), "11: services[0].qos-inflight: 1048577: want 1..1048576 requests"},
		{"reserve range", doc(l7, list, "    qos-reserve: -1\n"), "11: services[0].qos-reserve: -1: want 0..1048576 requests per server"},
		{"reserve type", doc(l7, list, "    qos-reserve: one\n"), "11: services[0].qos-reserve: want an integer"},
		{"both limits", doc(l7, list, "    qos-inflight: 64\n    qos-per-server: 8\n"), "12: services[0].qos-per-server: qos-per-server 8 and qos-inflight 64: give one"},
		{"reserve = per-server", doc(l7, list, "    qos-per-server: 8\n    qos-reserve: 8\n"), "12: services[0].qos-reserve: qos-reserve 8: want fewer than qos-per-server (8): the lower classes need a slot"},
		{"reserve = default per-server", doc(l7, list, "    qos-reserve: 32\n"), "11: services[0].qos-reserve: qos-reserve 32: want fewer than qos-per-server (32)"},
		{"reserve = inflight", doc(l7, list, "    qos-inflight: 4\n    qos-reserve: 4\n"), "12: services[0].qos-reserve: qos-reserve 4: want fewer than qos-inflight (4)"},
		{"l4", doc("", list, "    qos-per-server: 8\n"), "10: services[0].qos-per-server: only the l7 dataplane has admission limits (this service is l4)"},
		{"xdp", doc("    dataplane: xdp\n", list, "    qos-reserve: 1\n"), "11: services[0].qos-reserve: only the l7 dataplane has admission limits (this service is xdp)"},
		{"no classes listed", doc(l7, "", "    qos-inflight: 64\n"), "10: services[0].qos-inflight: the service lists no qos classes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("q.yaml", []byte(tc.doc))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused:\n%v\n%s", err, tc.doc)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", c.Services[0])
			}
			if !strings.Contains(err.Error(), "q.yaml:"+tc.want) {
				t.Fatalf("got\n%v\nwant q.yaml:%s...", err, tc.want)
			}
		})
	}
}

// TestImportQoSLimits: corral cfg import keeps a director.conf service's
// admission limits (TestImport checks the whole file comes back the same).
func TestImportQoSLimits(t *testing.T) {
	orig, err := config.Load("testdata/import/qos.conf")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Import(orig)
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"    qos-per-server: 8\n    qos-reserve: 2\n", "    qos-inflight: 100\n    qos-reserve: 10\n"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("imported YAML lacks %q:\n%s", want, y)
		}
	}
	c2, err := Parse("imported.yaml", y)
	if err != nil {
		t.Fatalf("imported config refused: %v\n%s", err, y)
	}
	d, err := DirectorView(c2, "director1", nil)
	if err != nil {
		t.Fatal(err)
	}
	shop, api := d.Services[0], d.Services[1]
	if shop.QoSLimit() != 16 || shop.QoSReserveSlots() != 4 || api.QoSLimit() != 100 || api.QoSReserveSlots() != 10 {
		t.Fatalf("limits after import: shop %d/%d, api %d/%d", shop.QoSLimit(), shop.QoSReserveSlots(), api.QoSLimit(), api.QoSReserveSlots())
	}
}
