package clustercfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// MaxDocument is the largest configuration Parse reads: far above any
// real cluster (1,000 services with 10,000 servers is under 1 MiB).
const MaxDocument = 16 << 20

// decoder fills the Go types from a yaml.Node tree by hand so that each
// error names its YAML path and line, and unknown fields are errors.
type decoder struct {
	file  string
	errs  Errors
	lines map[string]int // YAML path -> line of its key (or element)
	// budget bounds the nodes visited: aliases let a small document
	// name a huge tree (billion laughs), and this walk follows them.
	budget int
	spent  bool
}

func newDecoder(file string, budget int) *decoder {
	return &decoder{file: file, lines: map[string]int{}, budget: budget}
}

func (d *decoder) errf(line int, path, format string, a ...any) {
	if l, ok := d.lines[path]; ok {
		line = l // the key's line: a block value starts below it
	}
	if path == "" {
		path = "(document)"
	}
	d.errs = append(d.errs, &Error{File: d.file, Path: path, Line: line, Msg: fmt.Sprintf(format, a...)})
}

// countNodes is the size of the tree as written (aliases not followed).
func countNodes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

// parseDocument turns bytes into the root mapping node (nil: empty
// document), or a syntax error with its line.
func parseDocument(file string, data []byte) (root *yaml.Node, err error) {
	// The YAML library has panicked on hostile input in past versions;
	// bytes from the API must not take the station down.
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, Errors{{File: file, Path: "(syntax)", Line: 1, Msg: fmt.Sprintf("YAML parser failed: %v", r)}}
		}
	}()
	if len(data) > MaxDocument {
		return nil, Errors{{File: file, Path: "(document)", Line: 1, Msg: fmt.Sprintf("%d bytes: a configuration is at most %d", len(data), MaxDocument)}}
	}
	if e := notUTF8(file, data); e != nil {
		return nil, Errors{e}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // no document at all: empty
		}
		e := syntaxError(file, err)
		if l := firstBadLine(data); l > e.Line {
			e.Line = l
		}
		if tabIndented(data, e.Line) {
			e.Msg += " (a tab: YAML indents with spaces)"
		}
		return nil, Errors{e}
	}
	// A second document is refused rather than ignored.
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, Errors{{File: file, Path: "(document)", Line: more.Line, Msg: "more than one YAML document ('---'); a configuration is one"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Errors{syntaxError(file, err)}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root = doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil
	}
	return root, nil
}

// notUTF8 refuses a document that is not UTF-8 text, naming the line
// and column of the first bad byte (nil: valid). The YAML parser's own
// words for it ("incomplete UTF-8 octet sequence") say less, and the
// station's JSON API would turn such bytes into U+FFFD silently.
func notUTF8(file string, data []byte) *Error {
	if utf8.Valid(data) {
		return nil
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return &Error{File: file, Path: "(syntax)", Line: line,
				Msg: fmt.Sprintf("not UTF-8 text: byte 0x%02X at column %d (a configuration is UTF-8; convert it, e.g. iconv -f latin1 -t utf-8)", data[i], col)}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += n
	}
	return nil
}

// tabIndented says whether line (1-based) of data has a tab in its
// indentation: what YAML forbids and its parser names obscurely.
func tabIndented(data []byte, line int) bool {
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) {
		return false
	}
	l := lines[line-1]
	indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
	return bytes.IndexByte(indent, '\t') >= 0
}

// firstBadLine is the first line whose prefix of the document fails to
// parse (0: unknown). yaml.v3 names the line where the enclosing block
// began for parser errors (an indentation slip deep in a list points at
// the list); this finds the line where it went wrong. Binary search:
// about 20 parses, on the error path only, of documents up to 1 MiB.
func firstBadLine(data []byte) int {
	if len(data) > 1<<20 {
		return 0
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	prefixFails := func(k int) bool {
		var n yaml.Node
		return yaml.Unmarshal(bytes.Join(lines[:k], nil), &n) != nil
	}
	if !prefixFails(len(lines)) {
		return 0
	}
	lo, hi := 1, len(lines) // the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi) / 2
		if prefixFails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// digitsRE is an integer too large for the YAML library to call one.
var digitsRE = regexp.MustCompile(`^[-+]?[0-9]{19,}$`)

var lineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxError(file string, err error) *Error {
	msg := err.Error()
	line := 1
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &Error{File: file, Path: "(syntax)", Line: line, Msg: msg}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldInfo is one struct field's YAML name and whether it is required
// (no omitempty).
type fieldInfo struct {
	index    int
	name     string
	required bool
}

func fieldsOf(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, fieldInfo{i, name, !strings.Contains(opts, "omitempty")})
	}
	return out
}

// resolve follows aliases and spends the budget; nil when it is spent.
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		d.errf(0, path, "alias chain too long")
		return nil
	}
	d.budget--
	if d.budget < 0 {
		if !d.spent {
			d.spent = true
			d.errf(n.Line, path, "document expands too much through aliases ('*name'); write it out")
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!str":
			return fmt.Sprintf("the string %q", clip(n.Value))
		}
		return fmt.Sprintf("%q", clip(n.Value))
	}
	return "something else"
}

