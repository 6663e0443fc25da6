package clustercfg

import (
	"reflect"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/config"
)

// TestFeedbackView: the section with its defaults is the director's block
// with its own (config.NewFeedback), field for field.
func TestFeedbackView(t *testing.T) {
	c, err := Parse("x.yaml", []byte("services:\n  - name: www\n    vip: 10.0.0.1:80\n    weights: feedback\n    servers:\n      - address: 10.0.1.1:80\nfeedback: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := FeedbackView(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := config.NewFeedback(); !reflect.DeepEqual(f, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", f, want)
	}
	c = mustParse(t, "testdata/good/full.yaml")
	if f, err = FeedbackView(c); err != nil {
		t.Fatal(err)
	}
	if f.Source != "agent" || f.Timeout != 500*time.Millisecond || f.Floor != 2 || f.Max != 50 || f.DeadBand != 0.1 || f.Bandwidth != 1e9 || f.CPU != "cpuraw" {
		t.Fatalf("full.yaml's section: %+v", f)
	}
	v3, err := Parse("x.yaml", []byte("feedback:\n  snmp-version: 3\n  v3-user: u\n  v3-auth-proto: SHA\n  v3-auth-file: /a\n  v3-priv-proto: AES\n  v3-priv-file: /p\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ = FeedbackView(v3); f.Version != "3" || f.User != "u" || f.AuthFile != "/a" || f.PrivProto != "AES" {
		t.Fatalf("v3: %+v", f)
	}
}

// TestFeedbackPools: a service's pool as the directors have it, less the
// servers at weight 0 (configured, or a drained node's): a feedback weight
// would override the 0.
func TestFeedbackPools(t *testing.T) {
	c := mustParse(t, "testdata/good/full.yaml")
	p, err := FeedbackPools(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || len(p["www"]) == 0 {
		t.Fatalf("pools %v: want www's", p)
	}
	all := len(p["www"])
	drained := c.Nodes[0].Name
	p, _ = FeedbackPools(c, []string{drained})
	if len(p["www"]) != all-1 {
		t.Fatalf("with %s drained: %v", drained, p)
	}
	c.Services[2].Weights, c.Services[2].Scheduler = "feedback", "wrr" // dns: one server at weight 0
	p, _ = FeedbackPools(c, nil)
	if len(p["dns"]) != 1 || p["dns"][0].Addr != "127.0.51.31:53" {
		t.Fatalf("dns: %v: want the server of weight 1 only", p["dns"])
	}
	// node2's admin is set: its /load is there; node1's is not: "".
	for _, s := range p["www"] {
		want := map[string]string{"127.0.51.21:8080": "", "127.0.51.22:8080": "127.0.51.22:9081"}[s.Addr]
		if s.Load != want {
			t.Errorf("www server %s: load at %q, want %q", s.Addr, s.Load, want)
		}
	}
}

// TestImportFeedback: director.conf's block and `weights feedback` come
// over; the section's view is the block again, field for field.
func TestImportFeedback(t *testing.T) {
	for _, block := range []string{
		"feedback {\n    source agent\n    interval 500ms\n    agent-port 7180\n    bandwidth 100mbit\n    cpu cpuraw\n    floor 3\n    max 60\n    dead-band 0\n    smoothing 0.5\n    target 0.8\n    timeout 200ms\n    source-addr 10.0.0.1\n}\n",
		"feedback {\n    v3 user=mon auth=sha256:/etc/a priv=aes:/etc/p\n    port 1161\n    ifname eth1\n    load-minutes 5\n}\n",
		"feedback {\n    community file:/etc/corral/community\n}\n",
		"feedback {\n}\n",
	} {
		d, err := config.Parse("d.conf", []byte(block+"service www {\n    vip 10.0.0.1:80\n    scheduler wrr\n    weights feedback\n    server 10.0.1.1:80\n}\n"))
		if err != nil {
			t.Fatalf("%s: %v", block, err)
		}
		c, err := Import(d)
		if err != nil {
			t.Fatal(err)
		}
		y, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse("imported.yaml", y)
		if err != nil {
			t.Fatalf("%s: the import is refused: %v\n%s", block, err, y)
		}
		if c2.Services[0].Weights != "feedback" {
			t.Fatalf("weights lost:\n%s", y)
		}
		f, err := FeedbackView(c2)
		if err != nil {
			t.Fatal(err)
		}
		want := *d.Feedback
		want.Line = 0
		if !reflect.DeepEqual(*f, want) {
			t.Fatalf("%s\nimported %s\n got %+v\nwant %+v", block, y, *f, want)
		}
	}
}
