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
