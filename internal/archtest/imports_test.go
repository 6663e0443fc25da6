// Package archtest checks that the code keeps the layering that
// docs/architecture.md describes.
package archtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/corral-cluster/corral/internal/lab"
)

const module = "github.com/corral-cluster/corral/"

// knownBad are imports that break the table and are being removed (issue
// 12 §7): each must still occur, so that the list shrinks as they go.
var knownBad = map[string]string{}

// layer is one row of the table.
type layer struct {
	n    int
	nor  []string // prefixes the row's packages may not import
	line int
}

var (
	rowRE  = regexp.MustCompile(`^\|\s*(-?\d+)\s*\|([^|]*)\|([^|]*)\|\s*$`)
	codeRE = regexp.MustCompile("`([^`]+)`")
)

// readTable reads the layering table of docs/architecture.md: package
// (relative to the module) -> its layer.
func readTable(t *testing.T, path string) map[string]layer {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table := map[string]layer{}
	in := false
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		s := sc.Text()
		if strings.HasPrefix(s, "## ") {
			in = s == "## Layering"
			continue
		}
		m := rowRE.FindStringSubmatch(s)
		if !in || m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		var nor []string
		for _, c := range codeRE.FindAllStringSubmatch(m[3], -1) {
			nor = append(nor, c[1])
		}
		for _, c := range codeRE.FindAllStringSubmatch(m[2], -1) {
			if old, dup := table[c[1]]; dup {
				t.Errorf("%s:%d: %s is already in layer %d (line %d)", path, ln, c[1], old.n, old.line)
			}
			table[c[1]] = layer{n: n, nor: nor, line: ln}
		}
	}
	if len(table) == 0 {
		t.Fatalf("%s: no layering table under \"## Layering\"", path)
	}
	return table
}

// graph is every package of the module (with non-test Go files) -> its
// imports inside the module, all relative to the module.
func graph(t *testing.T, root string) map[string][]string {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{len .GoFiles}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[1] == "0" {
			continue // only test files: nothing imports them
		}
		p := strings.TrimPrefix(f[0], module)
		g[p] = []string{}
		for _, imp := range f[2:] {
			if strings.HasPrefix(imp, module) {
				g[p] = append(g[p], strings.TrimPrefix(imp, module))
			}
		}
	}
	return g
}

// violations lists every import of g that the table forbids, and every
// package missing from it.
func violations(table map[string]layer, g map[string][]string) []string {
	var out []string
	for p, imps := range g {
		lp, ok := table[p]
		if !ok {
			out = append(out, fmt.Sprintf("%s is not in the layering table of docs/architecture.md: give it a row", p))
			continue
		}
		for _, imp := range imps {
			li, ok := table[imp]
			switch {
			case !ok:
				// reported as a missing package on its own
			case li.n >= lp.n:
				out = append(out, fmt.Sprintf("%s -> %s: layer %d imports layer %d (only lower layers)", p, imp, lp.n, li.n))
			default:
				for _, no := range lp.nor {
					if imp == no || strings.HasPrefix(imp, no) {
						out = append(out, fmt.Sprintf("%s -> %s: %s may not import %s", p, imp, p, no))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportLayering(t *testing.T) {
	lab.Need(t, lab.Tool("go"))
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	table := readTable(t, filepath.Join(root, "docs", "architecture.md"))
	g := graph(t, root)
	seen := map[string]bool{}
	for _, v := range violations(table, g) {
		edge, _, _ := strings.Cut(v, ":")
		if _, ok := knownBad[edge]; ok {
			seen[edge] = true
			continue
		}
		t.Error(v)
	}
	for edge, why := range knownBad {
		if !seen[edge] {
			t.Errorf("%s no longer breaks the layering (%s): remove it from knownBad", edge, why)
		}
	}
}

// TestViolations checks the checker on a made-up graph.
func TestViolations(t *testing.T) {
	table := map[string]layer{
		"a": {n: 0}, "b": {n: 1}, "c": {n: 1}, "d": {n: 2, nor: []string{"x/"}}, "x/y": {n: 0},
	}
	g := map[string][]string{
		"a": {}, "b": {"a"}, "c": {"b"}, "d": {"a", "x/y", "c"}, "x/y": {}, "e": {"a"},
	}
	got := violations(table, g)
	want := []string{
		"c -> b: layer 1 imports layer 1 (only lower layers)",
		"d -> x/y: d may not import x/",
		"e is not in the layering table of docs/architecture.md: give it a row",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
