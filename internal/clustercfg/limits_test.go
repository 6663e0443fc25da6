package clustercfg

import (
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/config"
)

// TestServiceConnLimits: a service's max-conns and max-conns-per-source
// take director.conf's values and rules, each error at its YAML path and
// line, and reach the director's view (and come back from an import).
func TestServiceConnLimits(t *testing.T) {
	doc := func(dataplane, limits string) string {
		return "services:\n  - name: shop\n    vip: 10.0.0.1:80\n" + dataplane + limits +
			"    servers:\n      - address: 10.0.1.1:80\n"
	}
	for _, tc := range []struct {
		name, doc string
		want      string // "": accepted; else "LINE: PATH: message piece"
	}{
		{"none", doc("", ""), ""},
		{"both", doc("", "    max-conns: 500\n    max-conns-per-source: 20\n"), ""},
		{"range", doc("", "    max-conns: 1048577\n"), "4: services[0].max-conns: 1048577: want 1..1048576 connections"},
		{"negative", doc("", "    max-conns-per-source: -1\n"), "4: services[0].max-conns-per-source: -1: want 1..1048576 connections"},
		{"above the service's", doc("", "    max-conns: 10\n    max-conns-per-source: 11\n"), "5: services[0].max-conns-per-source: max-conns-per-source 11: want at most max-conns (10)"},
		{"above the default", doc("", "    max-conns-per-source: 10001\n"), "4: services[0].max-conns-per-source: max-conns-per-source 10001: want at most max-conns (10000 by default)"},
		{"l7", doc("    dataplane: l7\n", "    max-conns: 10\n"), "5: services[0].max-conns: only the l4 dataplane has it (this service is l7)"},
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
	c, err := Parse("q.yaml", []byte("directors:\n  - name: d1\n"+doc("", "    max-conns: 500\n    max-conns-per-source: 20\n")))
	if err != nil {
		t.Fatal(err)
	}
	d, err := DirectorView(c, "d1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Services[0]; s.MaxConns != 500 || s.MaxConnsPerSource != 20 {
		t.Fatalf("view: %+v", s)
	}
	back, err := Import(d)
	if err != nil {
		t.Fatal(err)
	}
	if s := back.Services[0]; s.MaxConns != 500 || s.MaxConnsPerSource != 20 {
		t.Fatalf("import: %+v", s)
	}
	if a, b := (&config.Service{}).ConnLimits(); a != config.DefaultMaxConns || b != config.DefaultMaxConnsPerSource {
		t.Fatalf("defaults %d %d", a, b)
	}
}
