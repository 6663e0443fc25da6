package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const good = `# a comment
admin 127.0.0.1:7501
meta 127.0.0.10:7400
service www {
    vip 127.0.0.100:8080   # the VIP
    dataplane l7
    scheduler mwlc
    persistence 30s
    check http path=/healthz status=200 interval=1s timeout=500ms rise=1 fall=2
    server 127.0.0.21:8080 weight=2
    server 127.0.0.22:8080
}
service dns {
    vip 127.0.0.100:53
    protocol udp
    scheduler sh
    check none
    server 127.0.0.21:53 weight=0
}
`

func TestGood(t *testing.T) {
	d, err := Parse("d.conf", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if d.Admin != "127.0.0.1:7501" || len(d.Services) != 2 {
		t.Fatalf("%+v", d)
	}
	w := d.Services[0]
	if w.Dataplane != "l7" || w.Scheduler != "mwlc" || w.Persistence != 30*time.Second || w.Check.Fall != 2 ||
		w.Check.Timeout != 500*time.Millisecond || len(w.Servers) != 2 || w.Servers[0].Weight != 2 || w.Servers[1].Weight != 1 {
		t.Fatalf("%+v", w)
	}
	if d.Services[1].Servers[0].Weight != 0 || d.Services[1].Check.Type != "none" {
		t.Fatalf("%+v", d.Services[1])
	}
}

func TestErrorsNameTheirPlace(t *testing.T) {
	svc := func(body string) string { return "service s {\n vip 127.0.0.1:80\n" + body + "\n}\n" }
	cases := []struct{ conf, want string }{
		{"bogus 1", "c:1: bogus: unknown statement"},
		{"admin nope", "c:1: admin: \"nope\" is not an address:port"},
		{"service s {\n}\n", "c:1: service s: vip: missing"},
		{svc(" scheduler fastest"), "c:3: service s: scheduler: unknown scheduler \"fastest\""},
		{svc(" server 10.0.0.1:80 weight=x"), "c:3: service s: server weight: \"x\": want 0..65535"},
		{svc(" server 10.0.0.1 weight=1"), "c:3: service s: server: \"10.0.0.1\" is not an address:port"},
		{svc(" server 10.0.0.1:80\n server 10.0.0.1:80"), "c:4: service s: server: 10.0.0.1:80 already in the pool (line 3)"},
		{svc(" check http interval=0s"), "c:3: service s: check: interval \"0s\": must be positive"},
		{svc(" check http timeout=5s interval=1s"), "c:3: service s: check: timeout 5s longer than interval 1s"},
		{svc(" check exec"), "c:3: service s: check: exec needs command="},
		{svc(" protocol udp\n dataplane l7"), "c:1: service s: dataplane: l7 needs protocol tcp"},
		{svc(" persistence soon"), "c:3: service s: persistence: \"soon\" is not a duration"},
		{svc(" colour blue"), "c:3: service s: colour: unknown field"},
		{"service s {\n vip 127.0.0.1:80\n", "c:1: service s: not closed"},
		{"}", "c:1: '}' without an open service"},
		{svc("") + svc(""), "c:5: service: service \"s\" already defined on line 1"},
		{svc(" dataplane xdp"), "c:1: service s: dataplane: xdp needs the director's 'interface NAME'"},
		{"interface eth0\n" + svc(" dataplane xdp\n server 10.0.0.1:8080"), "c:5: service s: server: 10.0.0.1:8080: with dataplane xdp (direct routing) a server listens on the VIP's port 80"},
		{"interface eth0\n" + svc(" dataplane xdp\n persistence 10s"), "c:2: service s: persistence: not with dataplane xdp"},
		{"interface eth0\n" + svc(" dataplane l7\n scheduler mwlc\n dataplane xdp"), "c:2: service s: scheduler: mwlc is not in the XDP dataplane"},
		{"xdp-mode turbo", "c:1: xdp-mode: \"turbo\": want auto, native or generic"},
		{"xdp-conns 10", "c:1: xdp-conns: \"10\": want a number of flows"},
		{svc(" tcp-timeout -1s"), "c:3: service s: tcp-timeout: \"-1s\" is not a duration"},
		{svc(" check http port=9080\n server 10.0.0.1:9080"), "c:4: service s: server: 10.0.0.1:9080: port 9080 is the check's port"},
		{svc(" check http port=0"), "c:3: service s: check: port \"0\": want 1..65535"},
		{svc(" pass-internal on"), "c:1: service s: pass-internal: only the l7 dataplane looks at paths"},
		{svc(" pass-internal yes"), "c:3: service s: pass-internal: \"yes\": want on or off"},
		{"service a {\n vip 127.0.0.1:80\n}\nservice b {\n vip 127.0.0.1:80\n}\n", "c:4: service b: vip: tcp 127.0.0.1:80 is also service \"a\"'s (line 1)"},
	}
	for _, c := range cases {
		_, err := Parse("c", []byte(c.conf))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("config %q:\n got %v\nwant %s...", c.conf, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("service x {\n vip [::1]:80\n server [::1]:81 weight=3\n}\n"))
	f.Add([]byte(haGood))
	f.Add([]byte(feedbackGood))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse("fuzz", b)
		if err != nil {
			l, ok := err.(Errors)
			if !ok || len(l) == 0 {
				t.Fatalf("error without a place: %v", err)
			}
			return
		}
		for _, s := range d.Services {
			if !s.VIP.IsValid() {
				t.Fatal("accepted a service without a VIP")
			}
		}
		if d.HA != nil {
			// An accepted ha block writes back to the same block.
			again, err := Parse("fuzz", []byte(Format(d)))
			if err != nil || !SameHA(d.HA, again.HA) {
				t.Fatalf("ha block does not round-trip: %v\n%s", err, Format(d))
			}
		}
		if d.Feedback != nil {
			// So does an accepted feedback block.
			again, err := Parse("fuzz", []byte(Format(d)))
			if err != nil || again.Feedback == nil || !sameFeedbackBlock(d.Feedback, again.Feedback) {
				t.Fatalf("feedback block does not round-trip: %v\n%s", err, Format(d))
			}
		}
	})
}

