package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/qos"
)

const qosGood = `qos gold {
    priority 10
    network 10.0.0.0/8 192.168.1.7
    prefix /shop
    regex ^/api/v[0-9]{1,2}/
    path /img/ /logo.png
    domain gold.example.org
    user alice
    header X-Tier: gold
    rate 100 burst=20
    concurrency 20
    overload queue deadline=2s retry-after=3 queue=50
}
qos bulk { priority 1; prefix /downloads; overload reject retry-after=5 }
qos default { overload queue deadline=500ms }
service web {
    vip 127.0.0.100:8081
    dataplane l7
    qos gold bulk
    qos-per-server 8
    qos-reserve 2
    server 127.0.0.21:8080
    server 127.0.0.22:8080
    server 127.0.0.23:8080 weight=0
}
`

func TestQoSParse(t *testing.T) {
	d, err := Parse("d.conf", []byte(qosGood))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.QoS) != 3 {
		t.Fatalf("%d classes", len(d.QoS))
	}
	g := d.QoS[0]
	want := qos.Spec{Name: "gold", Priority: 10, Line: 1,
		Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")},
		Prefixes: []string{"/shop"}, Regex: "^/api/v[0-9]{1,2}/", Paths: []string{"/img/", "/logo.png"},
		Domains: []string{"gold.example.org"}, Users: []string{"alice"}, Header: "X-Tier: gold",
		Rate: 100, Burst: 20, Concurrency: 20, Overload: qos.Queue, Deadline: 2 * time.Second, RetryAfter: 3, QueueMax: 50}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("gold:\n got %+v\nwant %+v", g, want)
	}
	b := d.QoS[1]
	if b.Name != "bulk" || b.Priority != 1 || b.Overload != qos.Reject || b.RetryAfter != 5 || b.Prefixes[0] != "/downloads" || b.Line != 14 {
		t.Fatalf("bulk %+v", b)
	}
	if d.QoS[2].Deadline != 500*time.Millisecond {
		t.Fatalf("default %+v", d.QoS[2])
	}
	s := &d.Services[0]
	if s.QoSLimit() != 16 || s.QoSReserveSlots() != 4 || len(d.QoSClasses(s)) != 3 {
		t.Fatalf("limit %d, classes %d", s.QoSLimit(), len(d.QoSClasses(s)))
	}
	if _, err := qos.Compile(d.QoSClasses(s)); err != nil {
		t.Fatal(err)
	}
	off, err := Parse("d.conf", []byte(qosGood+"service x {\n vip 127.0.0.100:81\n dataplane l7\n qos off\n}\n"))
	if err != nil || !off.Services[1].QoSOff || off.QoSClasses(&off.Services[1]) != nil {
		t.Fatalf("qos off: %v %+v", err, off.Services[1])
	}
	if again, err := Parse("d.conf", []byte(Format(off))); err != nil || !again.Services[1].QoSOff {
		t.Fatalf("qos off does not round-trip: %v", err)
	}
	// Round trip.
	again, err := Parse("d.conf", []byte(Format(d)))
	if err != nil {
		t.Fatalf("%v\n%s", err, Format(d))
	}
	if !sameQoS(d.QoS, again.QoS) || !reflect.DeepEqual(again.Services[0].QoS, s.QoS) || again.Services[0].QoSPerServer != 8 || again.Services[0].QoSReserve != 2 {
		t.Fatalf("round trip:\n%+v\n%+v\n%s", d.QoS, again.QoS, Format(d))
	}
}

