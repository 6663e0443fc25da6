package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// A Skip is one test that skipped, with the reason it logged.
type Skip struct {
	Package, Test, Reason string
	Allowed               string // the allow-list's why, "" when not allowed
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail name the package so
	Test       string
	Output     string
}

// Filter reads `go test -json` from r and writes to w what plain `go test`
// prints: one line per package and the output of every failed test or
// package (lines that are not JSON, e.g. from the go command, pass
// through). It returns the tests that skipped, in order of package and
// name.
func Filter(r io.Reader, w io.Writer) ([]Skip, error) {
	type key struct{ pkg, test string }
	out := map[key][]string{}
	var skips []Skip
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		if e.Package == "" {
			e.Package = e.ImportPath
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output", "build-output":
			out[k] = append(out[k], e.Output)
		case "build-fail":
			fmt.Fprint(w, strings.Join(out[k], ""))
			delete(out, k)
		case "fail":
			fmt.Fprint(w, strings.Join(out[k], ""))
			delete(out, k)
		case "skip":
			if e.Test != "" {
				skips = append(skips, Skip{Package: e.Package, Test: e.Test, Reason: reason(out[k])})
			} else {
				fmt.Fprint(w, lastLines(out[k]))
			}
			delete(out, k)
		case "pass":
			if e.Test == "" {
				fmt.Fprint(w, lastLines(out[k]))
			}
			delete(out, k)
		}
	}
	// What never ended (go test killed, a stream cut short) is shown, not
	// lost.
	var left []key
	for k, lines := range out {
		if len(lines) > 0 {
			left = append(left, k)
		}
	}
	sort.Slice(left, func(i, j int) bool {
		if left[i].pkg != left[j].pkg {
			return left[i].pkg < left[j].pkg
		}
		return left[i].test < left[j].test
	})
	for _, k := range left {
		fmt.Fprint(w, strings.Join(out[k], ""))
	}
	sort.SliceStable(skips, func(i, j int) bool {
		if skips[i].Package != skips[j].Package {
			return skips[i].Package < skips[j].Package
		}
		return skips[i].Test < skips[j].Test
	})
	return skips, sc.Err()
}

// lastLines keeps of a passed package's output its summary line ("ok
// pkg 1.2s", "? pkg [no test files]"), dropping the per-test lines -json
// turns on.
func lastLines(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?  ") || strings.HasPrefix(l, "ok\t") || strings.HasPrefix(l, "?\t") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// reason is what a skipped test logged, without the framing lines of the
// test runner, on one line.
func reason(lines []string) string {
	var r []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		r = append(r, t)
	}
	return strings.Join(r, " ")
}

// ReadAllow reads an allow-list: per line a test name (as go test names
// it, subtests with their slash) and, after white space, why it may skip
// here; # starts a comment. A line without a why is an error.
func ReadAllow(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	allow := map[string]string{}
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, why, _ := strings.Cut(l, " ")
		if name2, why2, ok := strings.Cut(l, "\t"); ok && len(name2) < len(name) {
			name, why = name2, why2
		}
		why = strings.TrimSpace(why)
		if why == "" {
			return nil, fmt.Errorf("%s:%d: %q says no why it may skip", path, i+1, name)
		}
		allow[name] = why
	}
	return allow, nil
}

// Mark sets Allowed on every skip the allow-list names and returns the
// ones it does not.
func Mark(skips []Skip, allow map[string]string) (bad []Skip) {
	for i := range skips {
		skips[i].Allowed = allow[skips[i].Test]
		if skips[i].Allowed == "" {
			bad = append(bad, skips[i])
		}
	}
	return bad
}

// Table writes the skips as a plain-text table.
func Table(w io.Writer, skips []Skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "no test skipped")
		return
	}
	fmt.Fprintf(w, "%d tests skipped:\n", len(skips))
	for _, s := range skips {
		mark := "NOT ALLOWED"
		if s.Allowed != "" {
			mark = "allowed"
		}
		fmt.Fprintf(w, "  %-11s %s %s: %s\n", mark, strings.TrimPrefix(s.Package, "github.com/corral-cluster/corral/"), s.Test, s.Reason)
	}
}
