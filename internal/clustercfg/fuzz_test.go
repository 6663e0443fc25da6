package clustercfg

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; what it accepts marshals to a document
// it accepts again, equal, and whose Marshal is the same bytes.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good/*.yaml", "testdata/bad/*.yaml"} {
		files, _ := filepath.Glob(dir)
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("services: [{name: a, vip: '1.2.3.4:5', servers: [{address: '1.2.3.4:6', weight: 0}]}]"))
	f.Add([]byte("a: &x [*x]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatal("a Config with an error")
			}
			return
		}
		m, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse("again.yaml", m)
		if err != nil {
			t.Fatalf("marshalled form refused: %v\n%s", err, m)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip differs:\n%#v\n%#v", c, c2)
		}
		if m2, _ := c2.Marshal(); !bytes.Equal(m, m2) {
			t.Fatalf("Marshal unstable:\n%s\n%s", m, m2)
		}
	})
}

func TestSchema(t *testing.T) {
	var s struct {
		Schema string `json:"$schema"`
		Defs   map[string]struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
			Required []string `json:"required"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Schema, "2020-12") {
		t.Fatalf("$schema %q", s.Schema)
	}
	svc := s.Defs["Service"]
	if !strings.Contains(svc.Properties["vip"].Description, "virtual address") || !reflect.DeepEqual(svc.Required, []string{"name", "vip"}) {
		t.Fatalf("Service: %+v", svc)
	}
	for name, d := range s.Defs {
		for p, v := range d.Properties {
			if v.Description == "" {
				t.Errorf("%s.%s has no description", name, p)
			}
		}
	}
	if _, _, err := GenerateDocs([]byte("package x\ntype Config struct {\n\tA int `yaml:\"a\"`\n}\n"), nil); err == nil || !strings.Contains(err.Error(), "no doc comment") {
		t.Fatalf("a field without a comment: %v", err)
	}
}

// FuzzApplyOp: a transaction's value (bytes from the API) never panics
// the decoder, and what it accepts leaves a configuration that marshals.
func FuzzApplyOp(f *testing.F) {
	f.Add("put", "service", "", []byte(`{"name":"api","vip":"127.0.51.103:443","servers":[{"address":"127.0.51.1:80"}]}`))
	f.Add("put", "layout", "", []byte(`{"path":"/www","stripe-size":"64K"}`))
	f.Add("delete", "node", "node1", []byte(nil))
	f.Add("put", "qos", "", []byte(`{"name":"q","priority":1,"match":{"networks":["10.0.0.0/8"]}}`))
	f.Add("put", "director", "", []byte(`{"name":"d2","interface":"eth1","ha":{"group":"web","mode":"active-active","sync":"10.0.0.12:7700","lease-ttl":"3s"}}`))
	f.Fuzz(func(t *testing.T, op, kind, name string, value []byte) {
		c := mustParse(t, "testdata/good/full.yaml")
		if err := c.ApplyOp(op, kind, name, value); err != nil {
			return
		}
		if _, err := c.Marshal(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDiff: the diff of any two texts patches the first into the second.
func FuzzDiff(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nc\nd\n"))
	f.Add([]byte(""), []byte("x\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		norm := func(x []byte) string {
			s := string(x)
			if s != "" && !strings.HasSuffix(s, "\n") {
				s += "\n"
			}
			return s
		}
		as, bs := norm(a), norm(b)
		d := Diff([]byte(as), []byte(bs))
		if (d == "") != (as == bs) {
			t.Fatalf("Diff(%q, %q) = %q", as, bs, d)
		}
		if got := patch(t, as, d); got != bs {
			t.Fatalf("a=%q b=%q diff:\n%s\npatched %q", as, bs, d, got)
		}
	})
}