// sameQoS compares classes, lines aside.
func sameQoS(a, b []qos.Spec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Line, y.Line = 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestQoSErrors(t *testing.T) {
	svc := "service w {\n vip 127.0.0.1:80\n dataplane l7\n qos gold\n}\n"
	cases := []struct{ conf, want string }{
		{"qos gold {\n priority x\n}\n", "c:2: qos gold: priority: \"x\": want an integer"},
		{"qos gold {\n network 10.0.0/8\n}\n", "c:2: qos gold: network: \"10.0.0/8\": want a network"},
		{"qos gold {\n regex (\n}\n", "c:2: qos gold: regex: \"(\": not an RE2 expression"},
		{"qos gold {\n header NoColon\n}\n", "c:2: qos gold: header: \"NoColon\": want Name: value"},
		{"qos gold {\n rate -1\n}\n", "c:2: qos gold: rate: \"-1\": want requests per second"},
		{"qos gold {\n overload drop\n}\n", "c:2: qos gold: overload: want: overload queue|reject"},
		{"qos gold {\n overload reject deadline=1s\n}\n", "c:2: qos gold: overload: deadline \"1s\": only with overload queue"},
		{"qos gold {\n bogus 1\n}\n", "c:2: qos gold: bogus: unknown field"},
		{"qos gold {\n prefix /a\n", "c:1: qos gold: not closed"},
		{"qos gold { }\nqos gold { }\n", "c:2: qos: class \"gold\" already defined on line 1"},
		{"qos g/x { }\n", "c:1: qos: \"g/x\": a class name"},
		{"qos default { prefix /a }\n", "c:1: qos default: the default class"},
		{"qos gold { prefix /a\nservice w {\n", "c:2: service: the qos block gold is not closed"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n qos gold\n}\n", "c:4: service w: qos: only the l7 dataplane"},
		{svc, "c:4: service w: qos: no qos classes are defined"},
		{"qos silver { }\n" + svc, "c:5: service w: qos: class \"gold\" is not defined"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-inflight 0\n}\n", "c:5: service w: qos-inflight: \"0\": want 1..1048576"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-reserve -1\n}\n", "c:5: service w: qos-reserve: \"-1\": want 0..1048576"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-per-server 2\n qos-reserve 2\n}\n", "c:5: service w: qos: qos-reserve 2: want fewer than qos-per-server (2)"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-reserve 32\n}\n", "c:5: service w: qos: qos-reserve 32: want fewer than qos-per-server (32)"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-reserve x\n}\n", "c:5: service w: qos-reserve: \"x\": want 0..1048576 requests per server"},
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-per-server 1048577\n}\n", "c:5: service w: qos-per-server: \"1048577\": want 1..1048576 requests"},
		// Both limits: one would be ignored (qos-inflight won silently before).
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-inflight 64\n qos-per-server 8\n}\n", "c:5: service w: qos: qos-per-server 8 and qos-inflight 64: give one"},
		// A reserve per server of the whole fixed limit or more leaves the
		// lower classes nothing whatever the pool (it was cut to limit-1).
		{"qos gold { }\nservice w {\n vip 127.0.0.1:80\n dataplane l7\n qos-inflight 4\n qos-reserve 4\n}\n", "c:5: service w: qos: qos-reserve 4: want fewer than qos-inflight (4)"},
	}
	for _, c := range cases {
		_, err := Parse("c", []byte(c.conf))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("config %q:\n got %v\nwant %s...", c.conf, err, c.want)
		}
	}
}

func FuzzParseQoS(f *testing.F) {
	f.Add([]byte(qosGood))
	f.Add([]byte("qos a { priority 3; user x y; header A: b c; rate 0.5 }\nqos b {\n domain x.org\n path /a\n}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse("fuzz", b)
		if err != nil {
			if l, ok := err.(Errors); !ok || len(l) == 0 {
				t.Fatalf("error without a place: %v", err)
			}
			return
		}
		if _, err := qos.Compile(d.QoS); err != nil {
			t.Fatalf("accepted classes that do not compile: %v", err)
		}
		again, err := Parse("fuzz", []byte(Format(d)))
		if err != nil || !sameQoS(d.QoS, again.QoS) {
			t.Fatalf("qos does not round-trip: %v\n%s", err, Format(d))
		}
	})
}
