package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

const haGood = `interface eth0
ha {
    group web
    name d1
    mode active-standby
    priority 150
    etcd http://127.0.82.5:2379 http://127.0.82.6:2379
    etcd-ca /etc/corral/ca.pem
    etcd-cert /etc/corral/d1.pem
    etcd-key /etc/corral/d1.key
    sync 127.0.82.11:7700
    key-file /etc/corral/ha.key
    lease-ttl 3s
}
service www {
    vip 127.0.82.100:80
    dataplane xdp
    scheduler mh
    server 127.0.82.21:80
}
`

func TestHAGood(t *testing.T) {
	d, err := Parse("d.conf", []byte(haGood))
	if err != nil {
		t.Fatal(err)
	}
	want := &HA{Line: 2, Group: "web", Name: "d1", Mode: "active-standby", Priority: 150,
		Etcd: []string{"http://127.0.82.5:2379", "http://127.0.82.6:2379"}, EtcdCA: "/etc/corral/ca.pem",
		EtcdCert: "/etc/corral/d1.pem", EtcdKey: "/etc/corral/d1.key", Sync: "127.0.82.11:7700",
		KeyFile: "/etc/corral/ha.key", LeaseTTL: 3 * time.Second}
	if !reflect.DeepEqual(d.HA, want) {
		t.Fatalf("got  %+v\nwant %+v", d.HA, want)
	}
	// Defaults: mode, priority, lease-ttl; no name (the host name).
	d, err = Parse("d.conf", []byte("interface eth0\nha {\n group g\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file /k\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h := d.HA; h.Mode != "active-standby" || h.Priority != 100 || h.LeaseTTL != 2*time.Second || h.Name != "" {
		t.Fatalf("defaults: %+v", h)
	}
}

func TestHAErrorsNameTheirPlace(t *testing.T) {
	// block is a whole ha block with one line replaced or added; line 1 is
	// interface, 2 "ha {", the fields from 3.
	block := func(extra string) string {
		return "interface eth0\nha {\n" + extra + "\n group g\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file /k\n}\n"
	}
	cases := []struct{ conf, want string }{
		{block(" mode hot-standby"), `c:3: ha: mode: "hot-standby": want active-standby or active-active`},
		{block(" priority 0"), `c:3: ha: priority: "0": want 1..255`},
		{block(" priority 256"), `c:3: ha: priority: "256": want 1..255`},
		{block(" lease-ttl 1500ms"), `c:3: ha: lease-ttl: "1500ms": want whole seconds, 1s..60s`},
		{block(" lease-ttl 61s"), `c:3: ha: lease-ttl: "61s": want whole seconds, 1s..60s`},
		{block(" lease-ttl soon"), `c:3: ha: lease-ttl: "soon" is not a duration`},
		{block(" etcd 127.0.82.5:2379"), `c:3: ha: etcd: "127.0.82.5:2379": want a client URL`},
		{block(" etcd"), `c:3: ha: etcd: want one or more client URLs`},
		{block(" sync 127.0.82.11"), `c:3: ha: sync: "127.0.82.11": want the address:port`},
		{block(" sync 0.0.0.0:7700"), `c:3: ha: sync: "0.0.0.0:7700": want the address:port`},
		{block(" key-file ha.key"), `c:3: ha: key-file: "ha.key": want an absolute path`},
		{block(" name d/1"), `c:3: ha: name: "d/1": want 1..63 letters`},
		{block(" colour blue"), `c:3: ha: colour: unknown field (want group`},
		{block(" group a b"), `c:3: ha: group: want exactly one value, got 2`},
		{block(" etcd-ca /ca.pem"), `c:2: ha: etcd-ca: etcd-ca, etcd-cert and etcd-key go together`},
		{"interface eth0\nha {\n group g\n}\n", "c:2: ha: etcd: missing"},
		{"interface eth0\nha {\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file /k\n}\n", "c:2: ha: group: missing"},
		{"interface eth0\nha {\n group g\n etcd http://127.0.82.5:2379\n key-file /k\n}\n", "c:2: ha: sync: missing"},
		{"interface eth0\nha {\n group g\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n}\n", "c:2: ha: key-file: missing"},
		{"ha {\n group g\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file /k\n}\n", "c:1: ha: interface: ha needs the director's 'interface NAME'"},
		{"interface eth0\nha {\n group g\n", "c:2: ha: not closed: missing '}'"},
		{"interface eth0\nha {\n group g\nservice s {\n", "c:2: ha: not closed: missing '}'\nc:4: service: the ha block is not closed before this service"},
		{"ha", "c:1: ha: want: ha {"},
		{block("") + "ha {\n}\n", "c:9: ha: ha block already defined on line 2"},
		{block("") + "service www {\n vip 127.0.82.100:80\n server 127.0.82.21:80\n}\n",
			"c:9: ha: service www uses dataplane l4; the connection table that HA syncs lives in the XDP program: use dataplane xdp"},
	}
	for _, c := range cases {
		_, err := Parse("c", []byte(c.conf))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("config %q:\n got %v\nwant %s...", c.conf, err, c.want)
		}
	}
}

// A syntax error in a field is reported once, not again as "missing".
func TestHANoKnockOnErrors(t *testing.T) {
	_, err := Parse("c", []byte("interface eth0\nha {\n group a/b\n etcd nope\n sync 127.0.82.11:7700\n key-file /k\n}\n"))
	if l, ok := err.(Errors); !ok || len(l) != 2 {
		t.Fatalf("want the group and etcd errors only, got:\n%v", err)
	}
}

func TestHAFormatRoundTrip(t *testing.T) {
	for _, conf := range []string{haGood, "interface eth0\nha {\n group g\n mode active-active\n etcd http://127.0.82.5:2379\n sync 127.0.82.11:7700\n key-file /k\n}\n"} {
		d, err := Parse("d.conf", []byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse("d.conf", []byte(Format(d)))
		if err != nil {
			t.Fatalf("%v\n%s", err, Format(d))
		}
		if !SameHA(d.HA, again.HA) || !reflect.DeepEqual(d.HA.Etcd, again.HA.Etcd) {
			t.Fatalf("round trip:\n%+v\n%+v\n%s", d.HA, again.HA, Format(d))
		}
		if err := Validate(again); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSameHA(t *testing.T) {
	a := NewHA()
	a.Group, a.Line = "g", 3
	b := *a
	b.Line = 9
	if !SameHA(a, &b) || SameHA(a, nil) || !SameHA(nil, nil) {
		t.Fatal("SameHA: lines should not matter, nil only equals nil")
	}
	b.Priority = 101
	if SameHA(a, &b) {
		t.Fatal("a changed priority is the same ha block")
	}
}