func clip(s string) string {
	if len(s) > 40 {
		n := 40
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // not inside a character: messages stay UTF-8
		}
		return s[:n] + "..."
	}
	return s
}

// decode fills v (addressable) from n; path names it in errors.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.spent {
		return
	}
	n = d.resolve(n, path)
	if n == nil || isNull(n) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		d.decode(n, nv.Elem(), path)
		v.Set(nv)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errf(n.Line, path, "want a list, got %s", kindName(n))
			return
		}
		if len(n.Content) == 0 {
			return // empty and absent are one thing, so Marshal round-trips
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			if d.spent {
				return
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = e.Line
			if isNull(e) && s.Index(i).Kind() == reflect.Struct {
				d.errf(e.Line, p, "an empty item (want a mapping)")
				continue
			}
			d.decode(e, s.Index(i), p)
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errf(n.Line, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			if n.Kind == yaml.ScalarNode && digitsRE.MatchString(n.Value) {
				d.errf(n.Line, path, "%s: out of range", clip(n.Value))
				return
			}
			d.errf(n.Line, path, "want an integer, got %s", kindName(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&f) != nil {
			d.errf(n.Line, path, "want a number, got %s", kindName(n))
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.errf(n.Line, path, "want true or false, got %s", kindName(n))
			return
		}
		v.SetBool(b)
	default:
		d.errf(n.Line, path, "internal: no decoder for %s", v.Type())
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errf(n.Line, path, "want a mapping (key: value), got %s", kindName(n))
		return
	}
	fields := fieldsOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errf(k.Line, path, "a key must be a plain name, got %s", kindName(k))
			continue
		}
		p := join(path, k.Value)
		if k.Value == "<<" {
			d.errf(k.Line, p, "merge keys ('<<') are not supported; write the fields out")
			continue
		}
		if l, dup := seen[k.Value]; dup {
			d.errs = append(d.errs, &Error{File: d.file, Path: p, Line: k.Line, Msg: fmt.Sprintf("defined twice (first on line %d)", l)})
			continue
		}
		seen[k.Value] = k.Line
		var f *fieldInfo
		for j := range fields {
			if fields[j].name == k.Value {
				f = &fields[j]
			}
		}
		if f == nil {
			names := make([]string, len(fields))
			for j, fi := range fields {
				names[j] = fi.name
			}
			msg := fmt.Sprintf("unknown field '%s'", clip(k.Value))
			if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf("; did you mean '%s'?", s)
			} else {
				msg += " (known: " + strings.Join(names, ", ") + ")"
			}
			d.errf(k.Line, p, "%s", msg)
			continue
		}
		d.lines[p] = k.Line
		fv := v.Field(f.index)
		d.decode(val, fv, p)
		if f.required && fv.Kind() == reflect.String && fv.String() == "" && !d.spent {
			d.errf(k.Line, p, "empty (required)")
		}
	}
	for _, f := range fields {
		if _, ok := seen[f.name]; f.required && !ok {
			d.errf(n.Line, join(path, f.name), "missing (required)")
		}
	}
}

// suggest is the known name nearest to s, if near enough to be a typo.
func suggest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if dd := editDistance(s, k); dd < bestD && dd < len(k) {
			best, bestD = k, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	// optimal string alignment: a swap of neighbours (vpi, vip) is one edit
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	for j := range rows[1] {
		rows[1][j] = j
	}
	for i := 1; i <= len(a); i++ {
		pp, prev, cur := rows[0], rows[1], rows[2]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			c = min(c, prev[j]+1, cur[j-1]+1)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				c = min(c, pp[j-2]+1)
			}
			cur[j] = c
		}
		rows[0], rows[1], rows[2] = prev, cur, pp
	}
	return rows[1][len(b)]
}

func sortErrors(es Errors) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
}