// TestEveryErrorAtOnce: a file with several mistakes gets them all, each
// with its place, in line order.
func TestEveryErrorAtOnce(t *testing.T) {
	conf := "admin nope\nservice a {\n vip 127.0.0.1:80\n scheduler fastest\n server 10.0.0.1\n}\nservice b {\n vip 127.0.0.1:81\n dataplane l4\n scheduler mwlc\n}\nbogus\n"
	_, err := Parse("c", []byte(conf))
	var l Errors
	if !errors.As(err, &l) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		"c:1: admin: \"nope\" is not an address:port",
		"c:4: service a: scheduler: unknown scheduler \"fastest\"",
		"c:5: service a: server: \"10.0.0.1\" is not an address:port",
		"c:7: service b: scheduler: mwlc needs dataplane l7",
		"c:12: bogus: unknown statement",
	}
	if len(l) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(l), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(l[i].Error(), w) {
			t.Errorf("error %d: %q, want %q...", i, l[i], w)
		}
	}
}

// TestNoKnockOnErrors: an error that only follows from another (a vip
// "missing" after a bad vip line) is not reported.
func TestNoKnockOnErrors(t *testing.T) {
	_, err := Parse("c", []byte("service s {\n vip nowhere\n dataplane l8\n scheduler mwlc\n}\n"))
	if l, ok := err.(Errors); !ok || len(l) != 2 {
		t.Fatalf("want the vip and dataplane errors only, got:\n%v", err)
	}
}

// TestFormatRoundTrip: Format writes what Parse reads back.
func TestFormatRoundTrip(t *testing.T) {
	d, err := Parse("d.conf", []byte(good+"service p {\n vip 127.0.0.1:81\n inactive-timeout 5s\n check http port=9080 path=/healthz body-match=ok\n server 10.0.0.1:80\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Services[2].Check; c.Port != 9080 || d.Services[2].InactiveTimeout != 5e9 {
		t.Fatalf("check %+v", c)
	}
	again, err := Parse("d.conf", []byte(Format(d)))
	if err != nil {
		t.Fatalf("%v\n%s", err, Format(d))
	}
	strip := func(d *Director) {
		d.AdminLine = 0
		for i := range d.Services {
			d.Services[i].Line = 0
			for j := range d.Services[i].Servers {
				d.Services[i].Servers[j].Line = 0
			}
		}
	}
	strip(d)
	strip(again)
	if !reflect.DeepEqual(d, again) {
		t.Fatalf("round trip:\n%+v\n%+v", d, again)
	}
	if err := Validate(d); err != nil {
		t.Fatal(err)
	}
	d.Services[1].VIP = d.Services[0].VIP
	d.Services[1].Protocol = "tcp"
	if err := Validate(d); err == nil || !strings.Contains(err.Error(), "is also service") {
		t.Fatalf("Validate of a duplicate VIP: %v", err)
	}
}

// A line over MaxLine is an error naming its line, and the services after
// it are still read: the file is never accepted with part of it dropped.
func TestLongLineIsAnErrorNotTheEnd(t *testing.T) {
	conf := "service s1 {\n vip 127.0.0.1:80\n server 127.0.0.2:80\n}\n# " + strings.Repeat("x", MaxLine) +
		"\nservice s2 {\n vip 127.0.0.1:81\n server 127.0.0.2:80\n bogus\n}\n"
	_, err := Parse("c", []byte(conf))
	if err == nil {
		t.Fatal("a file with a line over MaxLine was accepted")
	}
	want := "c:5: line longer than 65536 bytes\nc:9: service s2: bogus: unknown field"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got\n%v\nwant it to begin\n%s", err, want)
	}
	// Exactly MaxLine is fine, as is CRLF.
	ok := "# " + strings.Repeat("x", MaxLine-2) + "\r\nservice s1 {\r\n vip 127.0.0.1:80\r\n server 127.0.0.2:80\r\n}\r\n"
	if d, err := Parse("c", []byte(ok)); err != nil || len(d.Services) != 1 {
		t.Fatalf("%v %+v", err, d)
	}
}
