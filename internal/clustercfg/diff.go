package clustercfg

import (
	"bytes"
	"fmt"
	"strings"
)

// diffContext is the unchanged lines shown around each change.
const diffContext = 3

// diffWork bounds Myers' search: (lines) x (edit distance) steps. Past
// it the differing middle is shown as one replaced section; still a
// correct diff, only not the shortest.
const diffWork = 40_000_000

type edit struct {
	op   byte // ' ', '-', '+'
	text string
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

func diff(a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	A, B := splitLines(a), splitLines(b)
	edits := diffLines(A, B)
	var out strings.Builder
	writeHunks(&out, edits)
	if out.Len() == 0 {
		// Only the final newline differs.
		return "@@ end of file @@\n\\ final newline differs\n"
	}
	return out.String()
}

func diffLines(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []edit
	for _, l := range a[:pre] {
		out = append(out, edit{' ', l})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	maxD := diffWork / (len(ma) + len(mb) + 1)
	mid, ok := myers(ma, mb, min(maxD, 2000))
	if !ok {
		for _, l := range ma {
			mid = append(mid, edit{'-', l})
		}
		for _, l := range mb {
			mid = append(mid, edit{'+', l})
		}
	}
	out = append(out, mid...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, edit{' ', l})
	}
	return out
}

// myers is the shortest edit script (Myers 1986, greedy forward search
// keeping each round's frontier to walk back); false past maxD edits.
func myers(a, b []string, maxD int) ([]edit, bool) {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil, true
	}
	max := n + m
	off := max + 1
	v := make([]int32, 2*max+3)
	var trace [][]int32 // trace[d] = v[-d..d] before round d
	found := -1
	for d := 0; d <= max && found < 0; d++ {
		if d > maxD {
			return nil, false
		}
		trace = append(trace, append([]int32(nil), v[off-d:off+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = int(v[off+k+1])
			} else {
				x = int(v[off+k-1]) + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = int32(x)
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	var rev []edit
	x, y := n, m
	for d := found; d >= 0; d-- {
		tv := trace[d]
		at := func(k int) int { return int(tv[k+d]) }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := 0
		if d > 0 {
			px = at(pk)
		}
		py := px - pk
		for x > px && y > py {
			rev = append(rev, edit{' ', a[x-1]})
			x--
			y--
		}
		if d > 0 {
			if x == px {
				rev = append(rev, edit{'+', b[y-1]})
			} else {
				rev = append(rev, edit{'-', a[x-1]})
			}
		}
		x, y = px, py
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, true
}

// writeHunks prints edits as unified-diff hunks.
func writeHunks(w *strings.Builder, e []edit) {
	// aAt[i], bAt[i]: the line numbers in a and b where e[i] stands
	aAt, bAt := make([]int, len(e)+1), make([]int, len(e)+1)
	aAt[0], bAt[0] = 1, 1
	for i, x := range e {
		aAt[i+1], bAt[i+1] = aAt[i], bAt[i]
		if x.op != '+' {
			aAt[i+1]++
		}
		if x.op != '-' {
			bAt[i+1]++
		}
	}
	for i := 0; i < len(e); {
		if e[i].op == ' ' {
			i++
			continue
		}
		start := max(0, i-diffContext)
		end := i
		// extend while the next change is within 2*context of this one
		for j := i; j < len(e); j++ {
			if e[j].op != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(len(e), end+diffContext)
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aAt[start], aAt[end]-aAt[start]), hunkRange(bAt[start], bAt[end]-bAt[start]))
		for _, x := range e[start:end] {
			w.WriteByte(x.op)
			w.WriteString(x.text)
			w.WriteByte('\n')
		}
		i = end
	}
}

func hunkRange(start, n int) string {
	if n == 0 {
		start-- // an empty range names the line before it
	}
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
