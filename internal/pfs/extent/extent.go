// Package extent is arithmetic on byte ranges of an object, shared by the
// client (stale records it knows), meta (stale records it keeps) and fsck
// (damage it reports).
package extent

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// End as a Range's Hi means "to the end of the object, however long".
const End = math.MaxUint64

// Range is the bytes [Lo, Hi) of an object.
type Range struct{ Lo, Hi uint64 }

// FromOffLen is the range the protocol's (Off, Len) pairs mean: Len 0 is to
// the end, and so is a Len that would run past the largest offset.
func FromOffLen(off, n uint64) Range {
	if n == 0 || off+n < off {
		return Range{off, End}
	}
	return Range{off, off + n}
}

// OffLen is r as the protocol's (Off, Len) (Len 0: to the end).
func (r Range) OffLen() (off, n uint64) {
	if r.Hi == End {
		return r.Lo, 0
	}
	return r.Lo, r.Hi - r.Lo
}

// Empty reports whether r holds no byte.
func (r Range) Empty() bool { return r.Hi <= r.Lo }

// Overlaps reports whether r and s share a byte.
func (r Range) Overlaps(s Range) bool { return r.Lo < s.Hi && s.Lo < r.Hi && !r.Empty() && !s.Empty() }

// Touches reports whether r and s overlap or are adjacent (one range
// would cover both with nothing else).
func (r Range) Touches(s Range) bool { return r.Lo <= s.Hi && s.Lo <= r.Hi }

// Hull is the smallest range covering r and s; an empty one is ignored.
func (r Range) Hull(s Range) Range {
	switch {
	case r.Empty():
		return s
	case s.Empty():
		return r
	}
	return Range{min(r.Lo, s.Lo), max(r.Hi, s.Hi)}
}

func (r Range) String() string {
	if r.Hi == End {
		return fmt.Sprintf("[%d, end)", r.Lo)
	}
	return fmt.Sprintf("[%d, %d)", r.Lo, r.Hi)
}

// Union is the ranges of a and b as one sorted list, overlapping or
// adjacent ranges merged, empty ones dropped. a and b may be in any order.
func Union(a, b []Range) []Range {
	all := make([]Range, 0, len(a)+len(b))
	for _, x := range append(slices.Clip(a), b...) {
		if !x.Empty() {
			all = append(all, x)
		}
	}
	slices.SortFunc(all, func(x, y Range) int { return cmp.Compare(x.Lo, y.Lo) })
	var out []Range
	for _, x := range all {
		if n := len(out); n > 0 && x.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, x.Hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

// Intersect is the bytes in both a and b, each sorted without overlaps
// (as Union returns them).
func Intersect(a, b []Range) []Range {
	var out []Range
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].Lo, b[j].Lo), min(a[i].Hi, b[j].Hi)
		if lo < hi {
			out = append(out, Range{lo, hi})
		}
		if a[i].Hi < b[j].Hi {
			i++
		} else {
			j++
		}
	}
	return out
}
