package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestConnLimits: max-conns and max-conns-per-source are read, default
// sanely when not given, and every bad value or combination is an error
// at its file, line and field.
func TestConnLimits(t *testing.T) {
	svc := func(body string) string {
		return "service s {\n vip 127.0.0.1:80\n" + body + "\n server 10.0.0.1:80\n}\n"
	}
	d, err := Parse("c", []byte(svc(" max-conns 500\n max-conns-per-source 20")))
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Services[0]; s.MaxConns != 500 || s.MaxConnsPerSource != 20 || s.LimitsLine != 3 {
		t.Fatalf("%+v", s)
	}
	for _, c := range []struct {
		body           string
		service, place int
	}{
		{"", DefaultMaxConns, DefaultMaxConnsPerSource},
		{" max-conns 50", 50, 50}, // the per-source default never exceeds the service's
		{" max-conns-per-source 7", DefaultMaxConns, 7},
	} {
		d, err := Parse("c", []byte(svc(c.body)))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := d.Services[0].ConnLimits(); a != c.service || b != c.place {
			t.Errorf("%q: limits %d, %d; want %d, %d", c.body, a, b, c.service, c.place)
		}
	}

	for _, c := range []struct{ conf, want string }{
		{svc(" max-conns 0"), `c:3: service s: max-conns: "0": want 1..1048576 connections`},
		{svc(" max-conns lots"), `c:3: service s: max-conns: "lots": want 1..1048576 connections`},
		{svc(" max-conns 2000000"), `c:3: service s: max-conns: "2000000": want 1..1048576 connections`},
		{svc(" max-conns 1 2"), `c:3: service s: max-conns: want exactly one value, got 2`},
		{svc(" max-conns-per-source -1"), `c:3: service s: max-conns-per-source: "-1": want 1..1048576 connections`},
		{svc(" max-conns 10\n max-conns-per-source 11"), `c:3: service s: max-conns-per-source: max-conns-per-source 11: want at most max-conns (10)`},
		{svc(" max-conns-per-source 20000"), `c:3: service s: max-conns-per-source: max-conns-per-source 20000: want at most max-conns (10000 by default)`},
		{svc(" dataplane l7\n max-conns 10"), `c:4: service s: max-conns: only the l4 dataplane has it (this service is l7)`},
		{"interface lo\n" + svc(" dataplane xdp\n max-conns-per-source 10"), `c:5: service s: max-conns-per-source: only the l4 dataplane has it (this service is xdp)`},
	} {
		_, err := Parse("c", []byte(c.conf))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.conf, err, c.want)
		}
	}

	// Format writes them, and Parse reads them back.
	again, err := Parse("c", []byte(Format(d)))
	if err != nil {
		t.Fatalf("%v\n%s", err, Format(d))
	}
	if a, b := again.Services[0], d.Services[0]; a.MaxConns != b.MaxConns || a.MaxConnsPerSource != b.MaxConnsPerSource {
		t.Fatalf("round trip: %+v, want %+v", a, b)
	}
	// Code-built services (no line) are checked too.
	bad := *d
	bad.Services = []Service{d.Services[0]}
	bad.Services[0].MaxConnsPerSource = 501
	if err := Validate(&bad); err == nil || !strings.Contains(err.Error(), "want at most max-conns (500)") {
		t.Fatalf("Validate: %v", err)
	}
}

// TestL4Timeouts: the l4 dataplane reads tcp-timeout, tcp-fin-timeout and
// udp-timeout as the XDP dataplane does: whole seconds, at least one, and
// IPVS's defaults when none is set.
func TestL4Timeouts(t *testing.T) {
	for _, c := range []struct {
		s             Service
		tcp, fin, udp time.Duration
	}{
		{NewService("s"), 900 * time.Second, 120 * time.Second, 300 * time.Second},
		{Service{}, 900 * time.Second, 120 * time.Second, 300 * time.Second},
		{Service{TCPTimeout: 1500 * time.Millisecond, UDPTimeout: 2 * time.Second}, 2 * time.Second, time.Second, 2 * time.Second},
	} {
		tcp, fin, udp := c.s.L4Timeouts()
		if !reflect.DeepEqual([]time.Duration{tcp, fin, udp}, []time.Duration{c.tcp, c.fin, c.udp}) {
			t.Errorf("%+v: %v %v %v", c.s, tcp, fin, udp)
		}
	}
}
