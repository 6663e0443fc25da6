package clustercfg

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var wantRE = regexp.MustCompile(`^# want: (\d+): (\S+): (.*)$`)

// TestBadCorpus: each testdata/bad file is refused with the error its
// first line names (line, YAML path, a piece of the message).
func TestBadCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("%d bad configurations; want at least 30", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			m := wantRE.FindStringSubmatch(first)
			if m == nil {
				t.Fatalf("first line %q is not '# want: LINE: PATH: MESSAGE'", first)
			}
			line, _ := strconv.Atoi(m[1])
			c, err := Parse(f, data)
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors: %v", err, err)
			}
			for i := 1; i < len(es); i++ {
				if es[i].Line < es[i-1].Line {
					t.Errorf("errors not in line order:\n%v", err)
				}
			}
			for _, e := range es {
				if e.Line == line && e.Path == m[2] && strings.Contains(e.Msg, m[3]) && e.File == f {
					return
				}
			}
			t.Errorf("want %s:%d: %s: ...%s...; got\n%v", f, line, m[2], m[3], err)
		})
	}
}

func mustParse(t *testing.T, file string) *Config {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(file, data)
	if err != nil {
		t.Fatalf("Parse(%s):\n%v", file, err)
	}
	return c
}

// TestGoodRoundTrip: the good examples parse, and Marshal is a fixed
// point (Parse(Marshal(c)) == c, Marshal twice gives the same bytes).
func TestGoodRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	if len(files) == 0 {
		t.Fatal("no good examples")
	}
	for _, f := range files {
		c := mustParse(t, f)
		m, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse("marshalled", m)
		if err != nil {
			t.Fatalf("%s: marshalled form refused: %v\n%s", f, err, m)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("%s: round trip differs:\n%+v\n%+v", f, c, c2)
		}
		m2, _ := c2.Marshal()
		if !bytes.Equal(m, m2) {
			t.Fatalf("%s: Marshal not stable:\n%s\n---\n%s", f, m, m2)
		}
		if len(c.Services) == 0 || len(c.Nodes) == 0 || len(c.Accounts) == 0 {
			t.Fatalf("%s: sections lost: %+v", f, c)
		}
	}
}

func TestEmptyDocument(t *testing.T) {
	for _, doc := range []string{"", "\n", "# only a comment\n", "---\n", "{}\n", "~\n"} {
		c, err := Parse("empty.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if !reflect.DeepEqual(c, &Config{}) {
			t.Fatalf("%q: %+v", doc, c)
		}
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	doc := "services:\n  - name: a\n    vpi: 1.2.3.4:80\n    scheduler: foo\n    check:\n      interval: 2x\nnodes:\n  - name: n1\n    address: nowhere\n"
	_, err := Parse("x.yaml", []byte(doc))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("%v", err)
	}
	want := []string{"services[0].vip", "services[0].vpi", "services[0].scheduler", "services[0].check.interval", "nodes[0].address"}
	for _, w := range want {
		found := false
		for _, e := range es {
			found = found || e.Path == w
		}
		if !found {
			t.Errorf("no error at %s in\n%v", w, err)
		}
	}
}

func TestTooLarge(t *testing.T) {
	doc := make([]byte, MaxDocument+1)
	for i := range doc {
		doc[i] = '#'
	}
	_, err := Parse("big.yaml", doc)
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("want a size error, got %v", err)
	}
}

// TestAliasBomb: a document that names a huge tree through aliases
// (10,001 services, each with a 10,000-element list: 10^8 nodes) is
// refused quickly instead of being walked.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n  - &s {name: a, vip: \"10.0.0.1:80\", servers: [{address: \"10.0.1.1:80\"}], qos: [")
	b.WriteString(strings.Repeat("x,", 9999) + "x]}\n")
	for i := 0; i < 10000; i++ {
		b.WriteString("  - *s\n")
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "expands too much") {
		t.Fatalf("want the alias budget error, got %.300v", err)
	}
}

// TestClipUTF8: a long value quoted in an error is cut between
// characters, so the message stays UTF-8 (the API's JSON would turn half
// a character into U+FFFD).
func TestClipUTF8(t *testing.T) {
	s := strings.Repeat("a", 39) + "éééé"
	if c := clip(s); !utf8.ValidString(c) || c != strings.Repeat("a", 39)+"..." {
		t.Errorf("clip(%q) = %q", s, c)
	}
	_, err := Parse("c.yaml", []byte("clusters:\n  - name: "+strings.Repeat("x", 39)+"ü€\n"))
	if err == nil || !utf8.ValidString(err.Error()) {
		t.Errorf("error not UTF-8: %q", err)
	}
}
