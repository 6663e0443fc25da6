package clustercfg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestApplyOp(t *testing.T) {
	c := mustParse(t, "testdata/good/full.yaml")
	// put: a new service (JSON with the YAML names) is appended...
	if err := c.ApplyOp("put", "service", "", []byte(`{"name":"api","vip":"127.0.51.103:443","cluster":"web","check":{"type":"http","port":9080}}`)); err != nil {
		t.Fatal(err)
	}
	if s := c.Services[len(c.Services)-1]; s.Name != "api" || s.Check == nil || s.Check.Port != 9080 {
		t.Fatalf("put appended %+v", s)
	}
	// ...an existing one replaced in place.
	if err := c.ApplyOp("put", "service", "www", []byte(`{"name":"www","vip":"127.0.51.100:80","cluster":"web","scheduler":"rr"}`)); err != nil {
		t.Fatal(err)
	}
	if s := c.Services[0]; s.Name != "www" || s.Scheduler != "rr" || s.Check != nil {
		t.Fatalf("put replaced %+v", s)
	}
	if err := c.ApplyOp("put", "layout", "", []byte(`{"path":"/www/media","replicas":3}`)); err != nil {
		t.Fatal(err)
	}
	if l := c.FileSystem.Layouts[0]; l.Replicas != 3 || l.Placement != "" {
		t.Fatalf("layout put %+v", l)
	}
	if err := c.ApplyOp("delete", "layout", "/www/media", nil); err != nil {
		t.Fatal(err)
	}
	if len(c.FileSystem.Layouts) != 1 {
		t.Fatalf("layouts %+v", c.FileSystem.Layouts)
	}
	if err := c.ApplyOp("delete", "domain", "shop.example.test", nil); err != nil {
		t.Fatal(err)
	}
	// The feedback section is one item, named "feedback": put whole...
	if err := c.ApplyOp("put", "feedback", "", []byte(`{"source":"agent","interval":"500ms","timeout":"300ms","agent-port":9080,"bandwidth":"1gbit","cpu":"cpuraw","target":0.8}`)); err != nil {
		t.Fatal(err)
	}
	if f := c.Feedback; f == nil || f.Interval != "500ms" || f.Target != 0.8 || f.Floor != 0 {
		t.Fatalf("feedback put %+v", f)
	}
	if err := c.ApplyOp("put", "feedback", "feedback", []byte(`{"source":"agent","interval":"2s"}`)); err != nil || c.Feedback.Interval != "2s" || c.Feedback.Target != 0 {
		t.Fatalf("feedback replaced: %v %+v", err, c.Feedback)
	}
	// The result is still a valid configuration.
	y, _ := c.Marshal()
	if _, err := Parse("after.yaml", y); err != nil {
		t.Fatalf("after ops: %v\n%s", err, y)
	}
	// Deleting every item of a section leaves it absent (nil), as Parse does.
	for _, n := range []string{"web", "media"} {
		if err := c.ApplyOp("delete", "cluster", n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if c.Clusters != nil {
		t.Fatalf("clusters %#v", c.Clusters)
	}
	// ...and deleted.
	if err := c.ApplyOp("delete", "feedback", "feedback", nil); err != nil || c.Feedback != nil {
		t.Fatalf("feedback delete: %v %+v", err, c.Feedback)
	}
	for _, tc := range []struct{ op, name, value, want string }{
		{"delete", "feedback", "", "has no feedback section"},
		{"put", "fb", `{"source":"agent"}`, `name "fb"`},
		{"put", "", `{"source":"agent","floor":"many"}`, "floor"},
		{"put", "", `{"source":"agent","bogus":1}`, "bogus"},
		{"put", "", ``, "no value"},
	} {
		if err := c.ApplyOp(tc.op, "feedback", tc.name, []byte(tc.value)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s feedback %q %s: %v, want %q", tc.op, tc.name, tc.value, err, tc.want)
		}
	}

	for _, tc := range []struct{ op, kind, name, value, want string }{
		{"put", "servce", "", `{}`, `unknown kind "servce"`},
		{"patch", "service", "www", ``, `unknown op "patch"`},
		{"put", "service", "", `{"name":"x","vpi":"1.2.3.4:80"}`, "did you mean 'vip'"},
		{"put", "service", "", `{"vip":"1.2.3.4:80"}`, "service.name: missing"},
		{"put", "node", "", `{"name":"n","address":"127.0.51.1:80","weight":"x"}`, "node.weight: want an integer"},
		{"put", "node", "other", `{"name":"n","address":"127.0.51.1:80"}`, `name "other" but`},
		{"put", "node", "", ``, "no value"},
		{"put", "node", "", `{"name":`, "put node"},
		{"delete", "node", "", ``, "no name given"},
		{"delete", "node", "node9", ``, `no node with name "node9"`},
		{"delete", "layout", "/nowhere", ``, `no layout with path "/nowhere"`},
	} {
		err := c.ApplyOp(tc.op, tc.kind, tc.name, []byte(tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s %s %s: %v, want ...%s...", tc.op, tc.kind, tc.name, tc.value, err, tc.want)
		}
	}
}

// patch applies a unified diff to a; the test's check that Diff is right.
func patch(t *testing.T, a, d string) string {
	t.Helper()
	al := splitLines([]byte(a))
	var out []string
	pos := 0 // next line of a (0-based)
	for _, l := range splitLines([]byte(d)) {
		switch {
		case strings.HasPrefix(l, "@@ "):
			var as, an, bs, bn int
			f := strings.Fields(l)
			parse := func(s string, st, n *int) {
				x, y, ok := strings.Cut(s[1:], ",")
				*st, _ = strconv.Atoi(x)
				*n = 1
				if ok {
					*n, _ = strconv.Atoi(y)
				}
			}
			parse(f[1], &as, &an)
			parse(f[2], &bs, &bn)
			start := as - 1
			if an == 0 {
				start = as
			}
			for pos < start {
				out = append(out, al[pos])
				pos++
			}
		case l[0] == ' ':
			if al[pos] != l[1:] {
				t.Fatalf("context %q != %q at %d", l[1:], al[pos], pos)
			}
			out = append(out, al[pos])
			pos++
		case l[0] == '-':
			if al[pos] != l[1:] {
				t.Fatalf("delete %q != %q at %d", l[1:], al[pos], pos)
			}
			pos++
		case l[0] == '+':
			out = append(out, l[1:])
		}
	}
	out = append(out, al[pos:]...)
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "\n") + "\n"
}

func TestDiff(t *testing.T) {
	if d := Diff([]byte("a\nb\n"), []byte("a\nb\n")); d != "" {
		t.Fatalf("equal: %q", d)
	}
	got := Diff([]byte("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"), []byte("a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n"))
	want := "@@ -2,9 +2,10 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n i\n j\n+k\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	got = Diff([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n"), []byte("1\n2\nx\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n"))
	want = "@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+x\n 4\n 5\n 6\n@@ -12,4 +12,3 @@\n 12\n 13\n 14\n-15\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := Diff(nil, []byte("a\n")); got != "@@ -0,0 +1 @@\n+a\n" {
		t.Fatalf("from empty: %q", got)
	}
	// Random edits: the diff applied to a gives b.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		var a []string
		for j := r.IntN(40); j > 0; j-- {
			a = append(a, strconv.Itoa(r.IntN(6)))
		}
		b := append([]string(nil), a...)
		for j := r.IntN(6); j > 0; j-- {
			p := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0:
				b = append(b[:p], append([]string{strconv.Itoa(r.IntN(6))}, b[p:]...)...)
			case 1:
				if p < len(b) {
					b = append(b[:p], b[p+1:]...)
				}
			case 2:
				if p < len(b) {
					b[p] = "z"
				}
			}
		}
		as, bs := join0(a), join0(b)
		d := Diff([]byte(as), []byte(bs))
		if got := patch(t, as, d); got != bs {
			t.Fatalf("a=%q b=%q diff:\n%s\npatched %q", as, bs, d, got)
		}
		// Myers is minimal: no more changed lines than replacing all.
		if n := strings.Count(d, "\n-") + strings.Count(d, "\n+"); n > len(a)+len(b) {
			t.Fatalf("%d changes for %d+%d lines", n, len(a), len(b))
		}
	}
}

func join0(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return strings.Join(xs, "\n") + "\n"
}

// TestDiffLarge: two unrelated 30,000-line documents take the bounded
// path and still give a correct diff.
func TestDiffLarge(t *testing.T) {
	var a, b bytes.Buffer
	for i := 0; i < 30000; i++ {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	start := time.Now()
	d := Diff(a.Bytes(), b.Bytes())
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("took %v", el)
	}
	if got := patch(t, a.String(), d); got != b.String() {
		t.Fatal("large diff does not patch a into b")
	}
}

// TestGeneratedCurrent fails when schema.json, docs/config.schema.json or
// docs/config.md is not what `go generate ./internal/clustercfg` makes
// from types.go now.
func TestGeneratedCurrent(t *testing.T) {
	src, err := os.ReadFile("types.go")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema, md, err := GenerateDocs(src, example)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"schema.json": schema, "../../docs/config.schema.json": schema, "../../docs/config.md": md} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `go generate ./internal/clustercfg`", name)
		}
	}
	if !bytes.Equal(Schema(), schema) {
		t.Error("Schema() is not the generated schema")
	}
}
