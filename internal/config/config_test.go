package config

import (
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
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse("fuzz", b)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error without a place: %v", err)
			}
			return
		}
		for _, s := range d.Services {
			if !s.VIP.IsValid() {
				t.Fatal("accepted a service without a VIP")
			}
		}
	})
}
