package clustercfg

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

func servers(s config.Service) map[string]int {
	out := map[string]int{}
	for _, r := range s.Servers {
		out[r.Addr.String()] = r.Weight
	}
	return out
}

func TestDirectorView(t *testing.T) {
	c := mustParse(t, "testdata/good/full.yaml")
	d, err := DirectorView(c, "director1", []string{"node2"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Admin != "127.0.0.1:7500" || d.Meta != "127.0.51.10:7400" || d.Docroot != "/www" || d.XDPMode != "auto" || d.XDPConns != 262144 {
		t.Fatalf("director fields: %+v", d)
	}
	if len(d.Services) != 3 {
		t.Fatalf("%d services", len(d.Services))
	}
	www, media, dns := d.Services[0], d.Services[1], d.Services[2]
	// www: the web cluster's nodes at their own port; node2 drained.
	if got, want := servers(www), map[string]int{"127.0.51.21:8080": 1, "127.0.51.22:8080": 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("www pool %v, want %v", got, want)
	}
	if www.VIP != netip.MustParseAddrPort("127.0.51.100:80") || www.Scheduler != "wlc" || www.Protocol != "tcp" || www.Dataplane != "l4" {
		t.Errorf("www: %+v", www)
	}
	wantCheck := config.DefaultCheck()
	wantCheck.Type, wantCheck.Port, wantCheck.Timeout = "http", 9080, 500*time.Millisecond
	if !reflect.DeepEqual(www.Check, wantCheck) {
		t.Errorf("www check %+v, want %+v", www.Check, wantCheck)
	}
	// media: the service's port on the node's host.
	if got, want := servers(media), map[string]int{"127.0.51.23:8081": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("media pool %v, want %v", got, want)
	}
	if media.Persistence != 5*time.Minute || media.Scheduler != "mwlc" || !reflect.DeepEqual(media.Check, config.DefaultCheck()) {
		t.Errorf("media: %+v", media)
	}
	if !reflect.DeepEqual(media.QoS, []string{"gold"}) || media.QoSPerServer != 16 || media.QoSReserve != 1 || media.QoSInflight != 0 {
		t.Errorf("media's qos: %v, per-server %d, reserve %d, inflight %d", media.QoS, media.QoSPerServer, media.QoSReserve, media.QoSInflight)
	}
	// dns: explicit servers, weights as written.
	if got, want := servers(dns), map[string]int{"127.0.51.31:53": 1, "127.0.51.32:53": 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("dns pool %v, want %v", got, want)
	}
	if dns.UDPTimeout != 30*time.Second || dns.Check.Type != "none" {
		t.Errorf("dns: %+v", dns)
	}
	// Not drained: node2 has its weight.
	d, err = DirectorView(c, "director1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := servers(d.Services[0])["127.0.51.22:8080"]; w != 2 {
		t.Errorf("node2 weight %d, want 2", w)
	}
	if _, err := DirectorView(c, "nobody", nil); err == nil || !strings.Contains(err.Error(), `"nobody"`) {
		t.Errorf("unknown director: %v", err)
	}
}

// TestDirectorViewValidates: a configuration built in code that the
// director would refuse (xdp without an interface) is an error.
func TestDirectorViewValidates(t *testing.T) {
	c := &Config{
		Directors: []Director{{Name: "d1"}},
		Services:  []Service{{Name: "x", VIP: "127.0.51.100:80", Dataplane: "xdp", Servers: []RealServer{{Address: "127.0.51.21:80"}}}},
	}
	if _, err := DirectorView(c, "d1", nil); err == nil || !strings.Contains(err.Error(), "interface") {
		t.Fatalf("want the director's own refusal, got %v", err)
	}
	c.Services[0].Dataplane = ""
	c.Services[0].Servers = nil
	if _, err := DirectorView(c, "d1", nil); err == nil || !strings.Contains(err.Error(), "empty pool") {
		t.Fatalf("want empty pool, got %v", err)
	}
}

func TestNodeView(t *testing.T) {
	c := mustParse(t, "testdata/good/full.yaml")
	n, err := NodeView(c, "node1")
	if err != nil {
		t.Fatal(err)
	}
	want := &NodeConfig{
		Docroot:       "/www",
		DefaultDomain: "www.example.test",
		Domains:       map[string]string{"www.example.test": "/www/www.example.test", "shop.example.test": "/sites/shop"},
		Meta:          []string{"127.0.51.10:7400", "127.0.51.11:7400"},
	}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("got %+v\nwant %+v", n, want)
	}
	if _, err := NodeView(c, "node9"); err == nil || !strings.Contains(err.Error(), `"node9"`) {
		t.Fatalf("unknown node: %v", err)
	}
	// Defaults: no filesystem section.
	n, err = NodeView(&Config{Nodes: []Node{{Name: "a", Address: "127.0.51.1:80"}}, Domains: []Domain{{Name: "d.test", Service: "s"}}}, "a")
	if err != nil || n.Docroot != "/www" || n.Domains["d.test"] != "/www/d.test" {
		t.Fatalf("defaults: %+v %v", n, err)
	}
}

// TestImport: a director file imported, stored (Marshal, Parse) and cut
// back out (DirectorView) is the same director configuration.
func TestImport(t *testing.T) {
	files, _ := filepath.Glob("testdata/import/*.conf")
	if len(files) < 2 {
		t.Fatal("no director files")
	}
	for _, f := range files {
		orig, err := config.Load(f)
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
		c2, err := Parse("imported.yaml", y)
		if err != nil {
			t.Fatalf("%s: imported config refused: %v\n%s", f, err, y)
		}
		view, err := DirectorView(c2, "director1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := config.Format(orig), config.Format(view); a != b {
			t.Fatalf("%s: differs after import:\n%s", f, Diff([]byte(a), []byte(b)))
		}
	}
	// The minimal file imports to the minimal document: no defaults.
	orig, _ := config.Load("testdata/import/minimal.conf")
	c, _ := Import(orig)
	y, _ := c.Marshal()
	want := "directors:\n  - name: director1\nservices:\n  - name: www\n    vip: 127.0.51.100:80\n    servers:\n      - address: 127.0.51.21:8080\n"
	if string(y) != want {
		t.Fatalf("minimal import:\n%s\nwant\n%s", y, want)
	}
	if _, err := Import(nil); err == nil {
		t.Fatal("Import(nil) accepted")
	}
}

func TestAdminAddr(t *testing.T) {
	if a := (Node{Address: "127.0.51.21:8080"}).AdminAddr(); a != "127.0.51.21:9080" {
		t.Fatal(a)
	}
	if a := (Node{Address: "[::1]:8080"}).AdminAddr(); a != "[::1]:9080" {
		t.Fatal(a)
	}
	if a := (Node{Address: "127.0.51.21:8080", Admin: "127.0.51.21:9999"}).AdminAddr(); a != "127.0.51.21:9999" {
		t.Fatal(a)
	}
	if a := (Director{}).AdminAddr(); a != "127.0.0.1:7500" {
		t.Fatal(a)
	}
}

// TestDrainExplicitServers: a drained node is at weight 0 in every
// service, also where a pool lists servers by address (as an imported
// director.conf does): by its address, or by its IP when it is the only
// node there.
func TestDrainExplicitServers(t *testing.T) {
	y := `nodes:
  - name: web1
    address: 10.0.0.21:8080
  - name: web2
    address: 10.0.0.22:8080
  - name: a
    address: 10.0.0.30:8080
  - name: b
    address: 10.0.0.30:8081
directors:
  - name: d1
services:
  - name: www
    vip: 10.0.0.100:80
    servers:
      - address: 10.0.0.21:8080
      - address: 10.0.0.22:8080
        weight: 3
      - address: 10.0.0.21:9000
      - address: 10.0.0.30:9000
`
	c, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	d, err := DirectorView(c, "d1", []string{"web1", "a"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range d.Services[0].Servers {
		got[r.Addr.String()] = r.Weight
	}
	want := map[string]int{"10.0.0.21:8080": 0, "10.0.0.22:8080": 3, "10.0.0.21:9000": 0, "10.0.0.30:9000": 1}
	for a, w := range want {
		if got[a] != w {
			t.Errorf("%s: weight %d, want %d (all: %v)", a, got[a], w, got)
		}
	}
}

// TestDirectorViewHA: the ha entry becomes config.HA with its defaults;
// the join's state adds the etcd and the files; a director without an
// entry has none.
func TestDirectorViewHA(t *testing.T) {
	c := mustParse(t, "testdata/good/ha.yaml")
	d, err := DirectorView(c, "dir-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &config.HA{Group: "web", Name: "dir-b", Mode: "active-standby", Priority: 100, Sync: "10.0.0.12:7700", LeaseTTL: 2 * time.Second}
	if !reflect.DeepEqual(d.HA, want) {
		t.Fatalf("without state: %+v, want %+v", d.HA, want)
	}
	st := &HAState{Etcd: []string{"https://10.0.0.5:7601"}, EtcdCA: "/s/ca.pem", EtcdCert: "/s/cert.pem", EtcdKey: "/s/key.pem", KeyFile: "/s/ha.key"}
	d, err = DirectorViewHA(c, "dir-c", nil, st)
	if err != nil {
		t.Fatal(err)
	}
	want = &config.HA{Group: "api", Name: "dir-c", Mode: "active-active", Priority: 100, Sync: "10.0.0.13:7700", LeaseTTL: 2 * time.Second,
		Etcd: st.Etcd, EtcdCA: st.EtcdCA, EtcdCert: st.EtcdCert, EtcdKey: st.EtcdKey, KeyFile: st.KeyFile}
	if !reflect.DeepEqual(d.HA, want) {
		t.Fatalf("with state: %+v, want %+v", d.HA, want)
	}
	if d, err := DirectorViewHA(c, "dir-a", nil, st); err != nil || d.HA.Priority != 200 || d.HA.LeaseTTL != 3*time.Second {
		t.Fatalf("dir-a: %+v %v", d, err)
	}
	c.Directors[0].HA = nil
	if d, err := DirectorViewHA(c, "dir-a", nil, st); err != nil || d.HA != nil {
		t.Fatalf("no ha entry: %+v %v", d, err)
	}
}
