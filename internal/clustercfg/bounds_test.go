package clustercfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// firstOf finds the first struct of the named type inside v.
func firstOf(v reflect.Value, name string) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Value{}
		}
		return firstOf(v.Elem(), name)
	case reflect.Struct:
		if v.Type().Name() == name {
			return v
		}
		for i := 0; i < v.NumField(); i++ {
			if r := firstOf(v.Field(i), name); r.IsValid() {
				return r
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if r := firstOf(v.Index(i), name); r.IsValid() {
				return r
			}
		}
	}
	return reflect.Value{}
}

// TestBounds: the ranges and enums the schema publishes are the ones
// Parse enforces: one past each end, and a value not in an enum, is
// refused at that field.
func TestBounds(t *testing.T) {
	set := func(key string, val any) error {
		typ, field, _ := strings.Cut(key, ".")
		example := "testdata/good/full.yaml"
		if typ == "DirectorHA" {
			// HA needs every service on xdp: an example of its own.
			example = "testdata/good/ha.yaml"
		}
		c := mustParse(t, example)
		s := firstOf(reflect.ValueOf(c), typ)
		if !s.IsValid() {
			t.Fatalf("%s: no %s in the example", key, typ)
		}
		var f reflect.Value
		for _, fi := range fieldsOf(s.Type()) {
			if fi.name == field {
				f = s.Field(fi.index)
			}
		}
		if !f.IsValid() {
			t.Fatalf("%s: no field %s", key, field)
		}
		switch x := val.(type) {
		case int:
			if f.Kind() == reflect.Pointer {
				f.Set(reflect.New(f.Type().Elem()))
				f = f.Elem()
			}
			f.SetInt(int64(x))
		case string:
			f.SetString(x)
		}
		y, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse("bounds.yaml", y)
		return err
	}
	atField := func(err error, field string) bool {
		var es Errors
		errors.As(err, &es)
		for _, e := range es {
			if strings.HasSuffix(e.Path, "."+field) {
				return true
			}
		}
		return false
	}
	for key, b := range bounds {
		_, field, _ := strings.Cut(key, ".")
		for _, v := range []int{b[0] - 1, b[1] + 1} {
			if err := set(key, v); !atField(err, field) {
				t.Errorf("%s = %d: want an error at it, got %v", key, v, err)
			}
		}
	}
	// Fields where 0 is the default and small values are refused: the
	// schema and docs say so, and Parse refuses the value just below.
	for key, z := range zeroOr {
		_, field, _ := strings.Cut(key, ".")
		if err := set(key, z-1); !atField(err, field) {
			t.Errorf("%s = %d: want an error at it, got %v", key, z-1, err)
		}
		if err := set(key, 0); err != nil {
			t.Errorf("%s = 0 (the default): %v", key, err)
		}
		if md := string(mdOf(t)); !strings.Contains(md, fmt.Sprintf("0 or %d..", z)) {
			t.Errorf("docs/config.md does not say %s is 0 or %d..", key, z)
		}
	}
	// Name patterns: the schema publishes each, and Parse refuses what
	// it does not match.
	for key, re := range patterns {
		_, field, _ := strings.Cut(key, ".")
		if err := set(key, "_not a name"); !atField(err, field) {
			t.Errorf("%s = '_not a name': want an error at it, got %v", key, err)
		}
		typ, _, _ := strings.Cut(key, ".")
		var sc struct {
			Defs map[string]struct {
				Properties map[string]struct {
					Pattern string `json:"pattern"`
				} `json:"properties"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(Schema(), &sc); err != nil {
			t.Fatal(err)
		}
		if got := sc.Defs[typ].Properties[field].Pattern; got != re.String() {
			t.Errorf("the schema's pattern for %s is %q, want %q", key, got, re.String())
		}
	}
	for key := range enums {
		_, field, _ := strings.Cut(key, ".")
		if err := set(key, "bogus"); !atField(err, field) {
			t.Errorf("%s = bogus: want an error at it, got %v", key, err)
		}
	}
}

func mdOf(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("types.go")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, md, err := GenerateDocs(src, ex)
	if err != nil {
		t.Fatal(err)
	}
	return md
}
